"""Hypothesis properties of run_cycle on small random clusters.

- no GPU device, MIG slice, CPU or memory is over-committed;
- only preemptible jobs of strictly lower priority are preempted;
- the victim set is minimal (brute force over every subset on tiny clusters);
- gangs are all-or-nothing (an admitted gang has all its nodes, distinct);
- a reservation is never delayed by jobs backfilled in the same cycle (accurate time limits);
- the same input (in any order) gives the same decisions.
"""

from __future__ import annotations

import random
from collections import defaultdict
from dataclasses import replace
from datetime import timedelta
from itertools import combinations

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from sched_builders import NOW, config, job, node

from crossdock.queue.cycle import run_cycle
from crossdock.queue.snapshot import Allocation, Snapshot

CFG = config()
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def clusters(draw, max_nodes=4):
    n = draw(st.integers(1, max_nodes))
    nodes = []
    for k in range(n):
        pool = draw(st.sampled_from(["gpu", "share"]))
        gpus = draw(st.sampled_from([0, 1, 2, 4, 8]))
        islands = draw(st.sampled_from([0, 2])) if gpus >= 4 else 0
        nodes.append(node(f"n{k}", pool=pool, cpus=draw(st.integers(1, 16)), mem=draw(st.integers(100, 4000)),
                          gpus=gpus, islands=islands, model=draw(st.sampled_from(["A100", "L4"]))))
    return nodes


@st.composite
def allocations(draw, nodes, max_jobs=6, first_id=500):
    """Running jobs that fit their nodes (so the snapshot itself is valid)."""
    out: list[Allocation] = []
    free = {x.name: [x.cpu_milli, x.memory_mib, [g.id for g in x.gpus]] for x in nodes}
    for k in range(draw(st.integers(0, max_jobs))):
        x = draw(st.sampled_from(nodes))
        f = free[x.name]
        cpu = draw(st.integers(0, f[0] // 1000)) * 1000
        mem = draw(st.integers(0, f[1]))
        ngpu = draw(st.integers(0, len(f[2])))
        gids, f[2] = tuple(f[2][:ngpu]), f[2][ngpu:]
        f[0] -= cpu
        f[1] -= mem
        prio = draw(st.sampled_from([100, 500, 1000]))
        out.append(Allocation(first_id + k, x.name, cpu, mem, gids, priority=prio,
                              preemptible=draw(st.booleans()), queue="train",
                              start_time=NOW - timedelta(minutes=draw(st.integers(1, 100))),
                              time_limit_seconds=60 * draw(st.integers(101, 300)), grace_seconds=30))
    return out


@st.composite
def packed(draw, nodes, first_id=500):
    """Nodes filled up with small running jobs, one to three CPUs and zero to two GPUs each."""
    out: list[Allocation] = []
    k = first_id
    for x in nodes:
        cpus, gids = x.cpu_milli // 1000, [g.id for g in x.gpus]
        while cpus > 0 and len(out) < 7:
            c = min(cpus, draw(st.integers(1, 3)))
            ng = min(len(gids), draw(st.integers(0, 2)))
            out.append(Allocation(k, x.name, c * 1000, 0, tuple(gids[:ng]), priority=draw(st.sampled_from([100, 500])),
                                  preemptible=draw(st.booleans()) or draw(st.booleans()), queue="train",
                                  start_time=NOW - timedelta(minutes=draw(st.integers(1, 100))),
                                  time_limit_seconds=300 * 60, grace_seconds=30))
            cpus, gids, k = cpus - c, gids[ng:], k + 1
    return out


@st.composite
def jobs(draw, max_jobs=8, limits=False):
    out = []
    for i in range(1, draw(st.integers(1, max_jobs)) + 1):
        b = job(i).queue(draw(st.sampled_from(["train", "serve", "batch"]))).cpus(draw(st.integers(1, 8)))
        b.mem(draw(st.integers(0, 2000)))
        kind = draw(st.sampled_from(["none", "whole", "share"]))
        if kind == "whole":
            b.gpus(draw(st.integers(1, 4)))
        elif kind == "share":
            b.gpus(1, share=draw(st.sampled_from([0.25, 0.5, 0.75])))
        if draw(st.booleans()):
            b.nodes(draw(st.integers(2, 3)))
        if limits:
            b.limit(draw(st.integers(1, 200)))
        out.append(b.build())
    return out


def check_no_overcommit(nodes, allocs, result):
    cpu, mem = defaultdict(int), defaultdict(int)
    whole, share = defaultdict(int), defaultdict(float)
    for a in allocs:
        cpu[a.node] += a.cpu_milli
        mem[a.node] += a.memory_mib
        for g in a.gpu_ids:
            whole[g] += 1
    for p in result.admitted:
        for name, ids in zip(p.nodes, p.gpus_per_node):
            cpu[name] += p.cpu_milli
            mem[name] += p.memory_mib
            for g in ids:
                if p.gpu_share is None:
                    whole[g] += 1
                else:
                    share[g] += p.gpu_share
    for x in nodes:
        assert cpu[x.name] <= x.cpu_milli and mem[x.name] <= x.memory_mib
    assert all(v == 1 for v in whole.values()), "a whole GPU was given twice"
    assert all(share[g] <= 1 + 1e-9 for g in share), "a shared GPU was over-committed"
    assert not set(share) & set(whole), "a GPU was shared and given whole"


@SETTINGS
@given(data=st.data())
def test_no_overcommit_and_gangs_all_or_nothing(data):
    nodes = data.draw(clusters())
    allocs = data.draw(allocations(nodes))
    pending = data.draw(jobs())
    r = run_cycle(Snapshot(nodes=tuple(nodes), allocations=tuple(allocs)), pending, CFG, NOW)
    check_no_overcommit(nodes, allocs, r)
    by_id = {j.id: j for j in pending}
    for p in r.admitted:
        assert len(p.nodes) == len(set(p.nodes)) == by_id[p.job_id].spec.nodes
    assert {p.job_id for p in r.admitted} | set(r.pending) == set(by_id)
    assert not {p.job_id for p in r.admitted} & set(r.pending)


@SETTINGS
@given(data=st.data())
def test_only_strictly_lower_priority_preemptible_victims(data):
    nodes = data.draw(clusters())
    allocs = data.draw(allocations(nodes))
    pending = data.draw(jobs())
    r = run_cycle(Snapshot(nodes=tuple(nodes), allocations=tuple(allocs)), pending, CFG, NOW)
    by_job = {a.job_id: a for a in allocs}
    prio = {j.id: j.priority for j in pending}
    for p in r.preemptions:
        victim = by_job[p.victim_id]
        assert victim.preemptible and victim.priority < prio[p.preemptor_id]
    assert len({p.victim_id for p in r.preemptions}) == len(r.preemptions)


def fits_after_removing(nodes, allocs, removed, preemptor):
    rest = tuple(a for a in allocs if a.job_id not in removed)
    probe = preemptor.model_copy(update={"queue": "meek", "priority_class": "never"})
    r = run_cycle(Snapshot(nodes=tuple(nodes), allocations=rest), [probe], CFG, NOW)
    return bool(r.admitted)


@SETTINGS
@given(data=st.data())
def test_victim_set_is_minimal_against_brute_force(data):
    nodes = data.draw(clusters(max_nodes=2))
    allocs = data.draw(packed(nodes))
    biggest = max(nodes, key=lambda x: (x.cpu_milli, len(x.gpus)))
    b = job(1).queue("serve").cpus(data.draw(st.integers(1, biggest.cpu_milli // 1000)))
    if biggest.gpus and data.draw(st.booleans()):
        b.gpus(data.draw(st.integers(1, len(biggest.gpus))))
    preemptor = b.build()
    r = run_cycle(Snapshot(nodes=tuple(nodes), allocations=tuple(allocs)), [preemptor], CFG, NOW)
    if r.admitted:
        return
    candidates = sorted({a.job_id for a in allocs if a.preemptible and a.priority < preemptor.priority})
    smallest = None
    for k in range(1, len(candidates) + 1):
        if any(fits_after_removing(nodes, allocs, set(c), preemptor) for c in combinations(candidates, k)):
            smallest = k
            break
    event(f"smallest victim set: {smallest}")
    if smallest is None:
        assert not r.preemptions
    else:
        assert len(r.preemptions) == smallest
        assert fits_after_removing(nodes, allocs, {p.victim_id for p in r.preemptions}, preemptor)


@SETTINGS
@given(data=st.data())
def test_reservation_is_not_delayed_by_backfilled_jobs(data):
    nodes = data.draw(clusters())
    allocs = data.draw(allocations(nodes))
    pending = data.draw(jobs(limits=True))
    r = run_cycle(Snapshot(nodes=tuple(nodes), allocations=tuple(allocs)), pending, CFG, NOW)
    by_id = {j.id: j for j in pending}
    event(f"reservations: {len(r.reservations)}, backfilled: {len(r.admitted)}")
    for res in r.reservations:
        t = res.start
        still = [a for a in allocs if a.start_time + timedelta(seconds=a.time_limit_seconds) > t]
        for p in r.admitted:
            end = NOW + timedelta(seconds=by_id[p.job_id].spec.time_limit_seconds)
            if end > t:
                for name, ids in zip(p.nodes, p.gpus_per_node):
                    share = {ids[0]: p.gpu_share} if p.gpu_share else {}
                    still.append(Allocation(p.job_id, name, p.cpu_milli, p.memory_mib,
                                            () if share else ids, gpu_share=share))
        reserved = tuple(x for x in nodes if x.name in res.nodes)
        probe = by_id[res.job_id].model_copy(update={"queue": "meek", "priority_class": "never"})
        later = run_cycle(Snapshot(nodes=reserved, allocations=tuple(still)), [probe], CFG, t)
        assert later.admitted, f"reserved job {res.job_id} does not fit at {t} on {res.nodes}"


@SETTINGS
@given(data=st.data(), seed=st.integers(0, 2**16))
def test_same_input_in_any_order_gives_the_same_decisions(data, seed):
    nodes = data.draw(clusters())
    allocs = data.draw(allocations(nodes))
    pending = data.draw(jobs())
    first = run_cycle(Snapshot(nodes=tuple(nodes), allocations=tuple(allocs)), pending, CFG, NOW)
    shuffled_nodes, shuffled_jobs, shuffled_allocs = list(nodes), list(pending), list(allocs)
    rng = random.Random(seed)
    for seq in (shuffled_nodes, shuffled_jobs, shuffled_allocs):
        rng.shuffle(seq)
    again = run_cycle(Snapshot(nodes=tuple(shuffled_nodes), allocations=tuple(shuffled_allocs)), shuffled_jobs,
                      CFG, NOW)
    assert first.admitted == again.admitted
    assert first.pending == again.pending and first.explanations == again.explanations
    assert first.preemptions == again.preemptions and first.reservations == again.reservations
    assert replace(first, timings={}) == replace(again, timings={})
