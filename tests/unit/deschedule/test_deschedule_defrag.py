"""Defragmentation: the fewest moves for a job blocked by scattered GPUs, destinations reserved."""

from __future__ import annotations

from datetime import timedelta

import pytest

from crossdock.queue.assembly import Records, build_snapshot
from crossdock.queue.cycle import run_cycle
from crossdock.queue.deschedule.migration import MoveRecord
from crossdock.queue.models import ServiceReplica

from tests.unit.deschedule.ds_builders import NOW, Jobs, admit, apply, cluster, config, fragmented

pytestmark = pytest.mark.descheduler


def test_issue_scenario_the_blocked_job_starts_after_the_minimal_moves_none_back_to_its_node():
    jobs = Jobs()
    fragmented(jobs, [6, 7, 7, 7, 7, 7, 7, 7])  # 9 GPUs idle, at most 2 on one node
    big = jobs.wait("high", 8)
    nodes, cfg = cluster(), config()
    plan = jobs.plan(nodes, cfg)
    assert plan.unblocked == (big.id,)
    assert len(plan.migrations) == 6  # n0's six jobs: no node holds fewer
    assert {m.from_nodes for m in plan.migrations} == {("n0",)}
    assert all(m.to_nodes and m.to_nodes[0] != "n0" for m in plan.migrations)
    assert all(m.for_job == big.id and "makes room for job" in m.reason for m in plan.migrations)
    # carried out: the next cycle starts the big job on n0 and every moved job on its reserved node
    dest = apply(jobs, plan)
    snap = build_snapshot(Records(jobs.pending, jobs.active, nodes, nominations={big.id: "n0"}, destinations=dest), cfg)
    result = run_cycle(snap, jobs.pending, cfg, NOW)
    placed = {p.job_id: p.nodes for p in result.admitted}
    assert placed[big.id] == ("n0",)
    assert {j: placed[j][0] for j in dest} == dest


def test_the_fewest_moves_are_found_on_the_emptiest_node():
    jobs = Jobs()
    fragmented(jobs, [7, 5, 6, 7])
    jobs.wait("high", 6)
    plan = jobs.plan(cluster(4), config())
    assert len(plan.migrations) == 3 and {m.from_nodes for m in plan.migrations} == {("n1",)}


@pytest.mark.parametrize("queue, why", [("high", "not preemptible"), ("pinned", "not preemptible"),
                                        ("mid", "priority 500 ≥ threshold 500")])
def test_protected_jobs_stay_and_the_dry_run_says_why(queue, why):
    jobs = Jobs()
    for _ in range(6):
        jobs.run(queue, "n0")
    fragmented(jobs, [0, 7, 7, 7, 7, 7, 7, 7])
    jobs.wait("serve", 8)
    cfg = config({"evictor": {"priorityThreshold": {"value": 500}}})
    plan = jobs.plan(cluster(), cfg)
    assert len(plan.migrations) == 7  # a node of seven movable jobs instead
    assert all(m.from_nodes != ("n0",) for m in plan.migrations)
    assert any(why in s.why for s in plan.skipped if s.job_id <= 6)


def test_a_service_replica_is_never_moved():
    jobs = Jobs()
    for r in range(6):
        jobs.run("low", "n0", service=ServiceReplica(name="web", replica=r))
    fragmented(jobs, [0, 7, 7, 7, 7, 7, 7, 7])
    jobs.wait("high", 8)
    plan = jobs.plan(cluster(), config())
    assert not any(m.from_nodes == ("n0",) for m in plan.migrations)
    assert any("service replica" in s.why for s in plan.skipped)


def test_only_strictly_lower_priority_jobs_move_for_a_job():
    jobs = Jobs()
    fragmented(jobs, [6, 7, 7, 7, 7, 7, 7, 7], queue="mid")
    jobs.wait("mid", 8)  # same priority: nothing moves for it
    plan = jobs.plan(cluster(), config())
    assert plan.migrations == () and any("is not below 500" in s.why for s in plan.skipped)


def test_budget_and_cooldown_keep_a_moved_job_in_place():
    jobs = Jobs()
    fragmented(jobs, [7, 7, 7, 7])
    jobs.wait("high", 2)
    first = jobs.plan(cluster(4), config())
    assert len(first.migrations) == 1
    moved = first.migrations[0].job_id
    recent = {moved: MoveRecord(1, (NOW - timedelta(seconds=30)).timestamp(), ("n9",))}
    cfg = config({"defrag": {"max_migrations_per_job": 2, "cooldown_seconds": 600}})
    again = jobs.plan(cluster(4), cfg, history=recent)
    assert moved not in {m.job_id for m in again.migrations}
    assert any(s.job_id == moved and "cooldown 600 s" in s.why for s in again.skipped)
    spent = jobs.plan(cluster(4), config(), history={moved: MoveRecord(1, 0.0)})
    assert any(s.job_id == moved and "max_migrations_per_job 1" in s.why for s in spent.skipped)


def test_a_disruption_budget_of_one_is_never_broken():
    jobs = Jobs()
    fragmented(jobs, [6, 7, 7, 7, 7, 7, 7, 7])
    jobs.wait("high", 8)
    cfg = config({"budgets": [{"name": "train", "selector": {"queue": "low"}, "maxUnavailable": 1}]})
    plan = jobs.plan(cluster(), cfg)
    assert plan.migrations == ()  # six moves are needed; the budget allows one: none is started
    jobs2 = Jobs()
    fragmented(jobs2, [7, 7, 7, 7])
    jobs2.wait("high", 2)
    assert len(jobs2.plan(cluster(4), cfg).migrations) == 1


def test_caps_bound_the_plan():
    jobs = Jobs()
    fragmented(jobs, [7, 7, 7, 7])
    for _ in range(2):
        jobs.wait("high", 2)
    assert len(jobs.plan(cluster(4), config()).migrations) == 2
    capped = jobs.plan(cluster(4), config({"maxNoOfPodsToEvictTotal": 1}))
    assert len(capped.migrations) == 1 and len(capped.unblocked) == 1


def test_a_job_that_fits_or_cannot_fit_is_left_alone():
    jobs = Jobs()
    fragmented(jobs, [7, 7, 8, 8])  # 2 idle GPUs: an 8-GPU job cannot be helped by moving
    jobs.wait("high", 8)
    jobs.wait("high", 1)  # fits now
    assert jobs.plan(cluster(4), config()).migrations == ()


def test_an_already_nominated_job_is_left_to_its_preemption():
    jobs = Jobs()
    fragmented(jobs, [7, 7, 7, 7])
    big = jobs.wait("high", 2)
    assert jobs.plan(cluster(4), config(), nominations={big.id: "n0"}).migrations == ()


def test_destinations_are_reserved_for_the_next_blocked_job_of_the_plan():
    jobs = Jobs()
    fragmented(jobs, [7, 7, 8, 8, 8, 8])  # room for one 2-GPU job after one move, not for two
    a, _b = jobs.wait("high", 2), jobs.wait("high", 2)
    plan = jobs.plan(cluster(6), config())
    # one move frees n0 for a; its job takes n1's last idle GPU, which b cannot count on
    assert plan.unblocked == (a.id,) and len(plan.migrations) == 1
    assert plan.migrations[0].from_nodes == ("n0",) and plan.migrations[0].to_nodes == ("n1",)


def test_moved_jobs_are_admitted_back_without_a_plan():
    jobs = Jobs()
    fragmented(jobs, [7, 7])
    big = jobs.wait("high", 2)
    nodes, cfg = cluster(2), config()
    dest = apply(jobs, jobs.plan(nodes, cfg))
    snap = build_snapshot(Records(jobs.pending, jobs.active, nodes, nominations={big.id: "n0"}, destinations=dest), cfg)
    admit(jobs, run_cycle(snap, jobs.pending, cfg, NOW))
    assert not jobs.pending and len(jobs.active) == 15
