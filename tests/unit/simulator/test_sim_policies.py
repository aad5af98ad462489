"""Each policy's choice on two- and three-node clusters where the right answer is known."""

from __future__ import annotations

import numpy as np
import pytest
from sim_builders import nodes, pod, state, typical

from crossdock.sim.policies import POLICIES, get_policy, packing_scores

WORK = typical((4000, 500, 1, 0.5), (8000, 1000, 1, 0.3), (2000, 0, 0, 0.2))
TWO_T4 = nodes((64000, 1 << 20, 2, "T4"), (64000, 1 << 20, 2, "T4"))


def choose(name, st_, p, seed=0):
    cand = st_.feasible(p)
    return get_policy(name)(st_, p, cand, np.random.default_rng(seed))


CASES = [
    # id, policy, GPU free per node, CPU free per node, pod, expected node
    ("packing-share-joins-a-used-gpu", "packing", [[1000, 1000], [600, 1000]], [64000, 64000], pod(1000, 300, 1), 1),
    ("packing-whole-gpu-prefers-used-node", "packing", [[1000, 1000], [1000, 0]], [64000, 64000], pod(1000, 1000, 1), 1),
    ("bestfit-least-left-over", "bestfit", [[1000, 1000], [1000, 1000]], [60000, 9000], pod(8000), 1),
    ("dotprod-smaller-free-vector", "dotprod", [[1000, 1000], [1000, 0]], [64000, 64000], pod(4000, 1000, 1), 1),
    ("fgd-share-fills-the-exact-hole", "fgd", [[1000, 1000], [1000, 500]], [64000, 64000], pod(4000, 500, 1), 1),
    ("fgd-cpu-pod-avoids-starving-gpus", "fgd", [[1000, 1000], [0, 0]], [10000, 10000], pod(4000), 1),
    ("crossdock-share-joins-a-shared-gpu", "crossdock", [[1000, 1000], [1000, 700]], [64000, 64000], pod(1000, 100, 1), 1),
    ("spread-least-allocated", "spread", [[1000, 1000], [1000, 1000]], [20000, 60000], pod(1000), 1),
    ("most-requested-fullest", "most-requested", [[1000, 1000], [1000, 1000]], [20000, 60000], pod(1000), 0),
]


@pytest.mark.parametrize("policy,left,cpu,p,expected", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_policy_choice(policy, left, cpu, p, expected):
    st_ = state(TWO_T4, WORK, gpu_left=left, cpu_left=cpu)
    node, gpus = choose(policy, st_, p)
    assert node == expected
    assert len(gpus) == p.num
    assert all(st_.gpu_left[node, g] >= p.milli for g in gpus)


def test_resource_weights_decide_which_free_resource_spread_looks_at():
    # n0 has more CPU free, n1 more memory: equal weights pick n1, CPU weighted x3 picks n0.
    table = nodes((64000, 1 << 20, 2, "T4"), (64000, 1 << 20, 2, "T4"))
    st_ = state(table, WORK, cpu_left=[60000, 32000])
    st_.mem_left[:] = [1 << 19, 1 << 20]
    p = pod(1000)
    cand = st_.feasible(p)
    assert get_policy("spread")(st_, p, cand, np.random.default_rng(0))[0] == 1
    assert get_policy("spread", {"cpu": 3})(st_, p, cand, np.random.default_rng(0))[0] == 0


def test_fgd_and_crossdock_pick_the_gpu_that_a_share_fits_best():
    st_ = state(nodes((64000, 1 << 20, 2, "T4")), WORK, gpu_left=[[1000, 500]])
    for name in ("fgd", "crossdock"):
        assert choose(name, st_, pod(4000, 500, 1)) == (0, (1,))


def test_whole_gpu_pods_take_fully_free_gpus():
    st_ = state(nodes((64000, 1 << 20, 4, "A10")), WORK, gpu_left=[[300, 1000, 0, 1000]])
    for name in POLICIES:
        node, gpus = choose(name, st_, pod(4000, 1000, 2))
        assert (node, gpus) == (0, (1, 3)), name


def test_random_spreads_over_feasible_nodes_only():
    three = nodes((64000, 1 << 20, 2, "T4"), (64000, 1 << 20, 2, "T4"), (64000, 1 << 20, 2, "A10"))
    st_ = state(three, WORK)
    spec_t4 = 0b10
    picks = {choose("random", st_, pod(1000, 1000, 1, spec=spec_t4), seed)[0] for seed in range(40)}
    assert picks == {0, 1}


def test_ties_go_to_the_first_node_of_the_fixed_order():
    st_ = state(nodes(*[(64000, 1 << 20, 2, "T4")] * 4), WORK)
    st_.tie_rank = np.array([3, 1, 0, 2])
    assert choose("fgd", st_, pod(4000, 1000, 1))[0] == 2
    st_.tie_rank = None
    picked = {choose("fgd", st_, pod(4000, 1000, 1), seed)[0] for seed in range(30)}
    assert picked == {0, 1, 2, 3}


@pytest.mark.parametrize("left,expected", [([1000, 1000], 31), ([1000, 0], 49), ([700, 1000], 93), ([400, 1000], 96)],
                         ids=["idle-node", "free-gpu-on-used-node", "shared-gpu-700", "shared-gpu-400"])
def test_gpu_packing_score_tiers(left, expected):
    st_ = state(nodes((64000, 1 << 20, 2, "T4")), WORK, gpu_left=[left])
    assert packing_scores(st_, pod(1000, 300, 1), np.array([0]))[0] == expected


def test_unknown_policy_names_the_choices():
    with pytest.raises(ValueError, match="fgd"):
        get_policy("tetris")
