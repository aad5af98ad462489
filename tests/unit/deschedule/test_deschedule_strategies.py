"""One test per upstream strategy, with upstream's parameter names."""

from __future__ import annotations

from datetime import timedelta

import pytest

from crossdock.queue.deschedule.migration import DeschedulePlan

from tests.unit.deschedule.ds_builders import NOW, Jobs, cluster, config, gpu_node

pytestmark = pytest.mark.descheduler


def only(name: str, **args) -> dict:
    return {"defrag": {"enabled": False}, "strategies": {name: {"enabled": True, **args}}}


def moved(plan: DeschedulePlan) -> dict[int, tuple]:
    return {m.job_id: (m.from_nodes, m.to_nodes) for m in plan.migrations}


def test_low_node_utilization_moves_from_over_to_under_utilised_nodes_only():
    jobs = Jobs()
    hot = [jobs.run("low", "n0") for _ in range(7)]  # 87.5 %
    jobs.run("low", "n1")  # 12.5 %: under 20 %
    for _ in range(4):
        jobs.run("low", "n2")  # 50 %: neither
    plan = jobs.plan(cluster(3), config(only("LowNodeUtilization", thresholds={"nvidia.com/gpu": 20},
                                              targetThresholds={"nvidia.com/gpu": 50})))
    got = moved(plan)
    assert got and set(got) <= {j.id for j in hot}
    assert all(to == ("n1",) for _, to in got.values())  # landed on the under-utilised node, reserved
    assert len(got) == 3  # until n0 is back at its target: 4 of 8 GPUs (50 %)


def test_low_node_utilization_does_nothing_without_both_sets_or_below_number_of_nodes():
    jobs = Jobs()
    for _ in range(7):
        jobs.run("low", "n0")
    jobs.run("low", "n1")
    cfg = config(only("LowNodeUtilization", numberOfNodes=1))
    assert jobs.plan(cluster(2), cfg).migrations == ()


def test_high_node_utilization_empties_the_least_used_nodes_whole():
    jobs = Jobs()
    for n, k in (("n0", 6), ("n1", 1), ("n2", 1), ("n3", 5)):
        for _ in range(k):
            jobs.run("low", n)
    plan = jobs.plan(cluster(4), config(only("HighNodeUtilization", thresholds={"nvidia.com/gpu": 20})))
    got = moved(plan)
    assert {f for f, _ in got.values()} == {("n1",), ("n2",)}
    assert {t for _, t in got.values()} <= {("n0",), ("n3",)}  # onto nodes that stay
    assert all("so the autoscaler can remove it" in m.reason for m in plan.migrations)


def test_high_node_utilization_leaves_a_node_it_cannot_empty():
    jobs = Jobs()
    for _ in range(6):
        jobs.run("low", "n0")
    jobs.run("high", "n1")  # not preemptible: n1 cannot be emptied
    plan = jobs.plan(cluster(2), config(only("HighNodeUtilization")))
    assert plan.migrations == () and any("cannot be emptied" in s.why for s in plan.skipped)


def test_remove_pods_violating_node_affinity():
    jobs = Jobs()
    stray = jobs.run("low", "n0", node_selector={"zone": "a"})
    nodes = [gpu_node("n0", labels={"zone": "b"}), gpu_node("n1", labels={"zone": "a"})]
    got = moved(jobs.plan(nodes, config(only("RemovePodsViolatingNodeAffinity"))))
    assert got == {stray.id: (("n0",), ("n1",))}


def test_remove_pods_violating_inter_pod_anti_affinity_keeps_the_oldest():
    jobs = Jobs()
    old = jobs.run("low", "n0", minutes_ago=60, anti_affinity=True, array_job_id=100, array_task_id=0)
    new = jobs.run("low", "n0", minutes_ago=5, anti_affinity=True, array_job_id=100, array_task_id=1)
    got = moved(jobs.plan(cluster(2), config(only("RemovePodsViolatingInterPodAntiAffinity"))))
    assert got == {new.id: (("n0",), ("n1",))} and old.id not in got


def test_remove_pods_violating_topology_spread_moves_a_split_gang_whole():
    jobs = Jobs()
    gang = jobs.run("low", ["n0", "n1"], topology="nvlink")
    nodes = [gpu_node("n0", labels={"nvlink": "d1"}), gpu_node("n1", labels={"nvlink": "d2"}),
             gpu_node("n2", labels={"nvlink": "d3"}), gpu_node("n3", labels={"nvlink": "d3"})]
    plan = jobs.plan(nodes, config(only("RemovePodsViolatingTopologySpreadConstraint")))
    assert moved(plan) == {gang.id: (("n0", "n1"), None)}
    assert "span 2 nvlink domains" in plan.migrations[0].reason


def test_topology_spread_keeps_a_gang_no_single_domain_can_take():
    jobs = Jobs()
    jobs.run("low", ["n0", "n1"], topology="nvlink")
    nodes = [gpu_node("n0", labels={"nvlink": "d1"}), gpu_node("n1", labels={"nvlink": "d2"})]
    plan = jobs.plan(nodes, config(only("RemovePodsViolatingTopologySpreadConstraint")))
    assert plan.migrations == () and "no single domain has room" in plan.skipped[0].why


def test_remove_duplicates_spreads_tasks_of_one_array():
    jobs = Jobs()
    a = jobs.run("low", "n0", minutes_ago=50, array_job_id=7, array_task_id=0)
    b = jobs.run("low", "n0", minutes_ago=40, array_job_id=7, array_task_id=1)
    got = moved(jobs.plan(cluster(2), config(only("RemoveDuplicates"))))
    assert got == {b.id: (("n0",), ("n1",))} and a.id not in got
    assert jobs.plan(cluster(2), config(only("RemoveDuplicates", excludeOwnerKinds=["array"]))).migrations == ()


def test_pod_lifetime_evicts_the_oldest_first_within_the_caps():
    jobs = Jobs()
    oldest = jobs.run("low", "n0", minutes_ago=300)
    older = jobs.run("low", "n0", minutes_ago=200)
    jobs.run("low", "n0", minutes_ago=10)
    cfg = config({**only("PodLifeTime", maxPodLifeTimeSeconds=3600), "maxNoOfPodsToEvictTotal": 1})
    plan = jobs.plan(cluster(2), cfg)
    assert list(moved(plan)) == [oldest.id]
    assert any(s.job_id == older.id and "maxNoOfPodsToEvictTotal 1" in s.why for s in plan.skipped)


def test_per_node_and_per_namespace_caps():
    jobs = Jobs()
    for _ in range(3):
        jobs.run("low", "n0", minutes_ago=300)
    cfg = config({**only("PodLifeTime", maxPodLifeTimeSeconds=60), "maxNoOfPodsToEvictPerNode": 2})
    assert len(jobs.plan(cluster(2), cfg).migrations) == 2
    cfg = config({**only("PodLifeTime", maxPodLifeTimeSeconds=60), "maxNoOfPodsToEvictPerNamespace": 1})
    assert len(jobs.plan(cluster(2), cfg).migrations) == 1


def test_min_pod_age_and_node_fit():
    jobs = Jobs()
    jobs.run("low", "n0", minutes_ago=300, gpus=8)
    full = config({**only("PodLifeTime", maxPodLifeTimeSeconds=60)})
    plan = jobs.plan([gpu_node("n0"), gpu_node("n1", gpus=4)], full)  # nowhere else for 8 GPUs
    assert plan.migrations == () and "nodeFit" in plan.skipped[0].why
    young = config({**only("PodLifeTime", maxPodLifeTimeSeconds=60), "evictor": {"minPodAgeSeconds": 86400}})
    assert "minPodAgeSeconds" in jobs.plan(cluster(2), young, now=NOW + timedelta(0)).skipped[0].why
