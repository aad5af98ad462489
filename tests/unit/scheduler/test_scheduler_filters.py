"""Filters, table-driven: which nodes pass and which kube-style reason the others get."""

from __future__ import annotations

import numpy as np
import pytest
from sched_builders import NOW, config, job, node, running

from crossdock.queue.cycle import run_cycle
from crossdock.queue.scheduler.framework import CycleState
from crossdock.queue.scheduler.inventory import Inventory
from crossdock.queue.scheduler.profiles import profile_for
from crossdock.queue.scheduler.registry import explain
from crossdock.queue.scheduler.request import build_request
from crossdock.queue.snapshot import Snapshot

CFG = config()


def feasible_names(nodes, j, allocations=()):
    inv = Inventory(nodes)
    for a in allocations:
        inv.apply(a)
    state = CycleState(inv, CFG, NOW)
    req = build_request(j.build(), CFG)
    prof = profile_for(req.placement)
    return sorted(inv.nodes[i].name for i in prof.feasible(state, req)), prof.reasons(state, req)


CASES = [
    # id, nodes, job, allocations, passing nodes, reasons
    ("cpu-fits", [node("a", cpus=2), node("b", cpus=8)], job(1).cpus(4), (), ["b"], {"Insufficient cpu": 1}),
    ("memory-fits", [node("a", mem=100), node("b", mem=9000)], job(1).mem(1000), (), ["b"],
     {"Insufficient memory": 1}),
    ("whole-gpus-counted-per-device", [node("a", gpus=2), node("b", gpus=4)], job(1).gpus(2),
     [running(9, "a", gpus=("a-gpu0",))], ["b"], {"Insufficient nvidia.com/gpu": 1}),
    ("gpu-model-one-of-a-set", [node("a", gpus=1, model="A100"), node("b", gpus=1, model="L4"),
                                node("c", gpus=1, model="T4")], job(1).gpus(1, models=["L4", "T4"]), (), ["b", "c"],
     {"node(s) didn't have GPU model l4|t4": 1}),
    ("pool-membership", [node("a", pool="gpu"), node("b", pool="other")], job(1), (), ["a"],
     {"node(s) didn't match the job's pools": 1}),
    ("nodelist", [node("a"), node("b"), node("c")], job(1).set(nodelist=["b", "c"], exclude=["c"]), (), ["b"],
     {"node(s) didn't match the job's node list": 2}),
    ("unschedulable", [node("a", schedulable=False), node("b")], job(1), (), ["b"],
     {"node(s) were unschedulable": 1}),
    ("taints-need-tolerations", [node("a", taints=("nvidia.com/gpu=present:NoSchedule",)),
                                 node("b", taints=("note:PreferNoSchedule",))], job(1), (), ["b"],
     {"node(s) had untolerated taint(s)": 1}),
    ("share-only-on-sharing-pools", [node("a", gpus=1), node("b", pool="share", gpus=1)],
     job(1).gpus(1, share=0.5), (), ["b"], {"node(s) didn't allow GPU sharing": 1}),
    ("share-needs-room-on-one-device", [node("a", pool="share", gpus=2), node("b", pool="share", gpus=1)],
     job(1).gpus(1, share=0.5), [running(8, "b", gpu_share={"b-gpu0": 0.75})], ["a"],
     {"Insufficient nvidia.com/gpu (share)": 1}),
    ("mig-profile-present", [node("a", gpus=1, mig=("3g.40gb", "3g.40gb")), node("b", gpus=1)],
     job(1).gpus(2, mig="3g.40gb"), (), ["a"], {"node(s) didn't have MIG profile 3g.40gb": 1}),
    ("mig-slices-free", [node("a", gpus=1, mig=("1g.10gb",) * 7)], job(1).gpus(2, mig="1g.10gb"),
     [running(8, "a", gpus=tuple(f"a-gpu0/mig-1g.10gb-{k}" for k in range(6)))], [],
     {"Insufficient nvidia.com/mig-1g.10gb": 1}),
    ("nvlink-island", [node("a", gpus=8, islands=2), node("b", gpus=8, islands=2)], job(1).gpus(3),
     [running(8, "a", gpus=("a-gpu0", "a-gpu1", "a-gpu4", "a-gpu5"))], ["b"],
     {"node(s) had no NVLink island with 3 free GPUs": 1}),
    ("exclusive-needs-idle-node", [node("a"), node("b")], job(1).set(exclusive=True), [running(8, "a")], ["b"],
     {"node(s) were not idle (exclusive job)": 1}),
]


@pytest.mark.parametrize("nodes,j,allocs,passing,reasons", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_filters(nodes, j, allocs, passing, reasons):
    names, why = feasible_names(nodes, j, allocs)
    assert names == passing
    assert why == reasons


def test_anti_affinity_keeps_one_task_of_an_array_per_node():
    cfg = CFG
    nodes = (node("a"), node("b"))
    jobs = [job(10 + t).set(anti_affinity=True).array(10, t).build() for t in range(3)]
    r = run_cycle(Snapshot(nodes=nodes), jobs, cfg, NOW)
    assert sorted(p.nodes[0] for p in r.admitted) == ["a", "b"]
    assert "anti-affinity" in r.explanations[12]


def test_explanation_reads_like_kube_scheduler():
    text = explain({"Insufficient nvidia.com/gpu": 3000, "node(s) didn't match the job's pools": 1200,
                    "Insufficient cpu": 800}, 5000)
    assert text == ("0/5000 nodes are available: 1200 node(s) didn't match the job's pools, "
                    "3000 Insufficient nvidia.com/gpu, 800 Insufficient cpu.")


def test_every_pending_job_gets_a_reason_and_explanation():
    nodes = tuple(node(f"n{i}", gpus=1) for i in range(3)) + (node("c", pool="cpu"),)
    jobs = [job(1).gpus(1).build(), job(2).gpus(1).build(), job(3).gpus(1).build(), job(4).gpus(1).build(),
            job(5).gpus(16).build(), job(6).cpus(1000).build()]
    r = run_cycle(Snapshot(nodes=nodes), jobs, CFG, NOW)
    assert len(r.admitted) == 3
    assert r.pending[4] == "Resources"
    assert r.explanations[4] == "0/4 nodes are available: 4 Insufficient nvidia.com/gpu."
    assert r.pending[5] == "Unschedulable" and r.pending[6] == "Unschedulable"
    assert set(r.pending) | {p.job_id for p in r.admitted} == {1, 2, 3, 4, 5, 6}


def test_per_job_limit_is_unschedulable_with_the_limit_named():
    cfg = config(queues={"train": {"priority_class": "low", "pools": ["gpu"], "per_job": {"gpu": 2}}})
    r = run_cycle(Snapshot(nodes=(node("a", gpus=8),)), [job(1).gpus(4).build()], cfg, NOW)
    assert r.pending[1] == "Unschedulable"
    assert "per-job limit of 2" in r.explanations[1]


def test_static_masks_are_cached_per_request_shape():
    inv = Inventory([node("a"), node("b", pool="cpu")])
    state = CycleState(inv, CFG, NOW)
    req = build_request(job(1).build(), CFG)
    prof = profile_for("binpack")
    first = prof.static_nodes(state, req)
    assert prof.static_nodes(state, req) is first
    assert np.array_equal(first, [0, 1])


def test_a_cluster_without_nodes_leaves_jobs_unschedulable():
    r = run_cycle(Snapshot(nodes=()), [job(1).build(), job(2).gpus(1).build()], CFG, NOW)
    assert r.pending == {1: "Unschedulable", 2: "Unschedulable"}
    assert r.explanations[1] == "0/0 nodes are available."
