"""Scores of a few nodes computed in Python ints equal the numpy ones, bit for bit.

The score plugins take a Python path for calls of up to ``FEW_NODES`` nodes (most calls of a
cycle). A float that differs in its last bit can flip FGD's truncated sigmoid at Δ = 0, so the
fragment rows must be the very same ints, and a node's GPU score the same whichever other nodes
share its call.
"""

from __future__ import annotations

from datetime import datetime, timezone

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from sched_builders import config, node
from test_scheduler_properties import allocations, clusters

from crossdock.queue.scheduler.framework import FEW_NODES, CycleState
from crossdock.queue.scheduler.inventory import FULL, Inventory
from crossdock.queue.scheduler.plugins import gpu_frag
from crossdock.queue.scheduler.plugins._resources import resource_scores
from crossdock.queue.scheduler.plugins.gpu_fragmentation import FragCache, typical_of
from crossdock.queue.scheduler.registry import create
from crossdock.queue.scheduler.request import Request

NOW = datetime(2026, 1, 1, tzinfo=timezone.utc)
SETTINGS = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def requests(draw, models: list[str], min_size: int = 1, max_size: int = 40) -> list[Request]:
    """Jobs of many shapes (CPU only, whole GPUs, shares; some restricted to one model), enough
    for more than 16 typical pods, where numpy's dot products switch to blocked kernels."""
    out = []
    for k in range(draw(st.integers(min_size, max_size))):
        kind = draw(st.sampled_from(["cpu", "gpus", "share"]))
        gpus = draw(st.sampled_from([1, 1, 2, 4, 8])) if kind == "gpus" else 0
        share = draw(st.sampled_from([100, 250, 460, 500, 750])) if kind == "share" else 0
        only = frozenset(draw(st.sampled_from([[], [], models[:1]]))) if kind != "cpu" else frozenset()
        out.append(Request(k, "q", "u", 100, True, True, ("gpu", "share"), gpus=gpus, gpu_share_milli=share,
                           cpu_milli=draw(st.integers(1, 24)) * 1000, models=only))
    return out


def cluster_state(data) -> tuple[CycleState, list[Request]]:
    nodes = data.draw(clusters()) + [node(f"x{k}", pool="share", cpus=96, gpus=8, islands=2, sharing=True,
                                          model="L4") for k in range(2)]
    inv = Inventory(nodes)
    inv.load(data.draw(allocations(nodes)))
    state = CycleState(inv, config(), NOW)
    reqs = data.draw(requests([m for m in inv.model_names if m]))
    state.extra["frag"] = frag_cache(inv, reqs)
    return state, reqs


def frag_cache(inv: Inventory, reqs: list[Request]) -> FragCache:
    models = sorted({m for m in inv.model if m})
    return FragCache(inv, typical_of(reqs, models), np.array([models.index(m) if m else -1 for m in inv.model], np.int64))


def change_nodes(data, inv: Inventory, steps: int) -> None:
    """Whole GPUs and shares taken (CPU too), some given back."""
    done = []
    for _ in range(steps):
        i = data.draw(st.integers(0, inv.n - 1))
        free = [int(c) for c in np.flatnonzero(inv.dev_exists[i] & (inv.dev_free[i] >= 250))]
        if free and inv.cpu_free[i] >= 1000:
            c = data.draw(st.sampled_from(free))
            amount = data.draw(st.sampled_from([250, FULL])) if inv.dev_free[i, c] == FULL else 250
            done.append(inv.take(i, 1000, 0, [(c, amount)], [], None))
        elif done and data.draw(st.booleans()):
            inv.undo(done.pop())


def few_nodes(data, n: int) -> np.ndarray:
    return np.array(data.draw(st.lists(st.integers(0, n - 1), min_size=1, max_size=FEW_NODES, unique=True)), np.int64)


@SETTINGS
@given(data=st.data())
def test_settling_a_few_nodes_in_python_equals_numpy(data):
    state, reqs = cluster_state(data)
    inv, ints = state.inventory, state.extra["frag"]
    arrays = frag_cache(inv, reqs)
    change_nodes(data, inv, data.draw(st.integers(1, 8)))
    rows = list(ints.dirty)[:FEW_NODES]
    assume(rows)
    ints.settle_ints(rows)
    arrays.settle_arrays(np.array(rows, np.int64))
    for name in ("total", "cnt", "below", "sorted_left", "fragments", "cpu_fragments"):
        assert np.array_equal(getattr(ints, name), getattr(arrays, name)), name


@SETTINGS
@given(data=st.data())
def test_crossdock_score_of_a_few_nodes_in_python_equals_numpy(data):
    state, reqs = cluster_state(data)
    plugin = create(gpu_frag.CROSSDOCK_PLUGIN)
    cache = state.extra["frag"]
    for _ in range(data.draw(st.integers(1, 3))):
        change_nodes(data, state.inventory, data.draw(st.integers(0, 4)))
        cache.settle()
        for req in reqs:
            idx = few_nodes(data, state.inventory.n)
            fgd, aware, shared = plugin.after_ints(state, req, cache, idx)
            want_fgd, want_aware, want_shared = plugin.after_arrays(state, req, cache, idx)
            assert np.array_equal(fgd, want_fgd) and np.array_equal(aware, want_aware)
            assert (shared is None) == (want_shared is None)
            assert shared is None or np.array_equal(shared, want_shared)


@SETTINGS
@given(data=st.data(), plugin=st.sampled_from([gpu_frag.CROSSDOCK_PLUGIN, gpu_frag.NAME]))
def test_a_nodes_gpu_score_does_not_depend_on_the_other_nodes_of_the_call(data, plugin):
    state, reqs = cluster_state(data)
    score = create(plugin).score
    change_nodes(data, state.inventory, data.draw(st.integers(0, 6)))
    every = np.arange(state.inventory.n)
    for req in reqs:
        alone = [int(score(state, req, np.array([i]))[0]) for i in every]
        assert score(state, req, every).tolist() == alone


@SETTINGS
@given(data=st.data(), strategy=st.sampled_from(["requested_to_capacity_ratio", "most_allocated", "least_allocated"]))
def test_resource_scores_of_a_few_nodes_in_python_equal_numpy(data, strategy):
    state, reqs = cluster_state(data)
    change_nodes(data, state.inventory, data.draw(st.integers(0, 6)))
    shape = [(0, 0), (100, 10)] if strategy == "requested_to_capacity_ratio" else None
    every = np.tile(np.arange(state.inventory.n), FEW_NODES + 1)  # numpy's path, every node in it
    for req in reqs:
        want = resource_scores(state, req, every, strategy, shape)[:state.inventory.n]
        idx = few_nodes(data, state.inventory.n)
        assert resource_scores(state, req, idx, strategy, shape).tolist() == want[idx].tolist()


@pytest.mark.parametrize("left,milli,num", [
    ([1000, 1000, 1000, 1000], 1000, 2),  # whole GPUs from an idle node
    ([1000, 600, 250, 0], 250, 1),  # a share that empties a shared GPU
    ([1000, 600, 250, 0], 500, 1),  # a share on the best-fit GPU: 600 -> 100
    ([750, 0, 0, 0], 1000, 0),  # CPU only: nothing changes
])
def test_one_node_parts_equal_the_array_functions(left, milli, num):
    work = gpu_frag.typical_pods(np.array([1000, 2000, 4000, 8000]), np.array([1000, 500, 250, 1000]),
                                 np.array([1, 1, 1, 2]), np.full(4, gpu_frag.ANY_MODEL))
    need = np.maximum(work.milli, 1).tolist()
    ordered = gpu_frag.sorted_free(np.array([left]))[0].tolist()
    prefix, cnt, below = gpu_frag.node_parts(ordered, need)
    total, want_cnt, want_below = gpu_frag.frag_parts(np.array([left]), work)
    assert (prefix[-1], cnt, below) == (int(total[0]), want_cnt[0].tolist(), want_below[0].tolist())
    chosen = min((x for x in left if x >= milli), default=0) if milli < FULL else 0
    after = gpu_frag.node_parts_after(prefix[-1], cnt, below, need, milli, num, chosen)
    want = gpu_frag.parts_after(total, want_cnt, want_below, work, milli, num, np.array([chosen]))
    assert after == (int(want[0][0]), want[1][0].tolist(), want[2][0].tolist())


deltas = st.lists(st.one_of(st.just(0.0), st.floats(-9000, 9000), st.integers(-9000, 9000).map(float)),
                  min_size=1, max_size=FEW_NODES)


@SETTINGS
@given(delta=deltas, data=st.data())
def test_crossdock_scores_of_a_few_placements_equal_the_array_formula(delta, data):
    n = len(delta)
    tier = data.draw(st.lists(st.integers(0, 3), min_size=n, max_size=n))
    aware = data.draw(st.none() | st.lists(st.floats(-9000, 9000), min_size=n, max_size=n))
    fill = data.draw(st.none() | st.lists(st.integers(-FULL, FULL), min_size=n, max_size=n))
    want = gpu_frag.crossdock_score(np.array(delta), np.array(tier), None if aware is None else np.array(aware),
                                    None if fill is None else np.array(fill))
    assert gpu_frag.crossdock_scores_of(delta, tier, aware, fill) == want.tolist()
