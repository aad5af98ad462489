"""The ``descheduler:`` block: upstream's names, every number bounded, one line per problem."""

from __future__ import annotations

import pytest

from crossdock.queue.assembly import Records, build_snapshot
from crossdock.queue.cycle import run_cycle
from crossdock.queue.errors import ConfigError

from tests.unit.deschedule.ds_builders import NOW, Jobs, cluster, config

pytestmark = pytest.mark.descheduler


@pytest.mark.parametrize("block, message", [
    ({"interval_seconds": 0}, "descheduler.interval_seconds: must be ≥ 0.05"),
    ({"maxNoOfPodsToEvictTotal": -1}, "descheduler.maxNoOfPodsToEvictTotal: must be ≥ 0"),
    ({"gracePeriodSeconds": 70000}, "descheduler.gracePeriodSeconds: must be ≤ 65533"),
    ({"defrag": {"cooldown_seconds": float("inf")}}, "descheduler.defrag.cooldown_seconds: must be a finite number"),
    ({"strategies": {"LowNodeUtilization": {"thresholds": {"gpu": 3}}}}, "gpu: unknown resource"),
    ({"strategies": {"HighNodeUtilization": {"thresholds": {"nvidia.com/gpu": 101}}}}, "must be ≤ 100"),
    ({"strategies": {"LowNodeUtilization": {"thresholds": {"cpu": 60}, "targetThresholds": {"cpu": 50}}}},
     "thresholds.cpu: 60 is above targetThresholds.cpu 50"),
    ({"evictor": {"priorityThreshold": {"name": "nope"}}}, "unknown priority class 'nope'"),
    ({"budgets": [{"name": "b", "maxUnavailable": "150%"}]}, "'150%' is not a count"),
    ({"budgets": [{"name": "b"}]}, "give exactly one of maxUnavailable and minAvailable"),
    ({"budgets": [{"name": "b", "selector": {"queue": "x"}, "minAvailable": 1}]}, "unknown queue 'x'"),
    ({"strategies": {"Bogus": {}}}, "descheduler.strategies.Bogus: unknown field"),
], ids=lambda v: str(v)[:40])
def test_bad_blocks_are_refused_with_the_path(block, message):
    with pytest.raises(ConfigError) as err:
        config(block)
    assert any(message in line for line in err.value.errors), err.value.errors


def test_a_priority_class_name_sets_the_threshold():
    jobs = Jobs()
    for _ in range(7):
        jobs.run("mid", "n0", minutes_ago=300)
    cfg = config({"defrag": {"enabled": False}, "evictor": {"priorityThreshold": {"name": "mid"}},
                  "strategies": {"PodLifeTime": {"enabled": True, "maxPodLifeTimeSeconds": 60}}})
    plan = jobs.plan(cluster(2), cfg)
    assert plan.migrations == () and "priority 500 ≥ threshold 500" in plan.skipped[0].why


def test_the_cycle_lands_a_moved_job_on_its_reserved_destination_and_holds_it_from_others():
    jobs = Jobs()
    for node, used in (("n0", 6), ("n1", 7)):
        for _ in range(used):
            jobs.run("low", node)
    moved = jobs.wait("low", 1)
    first = jobs.wait("high", 1)  # scheduled first; binpack would give it n1's last GPU
    cfg, nodes = config(), cluster(2)
    snap = build_snapshot(Records(jobs.pending, jobs.active, nodes, destinations={moved.id: "n1"}), cfg)
    placed = {p.job_id: p.nodes for p in run_cycle(snap, jobs.pending, cfg, NOW).admitted}
    assert placed == {moved.id: ("n1",), first.id: ("n0",)}
    # without the reservation the higher-priority job takes it and the moved one goes elsewhere
    snap = build_snapshot(Records(jobs.pending, jobs.active, nodes), cfg)
    placed = {p.job_id: p.nodes for p in run_cycle(snap, jobs.pending, cfg, NOW).admitted}
    assert placed == {moved.id: ("n0",), first.id: ("n1",)}


def test_lint_warns_when_both_utilization_strategies_are_on():
    from crossdock.queue.config import lint

    both = config({"strategies": {"LowNodeUtilization": {"enabled": True}, "HighNodeUtilization": {"enabled": True}}})
    assert any("undo each other's moves" in w for w in lint(both))
    assert not any("undo each other" in w for w in lint(config()))
