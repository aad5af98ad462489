"""The service controller, pass by pass: scaling with the HPA's arithmetic and stabilization,
fallback and move back, drain before stop, rolling updates, min/max, the override, deletion."""

from __future__ import annotations

import pytest

from crossdock.queue.serving import ServiceState
from crossdock.queue.services.controller import CRASH_LIMIT
from crossdock.queue.states import JobState
from svc_world import World, replica_job, ready_endpoint, spec

pytestmark = pytest.mark.services


def run(world: World, start: float, end: float, every: float = 2.0) -> list[tuple[float, int]]:
    """Passes from ``start`` to ``end``; (time, desired) after each."""
    out = []
    t = start
    while t <= end:
        out.append((t, world.step(t).status.desired))
        t += every
    return out


def test_qps_steps_10_200_20_follow_ceil_qps_over_target_and_wait_for_the_window():
    w = World(spec(target_qps=20, scale_down_stabilization_seconds=30), qps=10)
    first = run(w, 0, 8)
    assert {d for _, d in first} == {1} and len(w.live()) == 1
    w.qps = 200
    up = run(w, 10, 40)
    # the default scale-up policy: max(4 pods, 100 %) per 15 s, so 1 → 5, then 10 once 15 s passed
    assert up[0] == (10, 5) and w.plans[-len(up)].status.recommended == 10
    reached = next(t for t, d in up if d == 10)
    assert 24 <= reached <= 28 and up[-1][1] == 10
    assert len(w.live()) == 10 and w.status.ready == 10 and w.status.state is ServiceState.AVAILABLE
    w.qps = 20
    down = run(w, 42, 90)
    stays = [d for t, d in down if t < 40 + 30]  # the last 10 recommendation is younger than 30 s
    assert set(stays) == {10}
    assert down[-1][1] == 1 and len(w.live()) == 1
    left = next(t for t, d in down if d == 1)
    assert 70 <= left <= 74
    scaled = [e for p in w.plans for e in p.events if e["event"] == "scaled"]
    assert [(e["from"], e["to"]) for e in scaled] == [(1, 5), (5, 10), (10, 1)]
    assert "ScaleUpLimit" in scaled[0]["message"] and "200 qps / 20 per replica → 10" in scaled[0]["message"]


def test_p95_objective_proposes_too_and_the_larger_proposal_wins():
    w = World(spec(target_qps=100, p95_ms=50), qps=100, p95=0.2)  # qps asks 1, latency asks 4× ready
    run(w, 0, 4)
    plan = w.step(6)
    assert plan.status.recommended >= 4 and "p95 200 ms / 50 ms objective" in plan.status.message


@pytest.mark.parametrize(("qps", "expected"), [(10_000, 6), (0, 2)], ids=["max", "min"])
def test_min_and_max_bound_the_replicas(qps, expected):
    w = World(spec(min_replicas=2, max_replicas=6, scale_down_stabilization_seconds=0), qps=qps)
    run(w, 0, 60)
    assert w.status.desired == expected and len(w.live()) == expected


def test_the_override_wins_until_cleared():
    w = World(spec(), qps=200, override=3)
    run(w, 0, 40)
    assert w.status.desired == 3 and len(w.live()) == 3 and "by hand" in w.status.message
    w.override = None
    run(w, 42, 80)
    assert w.status.desired == 10


def test_no_traffic_sample_keeps_the_replicas():
    w = World(spec(min_replicas=2))
    w.step(0)
    from crossdock.queue.services.controller import Inputs, reconcile
    plan = reconcile(Inputs(w.record(), list(w.jobs.values()), w.endpoints, None, w.pools, {}, 2.0))
    assert plan.status.desired == 2 and "no recent traffic sample" in plan.status.message and not plan.creates


def test_a_pending_replica_widens_to_the_fallback_pool_after_the_delay():
    w = World(spec(fallback_after_seconds=30), pools=("l4", "cpu"), free={"l4": 0, "cpu": 5}, qps=10)
    run(w, 0, 28)
    job = next(iter(w.jobs.values()))
    assert job.state is JobState.PENDING and job.pools == ["l4"]
    plan = w.step(30)
    assert [(x.job_id, x.pools) for x in plan.widens] == [(job.id, ("l4", "cpu"))]
    assert any(e["event"] == "replica_widened" for e in plan.events)
    w.step(32)
    assert w.running_on("cpu") == 1


def test_move_back_creates_the_preferred_replica_first_and_drains_the_fallback_one_when_it_is_ready():
    w = World(spec(), pools=("l4", "cpu"), free={"l4": 0, "cpu": 5}, qps=10, drain_done=False)
    run(w, 0, 32)
    (fallback,) = [j for j in w.live() if j.pool == "cpu"]
    w.free["l4"] = 1  # L4 frees
    plan = w.step(34)
    (create,) = plan.creates
    assert create.pools == ("l4",) and create.replica.pinned and create.replica.replaces == fallback.id
    assert not plan.drains and not plan.stops  # the CPU replica keeps serving until its successor is ready
    plan = w.step(36)  # the successor landed on l4 and is ready: now the CPU one drains
    assert plan.drains == (fallback.id,) and not plan.stops
    assert w.endpoints[fallback.id].draining
    plan = w.step(38)
    assert not plan.stops  # still finishing its requests
    w.endpoints[fallback.id] = w.endpoints[fallback.id].__class__(**{**w.endpoints[fallback.id].__dict__, "drained": True})
    plan = w.step(40)
    assert [s.job_id for s in plan.stops] == [fallback.id] and "drained" in plan.stops[0].why
    w.step(42)
    assert w.running_on("l4") == 1 and w.running_on("cpu") == 0 and len(w.live()) == 1


def test_a_move_back_that_cannot_land_is_given_up():
    w = World(spec(fallback_after_seconds=10), pools=("l4", "cpu"), free={"l4": 0, "cpu": 5}, qps=10)
    run(w, 0, 12)
    w.free["l4"] = 1
    plan = w.step(14)
    (create,) = plan.creates
    assert create.replica.pinned
    w.free["l4"] = 0  # someone else takes the room before the replacement lands
    successor = max(w.jobs)
    run(w, 16, 40)
    stopped = [s for p in w.plans for s in p.stops if s.job_id == successor]
    assert stopped and "move back given up" in stopped[0].why
    assert w.running_on("cpu") == 1


def test_drain_timeout_stops_a_replica_that_never_reports_drained():
    w = World(spec(drain_timeout_seconds=10, scale_down_stabilization_seconds=0), qps=60, drain_done=False)
    run(w, 0, 20)
    assert len(w.live()) == 3
    w.qps = 20
    plan = w.step(22)
    drained = sorted(plan.drains)
    assert len(drained) == 2 and not plan.stops
    assert not w.step(24).stops and not w.step(30).stops  # 8 s of the 10 s timeout
    stops = w.step(32).stops
    assert sorted(s.job_id for s in stops) == drained
    assert all("drain timeout" in s.why for s in stops)


def test_scale_in_takes_pending_and_not_ready_replicas_first_and_stops_them_without_a_drain():
    w = World(spec(scale_down_stabilization_seconds=0), qps=80, free={"l4": 2})
    run(w, 0, 20)
    assert len(w.live()) == 4
    pending = [j for j in w.live() if j.state is JobState.PENDING]
    assert len(pending) == 2
    w.qps = 40
    plan = w.step(22)
    assert sorted(s.job_id for s in plan.stops) == sorted(j.id for j in pending) and not plan.drains


def test_rolling_update_replaces_one_replica_at_a_time_ready_before_drain():
    w = World(spec(min_replicas=3, target_qps=None), qps=0)
    run(w, 0, 6)
    old = sorted(j.id for j in w.live())
    w.generation = 2
    in_flight_max, seen = 0, []
    for t in range(8, 60, 2):
        plan = w.step(t)
        assert len(plan.creates) <= 1
        in_flight_max = max(in_flight_max, len(w.live()))
        seen.append(plan.status.state)
        assert sum(1 for j in w.live() if j.state is JobState.RUNNING) >= 3  # capacity never dips
    assert in_flight_max <= 4  # surge 1
    assert ServiceState.UPDATING in seen and w.status.state is ServiceState.AVAILABLE
    assert all(j.spec.service.generation == 2 for j in w.live()) and len(w.live()) == 3
    assert not set(old) & {j.id for j in w.live()}


def test_delete_drains_every_replica_then_removes_the_record():
    w = World(spec(min_replicas=2, target_qps=None), drain_done=False)
    run(w, 0, 4)
    w.deleting = True
    plan = w.step(6)
    assert len(plan.drains) == 2 and plan.status.state is ServiceState.DELETING and not plan.remove
    plan = w.step(8)
    assert not plan.remove and not plan.stops
    for job_id in list(w.endpoints):
        w.endpoints[job_id] = w.endpoints[job_id].__class__(**{**w.endpoints[job_id].__dict__, "drained": True})
    assert len(w.step(10).stops) == 2
    plan = w.step(12)
    assert plan.remove and plan.status.state is ServiceState.DELETED


def crash_loop(w: World, t: float) -> float:
    """Fail the one live replica ``CRASH_LIMIT`` times, a pass every 2 s from ``t``; the next pass's time."""
    for _ in range(CRASH_LIMIT):
        (job,) = w.live()
        w.jobs[job.id] = job.model_copy(update={"state": JobState.FAILED, "reason": "NonZeroExitCode"})
        w.step(t)
        t += 2
    return t


def test_a_crash_loop_holds_new_replicas_and_degrades_the_service():
    w = World(spec(min_replicas=1, target_qps=None))
    run(w, 0, 2)
    crash_loop(w, 4.0)
    assert not w.live() and w.status.state is ServiceState.DEGRADED and "crash loop" in w.status.message
    failed = [e for p in w.plans for e in p.events if e["event"] == "replica_failed"]
    assert len(failed) == CRASH_LIMIT
    run(w, 70, 72)  # the window passed: a new replica is tried
    assert len(w.live()) == 1


def test_the_update_that_fixes_a_crash_loop_lifts_its_hold_at_once():
    w = World(spec(min_replicas=1, target_qps=None))
    run(w, 0, 2)
    t = crash_loop(w, 4.0)
    assert not w.live() and "crash loop" in w.status.message
    w.generation = 2  # `services update --command …`: what crashed no longer runs
    plan = w.step(t)  # well within the crash window of the failures above
    assert [c.replica.generation for c in plan.creates] == [2] and "crash loop" not in plan.status.message
    run(w, t + 2, t + 4)
    assert w.status.state is ServiceState.AVAILABLE
    # a replica of the old generation ending now is not counted against the new one
    assert w.status.failures == [] and w.status.failures_generation == 2


def test_a_degraded_service_names_why_its_other_replicas_pend():
    w = World(spec(min_replicas=4, target_qps=None), free={"l4": 2})
    run(w, 0, 2)
    for job in w.jobs.values():
        if job.state is JobState.PENDING:
            w.jobs[job.id] = job.model_copy(update={"reason": "Resources",
                                                    "explanation": "0/2 nodes are available: 2 Insufficient gpu."})
    plan = w.step(4)
    assert plan.status.state in (ServiceState.DEPLOYING, ServiceState.DEGRADED)
    assert (plan.status.ready, plan.status.desired) == (2, 4)
    assert "2 replicas pending (2 Resources): 0/2 nodes are available: 2 Insufficient gpu." in plan.status.message


def test_a_replica_stopped_by_someone_else_is_not_a_failure():
    w = World(spec(min_replicas=1, target_qps=None))
    run(w, 0, 2)
    (job,) = w.live()
    w.jobs[job.id] = job.model_copy(update={"state": JobState.CANCELLED})
    plan = w.step(4)
    assert plan.forget == (job.id,) and not any(e["event"] == "replica_failed" for e in plan.events)
    assert len(plan.creates) == 1


def test_a_requeued_replica_is_not_ready_until_its_new_attempt_is():
    w = World(spec(min_replicas=1, target_qps=None))
    job = replica_job(1, 0)
    w.jobs[1] = job.model_copy(update={"attempts": 2})
    w.endpoints[1] = ready_endpoint(job)  # attempt 1's readiness
    plan = w.step(0)
    assert plan.status.ready == 0 and plan.status.state is ServiceState.DEPLOYING


def test_deleting_a_service_without_replicas_goes_through_deleting_to_deleted_in_one_pass():
    w = World(spec(min_replicas=0, target_qps=None), deleting=True)
    plan = w.step(0)
    assert plan.remove and [(e["from"], e["to"]) for e in plan.events if e["event"] == "state"] == [
        ("DEPLOYING", "DELETING"), ("DELETING", "DELETED")]
