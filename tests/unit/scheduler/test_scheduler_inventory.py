"""Inventory bookkeeping: bulk loading equals node-by-node updates; undo restores; device choice."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from sched_builders import node
from test_scheduler_properties import allocations, clusters

from crossdock.queue.scheduler import gpus
from crossdock.queue.scheduler.inventory import FULL, Inventory

SUMMARIES = ("cpu_used", "mem_used", "cpu_free", "mem_free", "gpu_free", "island_free", "share_top", "dev_free",
             "res_used")


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_bulk_load_equals_one_by_one(data):
    nodes = data.draw(clusters())
    allocs = data.draw(allocations(nodes))
    bulk, single = Inventory(nodes), Inventory(nodes)
    bulk.load(allocs)
    for a in allocs:
        single.apply(a)
    for name in SUMMARIES:
        assert np.array_equal(getattr(bulk, name), getattr(single, name)), name
    used = (bulk.cpu_used != 0) | (bulk.mem_used != 0) | (bulk.dev_exists & (bulk.dev_free != FULL)).any(axis=1)
    assert np.array_equal(bulk.sig[used], single.sig[used])


def test_take_then_undo_restores_the_node():
    inv = Inventory([node("a", gpus=4, islands=2)])
    before = {name: np.copy(getattr(inv, name)) for name in SUMMARIES}
    a = inv.take(0, 2000, 100, [(0, FULL), (1, FULL)], [], group=7)
    assert inv.gpu_free[0] == 2 and inv.island_free[0] == 2 and inv.group_nodes[7] == {0}
    inv.undo(a)
    for name, value in before.items():
        assert np.array_equal(getattr(inv, name), value), name
    assert inv.group_nodes[7] == set()


def test_device_choice():
    free = np.array([FULL, 0, FULL, FULL, FULL, FULL, 400, 900])
    exists = np.ones(8, bool)
    island = np.array([0, 0, 0, 0, 1, 1, 1, 1])
    assert gpus.choose_whole(free, exists, island, 2, 4) == [4, 5]  # the fullest island that fits
    assert gpus.choose_whole(free, exists, island, 3, 4) == [0, 2, 3]
    assert gpus.choose_whole(free, exists, island, 4, 4) is None  # fits one island's size: no spanning
    assert gpus.choose_whole(free, exists, island, 5, 4) == [0, 2, 3, 4, 5]
    assert gpus.choose_share(free, exists, 300) == 6
    assert gpus.choose_share(free, exists, 500) == 7
    assert gpus.choose_slices({"1g.10gb": ["s1", "s2"]}, "1g.10gb", 3) is None


@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_fragmentation_cache_follows_every_change(data):
    from crossdock.queue.scheduler.plugins.gpu_fragmentation import FragCache, typical_of
    from crossdock.queue.scheduler.request import Request

    nodes = data.draw(clusters())
    inv = Inventory(nodes)
    inv.load(data.draw(allocations(nodes)))
    reqs = [Request(k, "q", "u", 100, True, True, ("gpu",), gpus=g, gpu_share_milli=s, cpu_milli=1000)
            for k, (g, s) in enumerate([(1, 0), (2, 0), (0, 500), (0, 250), (0, 0)])]
    node_model = np.array([0 if m else -1 for m in inv.model], np.int64)
    cache = FragCache(inv, typical_of(reqs, ["a100"]), node_model)
    done = []
    for _ in range(data.draw(st.integers(1, 6))):
        i = data.draw(st.integers(0, inv.n - 1))
        idle = [int(c) for c in np.flatnonzero(inv.dev_exists[i] & (inv.dev_free[i] == FULL))]
        if idle and inv.cpu_free[i] >= 1000:
            done.append(inv.take(i, 1000, 0, [(idle[0], data.draw(st.sampled_from([FULL, 250])))], [], None))
        elif done and data.draw(st.booleans()):
            inv.undo(done.pop())
    cache.settle()
    fresh = FragCache(inv, cache.typical, node_model)
    assert np.array_equal(cache.fragments, fresh.fragments)
    assert np.array_equal(cache.cpu_fragments, fresh.cpu_fragments)
    assert np.array_equal(cache.cnt, fresh.cnt) and np.array_equal(cache.total, fresh.total)


@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_scores_per_distinct_state_equal_scores_per_node(data):
    from datetime import datetime

    from sched_builders import config, job

    from crossdock.queue.scheduler.framework import CycleState
    from crossdock.queue.scheduler.placement import place, score_distinct
    from crossdock.queue.scheduler.plugins.gpu_fragmentation import FragCache, typical_of
    from crossdock.queue.scheduler.profiles import profile_for
    from crossdock.queue.scheduler.request import build_request

    cfg = config()
    nodes = data.draw(clusters()) + [node(f"x{k}", gpus=8, islands=2) for k in range(3)]
    inv = Inventory(nodes)
    inv.load(data.draw(allocations(nodes)))
    state = CycleState(inv, cfg, datetime(2026, 1, 1))
    reqs = [build_request(job(k).gpus(g).cpus(c).build(), cfg)
            for k, (g, c) in enumerate(data.draw(st.lists(st.tuples(st.integers(1, 4), st.integers(1, 4)),
                                                          min_size=2, max_size=6)))]
    state.extra["frag"] = FragCache(inv, typical_of(reqs, inv.model_names), np.array(
        [inv.model_names.index(m) if m else -1 for m in inv.model], np.int64))
    prof = profile_for("binpack")
    for req in reqs:
        idx = prof.static_nodes(state, req)
        assert np.array_equal(score_distinct(state, prof, req, idx), prof.score(state, req, idx))
        place(state, prof, req)
