"""The scheduler's per-cycle caches give what computing afresh gives.

- device choice on plain lists equals the numpy choice;
- cached node-local filter verdicts equal ``Profile.feasible`` after any sequence of takes, undos
  and simulated releases (``Inventory.changes`` drives the re-derivation);
- the best node read over the node array equals the best of ``Profile.score`` over the feasible nodes;
- a Preemptor that remembers per-node answers and victim sums across a cycle finds what a fresh
  one finds, after victims are taken.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sched_builders import config, job, node
from test_scheduler_properties import allocations, clusters

from crossdock.queue.scheduler import gpus, placement
from crossdock.queue.scheduler.framework import CycleState
from crossdock.queue.scheduler.inventory import FULL, Inventory
from crossdock.queue.scheduler.preemption import Preemptor
from crossdock.queue.scheduler.profiles import profile_for
from crossdock.queue.scheduler.request import build_request
from crossdock.queue.snapshot import Allocation

CFG = config()
NOW = datetime(2026, 1, 1, tzinfo=timezone.utc)
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@settings(max_examples=200, deadline=None)
@given(free=st.lists(st.sampled_from([0, 250, 500, 750, FULL]), min_size=1, max_size=8),
       islands=st.sampled_from([0, 2, 4]), count=st.integers(0, 8), amount=st.sampled_from([100, 250, 500, 900]))
def test_device_choice_on_lists_equals_numpy(free, islands, count, amount):
    n = len(free)
    island = [c * islands // n if islands else -1 for c in range(n)]
    cap = max((island.count(k) for k in set(island) if k >= 0), default=0)
    row, exists = np.array(free, np.int64), np.ones(n, bool)
    assert gpus.whole_of(free, island, count, cap) == gpus.choose_whole(row, exists, np.array(island), count, cap)
    assert gpus.share_of(free, amount) == gpus.choose_share(row, exists, amount)


@st.composite
def full(draw, nodes):
    """Every node filled with small running jobs (one to three CPUs, up to two GPUs), a few of them gangs."""
    out = []
    k = 500
    for x in nodes:
        cpus, gids = x.cpu_milli // 1000, [g.id for g in x.gpus]
        while cpus > 0:
            c = min(cpus, draw(st.integers(1, 3)))
            ng = min(len(gids), draw(st.integers(0, 2)))
            kw = dict(priority=draw(st.sampled_from([100, 500])), preemptible=draw(st.integers(0, 4)) > 0,
                      queue="train", start_time=NOW - timedelta(minutes=draw(st.integers(1, 100))), grace_seconds=30)
            out.append(Allocation(k, x.name, c * 1000, 0, tuple(gids[:ng]), **kw))
            if draw(st.integers(0, 9)) == 0:
                out.append(Allocation(k, draw(st.sampled_from(nodes)).name, 0, 0, (), **kw))
            cpus, gids, k = cpus - c, gids[ng:], k + 1
    return out


def requests_for(inv):
    shapes = [job(1).cpus(1), job(2).cpus(4).mem(500), job(3).gpus(1), job(4).gpus(2), job(5).gpus(4).cpus(2),
              job(6).gpus(1, share=0.25), job(7).gpus(1, share=0.75), job(8).cpus(2).set(exclusive=True),
              job(9).gpus(1).array(40, 1).set(anti_affinity=True)]
    return [build_request(b.build(), CFG) for b in shapes]


def random_changes(data, inv, steps):
    """Takes, undos and simulated releases (quiet, restored) on random nodes."""
    done = []
    for _ in range(steps):
        i = data.draw(st.integers(0, inv.n - 1))
        action = data.draw(st.sampled_from(["take", "undo", "simulate"]))
        if action == "take":
            idle = [int(c) for c in np.flatnonzero(inv.dev_exists[i] & (inv.dev_free[i] == FULL))]
            devices = [(idle[0], data.draw(st.sampled_from([FULL, 250])))] if idle else []
            if inv.cpu_free[i] >= 1000:
                done.append(inv.take(i, 1000, 0, devices, [], data.draw(st.sampled_from([None, 40]))))
        elif action == "undo" and done:
            inv.undo(done.pop(data.draw(st.integers(0, len(done) - 1))))
        else:
            saved = inv.save(i)
            inv.quiet = True
            for a in done:
                if a.node == i:
                    inv.undo(a)
            inv.restore(i, saved)
            inv.quiet = False


@SETTINGS
@given(data=st.data())
def test_cached_verdicts_and_scores_equal_fresh_ones(data):
    nodes = data.draw(clusters()) + [node(f"x{k}", pool="share", gpus=8, islands=2, sharing=True) for k in range(2)]
    inv = Inventory(nodes)
    inv.load(data.draw(allocations(nodes)))
    state = CycleState(inv, CFG, NOW)
    prof = profile_for(data.draw(st.sampled_from(["binpack", "spread", "most-requested"])))
    reqs = requests_for(inv)
    for _ in range(data.draw(st.integers(1, 4))):
        for req in reqs:
            fresh = prof.feasible(state, req)
            assert np.array_equal(placement.feasible(state, prof, req), fresh)
            window = prof.static_nodes(state, req)[::2]
            assert np.array_equal(placement.feasible(state, prof, req, window), prof.feasible(state, req, window))
            if len(fresh):
                assert np.array_equal(placement.score_distinct(state, prof, req, fresh), prof.score(state, req, fresh))
                if req.gpus or req.gpu_share_milli:
                    scores = prof.score(state, req, fresh)
                    assert placement.choose(state, prof, req).tolist() == [int(fresh[scores == scores.max()].min())]
        random_changes(data, inv, data.draw(st.integers(1, 6)))


@SETTINGS
@given(data=st.data())
def test_remembering_preemptor_finds_what_a_fresh_one_finds(data):
    nodes = data.draw(clusters(max_nodes=4)) + [node(f"x{k}", cpus=16, gpus=4) for k in range(2)]
    allocs = data.draw(full(nodes))
    inv = Inventory(nodes)
    inv.load(allocs)
    state = CycleState(inv, CFG, NOW)
    state.extra["nominated"], state.extra["reservations"] = {}, []
    prof = profile_for("binpack")
    kept = Preemptor(inv, allocs, set())
    taken = []
    cpus, ngpu = data.draw(st.integers(1, 8)), data.draw(st.sampled_from([0, 0, 1, 2, 4]))
    for k in range(data.draw(st.integers(1, 6))):
        # mostly one shape, so that later searches reuse what earlier ones remembered
        b = job(100 + k).queue(data.draw(st.sampled_from(["serve", "serve", "batch"])))
        b.cpus(cpus if data.draw(st.integers(0, 3)) else data.draw(st.integers(1, 8)))
        if ngpu:
            b.gpus(ngpu)
        req = build_request(b.build(), CFG)
        fresh = Preemptor(inv, allocs, set())
        fresh.take(taken)
        assert np.array_equal(kept.lower_bounds(req)[0], fresh.lower_bounds(req)[0])
        assert np.array_equal(kept.lower_bounds(req)[1], fresh.lower_bounds(req)[1])
        cap = data.draw(st.sampled_from([1, 2, 100]))
        found = kept.find(state, prof, req, cap)
        assert found == fresh.find(state, prof, req, cap)
        if found is not None:
            for v in found[1]:
                assert v.priority < req.priority and all(a.preemptible for a in v.allocations)
            kept.take(found[1])
            taken.extend(found[1])
