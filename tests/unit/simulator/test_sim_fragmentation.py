"""The fragmentation measure on hand-made nodes, with the numbers worked out by hand.

Workload (typical pods): t1 = 4 cores + 500 milli of one GPU (50 %), t2 = 8 cores + one whole
GPU (25 %), t3 = 2 cores, no GPU (25 %).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sim_builders import nodes, state, typical

from crossdock.queue.scheduler.plugins import gpu_frag

WORKLOAD = typical((4000, 500, 1, 0.5), (8000, 1000, 1, 0.25), (2000, 0, 0, 0.25))

CASES = [
    # id, GPU free per GPU, CPU free, expected frag (milli-GPU)
    # t1 fits (1000 >= 500), leaves the 300 GPU: 0.5*300; t2 fits, same 300: 0.25*300;
    # t3 asks no GPU, so all 1300 free milli are fragments to it: 0.25*1300  -> 550
    ("one-free-one-sliver", [1000, 300], 10_000, 550.0),
    # t2 lacks CPU (6000 < 8000): all 1300 for it -> 150 + 325 + 325
    ("cpu-short-for-t2", [1000, 300], 6_000, 800.0),
    # no GPU holds 500: t1 and t2 see all 500 free as fragments; t3 too -> 500
    ("only-slivers", [200, 300], 10_000, 500.0),
    # everything allocated: nothing is fragmented
    ("full", [0, 0], 10_000, 0.0),
    # idle node: t1, t2 fit with no sliver; only t3's share counts: 0.25*2000
    ("idle", [1000, 1000], 10_000, 500.0),
]


@pytest.mark.parametrize("left,cpu,expected", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_node_frag_by_hand(left, cpu, expected):
    st_ = state(nodes((16000, 1, 2, "T4")), WORKLOAD, gpu_left=[left], cpu_left=[cpu])
    assert st_.frag[0] == pytest.approx(expected)
    direct = gpu_frag.node_frag(np.array([left]), np.array([cpu]), np.array([1]), WORKLOAD)
    assert direct[0] == pytest.approx(expected)


def test_model_mismatch_makes_all_free_gpu_fragments():
    # t1 accepts only A10 (bit 0); the node has T4: t1 sees all 1300 -> 0.5*1300 + 75 + 325
    work = typical((4000, 500, 1, 0.5), (8000, 1000, 1, 0.25), (2000, 0, 0, 0.25),
                   spec=[0b01, gpu_frag.ANY_MODEL, gpu_frag.ANY_MODEL])
    st_ = state(nodes((16000, 1, 2, "T4")), work, gpu_left=[[1000, 300]], cpu_left=[10_000])
    assert st_.frag[0] == pytest.approx(1050.0)


def test_cluster_frag_is_the_sum_of_nodes():
    st_ = state(nodes((16000, 1, 2, "T4"), (16000, 1, 2, "T4")), WORKLOAD,
                gpu_left=[[1000, 300], [200, 300]], cpu_left=[10_000, 10_000])
    assert st_.frag_milli() == pytest.approx(1050.0)


def test_typical_pods_keep_the_most_frequent_shapes_up_to_the_threshold():
    cpu = np.array([1000] * 6 + [2000] * 3 + [3000])
    milli = np.array([500] * 6 + [1000] * 3 + [0])
    num = np.array([1] * 9 + [0])
    spec = np.full(10, gpu_frag.ANY_MODEL)
    t = gpu_frag.typical_pods(cpu, milli, num, spec, popularity=0.9)
    # 6 + 3 = 9 of 10 pods reach 90 %: the rare CPU-only shape is left out, the rest renormalized
    assert t.cpu.tolist() == [1000, 2000]
    assert t.freq.tolist() == pytest.approx([6 / 9, 3 / 9])
    t_all = gpu_frag.typical_pods(cpu, milli, num, spec, popularity=1.0)
    assert len(t_all) == 3 and t_all.freq.sum() == pytest.approx(1.0)


def test_zero_cpu_counts_as_100_milli_and_cpu_pods_carry_no_gpu():
    t = gpu_frag.typical_pods(np.array([0, 0]), np.array([700, 700]), np.array([0, 0]),
                              np.array([0b1, 0b1]), popularity=1.0)
    assert t.cpu.tolist() == [100] and t.milli.tolist() == [0] and t.spec.tolist() == [gpu_frag.ANY_MODEL]


@pytest.mark.parametrize("delta,expected", [(0, 50), (1000, 73), (-1000, 26), (100_000, 100), (-100_000, 0)])
def test_fgd_score_is_the_papers_integer_sigmoid(delta, expected):
    assert int(gpu_frag.fgd_score(np.array([delta]))[0]) == expected


levels = st.sampled_from([0, 50, 160, 190, 300, 470, 500, 810, 1000])


@settings(max_examples=150, deadline=None)
@given(left=st.lists(levels, min_size=8, max_size=8), milli=st.sampled_from([50, 160, 320, 470, 810]),
       g=st.integers(0, 7), whole=st.integers(0, 3))
def test_incremental_parts_match_a_rebuild(left, milli, g, whole):
    """parts_after (used to score every candidate at once) equals rebuilding the caches."""
    work = typical((4000, 500, 1, 0.4), (8000, 1000, 2, 0.3), (1000, 160, 1, 0.2), (2000, 0, 0, 0.1))
    arr = np.array([left], np.int64)
    total, cnt, below = gpu_frag.frag_parts(arr, work)
    if left[g] >= milli:
        after = arr.copy()
        after[0, g] -= milli
        got = gpu_frag.parts_after(total, cnt, below, work, milli, 1, np.array([left[g]]))
        want = gpu_frag.frag_parts(after, work)
        for a, b in zip(got, want):
            assert np.array_equal(a, b)
    free = [i for i, v in enumerate(left) if v == 1000]
    if whole and len(free) >= whole:
        after = arr.copy()
        after[0, free[:whole]] = 0
        got = gpu_frag.parts_after(total, cnt, below, work, 1000, whole)
        want = gpu_frag.frag_parts(after, work)
        for a, b in zip(got, want):
            assert np.array_equal(a, b)


def test_crossdock_score_orders_fgd_ties_by_packing_tier_only():
    delta = np.array([0.0, 0.0, 0.0, 300.0])
    tier = gpu_frag.packing_tier(np.array([False, True, True, False]), np.array([False, False, True, False]))
    assert tier.tolist() == [0, 1, 3, 0]
    score = gpu_frag.crossdock_score(delta, tier)
    # equal FGD scores (Δ = 0 -> 50): the shared GPU on a used node first, then the used node;
    # a better FGD score (Δ = 300 -> 57) wins whatever its tier
    assert np.argsort(-score).tolist() == [3, 2, 1, 0]


CPU_AWARE_CASES = [
    # id, GPU free per GPU, CPU free, expected CPU-aware frag (milli-GPU)
    # 10 cores feed two t1 (4 cores) but one t2 (8 cores): t2 strands one idle GPU, 0.25*1000;
    # t3 sees all 2000 -> 250 + 500
    ("idle-cpu-feeds-one-t2", [1000, 1000], 10_000, 750.0),
    # one GPU holds 500: no stranding beyond FGD's (same as FGD: 150 + 75 + 325)
    ("one-free-one-sliver", [1000, 300], 10_000, 550.0),
    # 6 cores: one t1 (one GPU usable, 0.5*1000), no t2 (0.25*2000), t3 0.25*2000
    ("cpu-for-one-t1", [1000, 1000], 6_000, 1500.0),
    ("full", [0, 0], 10_000, 0.0),
]


@pytest.mark.parametrize("left,cpu,expected", [c[1:] for c in CPU_AWARE_CASES], ids=[c[0] for c in CPU_AWARE_CASES])
def test_cpu_aware_frag_by_hand(left, cpu, expected):
    st_ = state(nodes((16000, 1, 2, "T4")), WORKLOAD, gpu_left=[left], cpu_left=[cpu])
    assert (st_.cpu_fragments @ WORKLOAD.freq)[0] == pytest.approx(expected)
    direct = gpu_frag.cpu_aware_frag(gpu_frag.sorted_free(np.array([left])), np.array([cpu]),
                                     np.array([[True, True, True]]), WORKLOAD)
    assert direct[0] == pytest.approx(expected)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from([0, 100, 300, 500, 700, 1000]), min_size=1, max_size=8),
       st.integers(0, 64_000))
def test_cpu_aware_frag_is_never_below_fgd(left, cpu):
    """Capping usable GPUs by CPU can only add fragments to FGD's measure."""
    arr = np.array([left])
    access = np.ones((1, len(WORKLOAD)), bool)
    fgd = gpu_frag.node_frag(arr, np.array([cpu]), np.array([0]), WORKLOAD)[0]
    ours = gpu_frag.cpu_aware_frag(gpu_frag.sorted_free(arr), np.array([cpu]), access, WORKLOAD)[0]
    assert ours >= fgd - 1e-9
    assert ours <= arr.sum() + 1e-9


def test_model_pressure_counts_only_model_constrained_gpu_demand():
    # t1 accepts only T4 (bit 1), t2 any model, t3 no GPU; node 0 is A10, node 1 is T4
    work = typical((4000, 500, 1, 0.5), (8000, 1000, 1, 0.25), (2000, 0, 0, 0.25),
                   spec=[0b10, gpu_frag.ANY_MODEL, gpu_frag.ANY_MODEL])
    access = gpu_frag.access_matrix(np.array([0, 1]), work)
    assert gpu_frag.model_pressure(access, work).tolist() == [0.0, 0.5]


def test_crossdock_score_with_cpu_aware_delta_needs_both_measures_to_agree():
    delta = np.array([0.0, 300.0, 300.0, 0.0])          # FGD: 50, 57, 57, 50
    aware = np.array([0.0, -2000.0, 300.0, 300.0])      # CPU-aware: 50, 11, 57, 57
    tier = np.array([0, 3, 0, 1])
    score = gpu_frag.crossdock_score(delta, tier, aware)
    # node 2 is liked by both (min 57); nodes 3 and 0 tie on min 50, node 3 has the higher sum;
    # node 1 strands GPUs without CPU (min 11) and loses whatever its FGD score and tier
    assert np.argsort(-score).tolist() == [2, 3, 0, 1]
    assert score.tolist() == [50 * 10_000 + 1000, 11 * 10_000 + 680 + 3, 57 * 10_000 + 1140, 50 * 10_000 + 1070 + 1]


def test_fill_sizes_keep_a_whole_gpu_and_the_common_shares_only():
    work = typical((4000, 810, 1, 0.40), (4000, 470, 1, 0.30), (2000, 160, 1, 0.01), (8000, 1000, 2, 0.19),
                   (2000, 0, 0, 0.10))
    # shares' frequency: 0.71; 160 is 0.01 / 0.71 = 1.4 % of it (< 3 %); the 2-GPU pod is no share
    assert gpu_frag.fill_sizes(work) == (470, 810, 1000)
    assert gpu_frag.fill_sizes(work, min_share=0.01) == (160, 470, 810, 1000)
    assert gpu_frag.fill_sizes(typical((4000, 1000, 1, 1.0))) == (1000,)


@pytest.mark.parametrize("gap,expected", [
    (0, 0), (1000, 0),   # nothing free; a whole GPU fills an idle one
    (190, 190),          # below every size: stays as it is
    (350, 30),           # 320
    (530, 60),           # 470
    (680, 30),           # 650 (or 320 + 320 + 40 left)
    (940, 0),            # 470 + 470
    (210, 210),
])
def test_fill_waste_by_hand(gap, expected):
    assert gpu_frag.fill_waste((320, 470, 650, 1000))[gap] == expected


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(1, 100).map(lambda x: x * 10), min_size=1, max_size=5))
def test_fill_waste_is_a_reachable_remainder_that_filling_never_raises(sizes):
    w = gpu_frag.fill_waste(sizes)
    steps = sorted(set(sizes))
    for g in range(0, 1001, 10):
        assert 0 <= w[g] <= g
        assert all(w[g - s] >= w[g] for s in steps if s <= g)  # optimal: no single fill improves on it
        assert w[g] == g or any(w[g - s] == w[g] for s in steps if s <= g)  # reached by some fill
    for a in steps:
        for b in steps:
            if a + b <= 1000:
                assert w[a + b] == 0


def test_crossdock_score_puts_the_fill_increase_of_a_share_first():
    delta = np.array([300.0, 0.0, 0.0])                  # FGD: 57, 50, 50
    tier = np.array([0, 1, 3])
    fill = np.array([150, 0, 0])
    score = gpu_frag.crossdock_score(delta, tier, None, fill)
    # node 0 has the best FGD score but its GPU's remnant could no longer be filled (+150)
    assert np.argsort(-score).tolist() == [2, 1, 0]
    assert score.tolist() == [850 * 10**7 + 570, 1000 * 10**7 + 501, 1000 * 10**7 + 503]
