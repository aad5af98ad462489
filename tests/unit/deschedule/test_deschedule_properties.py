"""Properties over random small clusters: the threshold is never crossed, defragmentation's moves
are as few as a brute-force search finds (same move model: jobs leave one node and each lands on
capacity free elsewhere), and a hundred cycles of plan → evict → schedule never loop."""

from __future__ import annotations

from datetime import timedelta
from itertools import combinations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from crossdock.queue.assembly import Records, build_snapshot
from crossdock.queue.cycle import run_cycle
from crossdock.queue.deschedule.migration import MoveRecord
from crossdock.queue.deschedule.plan import plan

from tests.unit.deschedule.ds_builders import CLASSES, NOW, Jobs, admit, apply, config, gpu_node

pytestmark = pytest.mark.descheduler
QUEUES = sorted(CLASSES)


@st.composite
def clusters(draw, max_nodes: int = 4):
    sizes = draw(st.lists(st.sampled_from([2, 4, 8]), min_size=2, max_size=max_nodes))
    jobs = Jobs()
    for i, size in enumerate(sizes):
        free = size
        for _ in range(draw(st.integers(0, 5))):
            g = draw(st.integers(1, 3))
            if g > free:
                break
            jobs.run(draw(st.sampled_from(QUEUES)), f"n{i}", g)
            free -= g
    want = draw(st.integers(1, max(sizes)))
    blocked = jobs.wait(draw(st.sampled_from(["mid", "high", "serve"])), want)
    threshold = draw(st.sampled_from([None, 100, 500, 1000]))
    return [gpu_node(f"n{i}", s) for i, s in enumerate(sizes)], jobs, blocked, threshold


def movable(job, blocked, threshold) -> bool:
    return job.preemptible and job.priority < blocked.priority and (threshold is None or job.priority < threshold)


def oracle(nodes, jobs: Jobs, blocked, threshold, cap: int = 8) -> int | None:
    """Brute force: the fewest jobs to take off one node so ``blocked`` fits there while each of
    them fits in what is free on the other nodes (an exact packing); None: no such set, or the job
    is not blocked by fragmentation."""
    size = {n.name: len(n.gpus) for n in nodes}
    free = {n: size[n] - jobs.used.get(n, 0) for n in size}
    need = blocked.spec.gpus.count
    if max(free.values()) >= need or sum(free.values()) < need:
        return None

    def packs(items: list[int], room: dict[str, int], source: str) -> bool:
        if not items:
            return True
        g, rest = items[0], items[1:]
        for n in room:
            if n != source and room[n] >= g:
                room[n] -= g
                ok = packs(rest, room, source)
                room[n] += g
                if ok:
                    return True
        return False

    for k in range(1, cap + 1):
        for n in size:
            mine = [j for j in jobs.active if j.nodes == [n] and movable(j, blocked, threshold)]
            for combo in combinations(mine, k):
                gpus = sorted((len(j.gpu_ids) for j in combo), reverse=True)
                if free[n] + sum(gpus) >= need and packs(gpus, dict(free), n):
                    return k
    return None


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(clusters(), st.sampled_from([None, "LowNodeUtilization", "HighNodeUtilization"]))
def test_no_job_at_or_above_the_threshold_moves_and_defragmentation_is_minimal(case, strategy):
    nodes, jobs, blocked, threshold = case
    extra = {"strategies": {strategy: {"enabled": True}}} if strategy else {}
    cfg = config({**({"evictor": {"priorityThreshold": {"value": threshold}}} if threshold is not None else {}), **extra})
    result = jobs.plan(nodes, cfg)
    by_id = {j.id: j for j in jobs.active}
    for m in result.migrations:
        job = by_id[m.job_id]
        assert job.preemptible and (threshold is None or job.priority < threshold), m
        assert m.to_nodes is None or not set(m.to_nodes) & set(m.from_nodes), m
        if m.strategy == "Defragmentation":
            assert job.priority < blocked.priority
    defrag = [m for m in result.migrations if m.strategy == "Defragmentation"]
    best = oracle(nodes, jobs, blocked, threshold)
    assert (len(defrag) if defrag else None) == best
    assert (blocked.id in result.unblocked) == (best is not None)
    # carried out, the plan over-commits no GPU and the blocked job then starts
    if best is not None:
        dest = apply(jobs, result)
        snap = build_snapshot(Records(jobs.pending, jobs.active, nodes, nominations={blocked.id: defrag[0].from_nodes[0]},
                                      destinations=dest), cfg)
        placed = {p.job_id: p for p in run_cycle(snap, jobs.pending, cfg, NOW).admitted}
        assert blocked.id in placed and placed[blocked.id].nodes == defrag[0].from_nodes
        assert all(placed[j].nodes == (n,) for j, n in dest.items())


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(clusters(max_nodes=5), st.lists(st.tuples(st.sampled_from(["mid", "high"]), st.integers(1, 8)), max_size=3),
       st.sampled_from([None, "LowNodeUtilization", "HighNodeUtilization"]))
def test_a_hundred_cycles_never_loop(case, more, strategy):
    nodes, jobs, _blocked, _threshold = case
    for queue, g in more:
        jobs.wait(queue, g)
    cooldown, budget = 60, 3
    cfg = config({"defrag": {"max_migrations_per_job": budget, "cooldown_seconds": cooldown},
                  **({"strategies": {strategy: {"enabled": True}}} if strategy else {})})
    history: dict[int, MoveRecord] = {}
    nominations: dict[int, str] = {}
    moves_at: list[int] = []
    for cycle in range(100):
        now = NOW + timedelta(seconds=10 * cycle)
        snap = build_snapshot(Records(jobs.pending, jobs.active, nodes, nominations=nominations), cfg)
        result = plan(snap, jobs.pending, jobs.active, cfg, now, history)
        for m in result.migrations:
            before = history.get(m.job_id)
            assert before is None or (before.count < budget and now.timestamp() - before.last_at >= cooldown)
            history[m.job_id] = MoveRecord((before.count if before else 0) + 1, now.timestamp(), m.from_nodes)
            if m.for_job is not None:
                nominations[m.for_job] = m.from_nodes[0]
            moves_at.append(cycle)
        sources = {m.job_id: m.from_nodes for m in result.migrations}
        dest = apply(jobs, result)
        snap = build_snapshot(Records(jobs.pending, jobs.active, nodes, nominations=nominations, destinations=dest), cfg)
        cycle_result = run_cycle(snap, jobs.pending, cfg, now)
        for p in cycle_result.admitted:
            assert p.nodes != sources.get(p.job_id), f"job {p.job_id} went back to {p.nodes}: {result.migrations}"
            nominations.pop(p.job_id, None)
        admit(jobs, cycle_result, now)
    assert all(r.count <= budget for r in history.values())
    assert not [c for c in moves_at if c >= 50], f"moves in cycles {moves_at}: the plan never settles"


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from([2, 4, 8]), min_size=2, max_size=4), st.data(),
       st.sampled_from([None, "LowNodeUtilization", "HighNodeUtilization", "PodLifeTime", "RemoveDuplicates"]))
def test_a_service_replica_is_never_moved_whatever_its_class(sizes, data, strategy):
    """Replicas of inference services (JobSpec.service) stay where they run, even in a preemptible
    class, even where moving them is the only way to unblock a job or to empty a node."""
    from crossdock.queue.models import ServiceReplica

    jobs, replicas = Jobs(), set()
    for i, size in enumerate(sizes):
        free = size
        for _ in range(data.draw(st.integers(0, 5))):
            g = data.draw(st.integers(1, 3))
            if g > free:
                break
            serve = data.draw(st.booleans())
            job = jobs.run(data.draw(st.sampled_from(QUEUES)), f"n{i}", g, minutes_ago=60 * 48,
                           **({"service": ServiceReplica(name="web", replica=len(replicas))} if serve else {}))
            if serve:
                replicas.add(job.id)
            free -= g
    jobs.wait("high", data.draw(st.integers(1, max(sizes))))
    extra = {"strategies": {strategy: {"enabled": True, **({"maxPodLifeTimeSeconds": 60} if strategy == "PodLifeTime"
                                                          else {})}}} if strategy else {}
    result = jobs.plan([gpu_node(f"n{i}", s) for i, s in enumerate(sizes)], config(extra))
    assert not {m.job_id for m in result.migrations} & replicas, result.migrations
