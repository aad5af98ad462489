"""The run_cycle seam: eligibility (holds, dependencies, throttles), order and resource accounting."""

from datetime import datetime, timedelta, timezone

import pytest

from crossdock.queue.config import parse_config
from crossdock.queue.cycle import run_cycle
from crossdock.queue.models import ArraySpec, Dependency, DependencySpec, GpuRequest, Job, JobSpec
from crossdock.queue.snapshot import Allocation, GpuDevice, JobFacts, Node, Snapshot
from crossdock.queue.states import JobState, Reason

NOW = datetime(2026, 1, 1, tzinfo=timezone.utc)
CFG = parse_config({
    "priority_classes": {"high": {"value": 1000}, "low": {"value": 100, "preemptible": True}},
    "pools": {"p": {"backend": "local"}},
    "queues": {"q": {"priority_class": "low", "pools": ["p"]}},
    "scheduler": {"default_mem_per_cpu_mib": 0},
})


def node(name="n1", cpus=4, mem=1000, gpus=2, model="A100"):
    return Node(name, "p", "local", cpus * 1000, mem, tuple(GpuDevice(f"{name}:{i}", i, model) for i in range(gpus)))


def job(i, priority=100, **spec):
    spec.setdefault("command", ["true"])
    extra = {k: spec.pop(k) for k in ("array_job_id", "array_task_id", "state", "exit_code") if k in spec}
    return Job(id=i, spec=JobSpec(**spec), queue="q", priority=priority, pools=["p"], **extra)


def dep(kind, target, combine="AND"):
    return DependencySpec(combine=combine, deps=[Dependency(type=kind, job_id=target)])


def test_priority_then_submit_order_decides_who_gets_scarce_capacity():
    snap = Snapshot(nodes=(node(cpus=2),))
    jobs = [job(1, cpus_per_task=2), job(2, priority=1000, cpus_per_task=2), job(3, cpus_per_task=1)]
    r = run_cycle(snap, jobs, CFG, NOW)
    assert [p.job_id for p in r.admitted] == [2]
    assert r.pending[1] == Reason.RESOURCES
    assert r.pending[3] in (Reason.PRIORITY, Reason.RESOURCES)


def test_gpus_are_never_given_twice():
    snap = Snapshot(nodes=(node(gpus=2),), allocations=(Allocation(9, "n1", 0, 0, ("n1:0",)),))
    jobs = [job(1, gpus=GpuRequest(count=1)), job(2, gpus=GpuRequest(count=1))]
    r = run_cycle(snap, jobs, CFG, NOW)
    assert [(p.job_id, p.gpu_ids) for p in r.admitted] == [(1, ("n1:1",))]
    assert 2 in r.pending


def test_gpu_model_is_respected():
    snap = Snapshot(nodes=(node("a", model="A100"), node("b", model="L4")))
    r = run_cycle(snap, [job(1, gpus=GpuRequest(count=1, type="l4"))], CFG, NOW)
    assert r.admitted[0].nodes == ("b",)


def test_a_gang_is_all_or_nothing():
    snap = Snapshot(nodes=(node("a", cpus=4), node("b", cpus=1)))
    r = run_cycle(snap, [job(1, nodes=2, ntasks=2, cpus_per_task=2), job(2, cpus_per_task=4)], CFG, NOW)
    assert [p.job_id for p in r.admitted] == [2]  # job 1 did not keep node a half-taken
    assert 1 in r.pending


@pytest.mark.parametrize("kind,target_state,target_exit,outcome", [
    ("afterok", JobState.COMPLETED, 0, "admitted"),
    ("afterok", JobState.FAILED, 1, "cancelled"),
    ("afterok", JobState.RUNNING, None, "waiting"),
    ("afternotok", JobState.FAILED, 1, "admitted"),
    ("afternotok", JobState.COMPLETED, 0, "cancelled"),
    ("afterany", JobState.CANCELLED, None, "admitted"),
    ("after", JobState.RUNNING, None, "admitted"),
    ("after", JobState.PENDING, None, "waiting"),
], ids=lambda v: str(v))
def test_dependencies(kind, target_state, target_exit, outcome):
    facts = {5: JobFacts(5, target_state, target_exit)}
    snap = Snapshot(nodes=(node(),), jobs=facts)
    r = run_cycle(snap, [job(1, dependency=dep(kind, 5))], CFG, NOW)
    if outcome == "admitted":
        assert [p.job_id for p in r.admitted] == [1]
    elif outcome == "cancelled":
        assert r.cancelled == {1: Reason.DEPENDENCY_NEVER_SATISFIED}
    else:
        assert r.pending == {1: Reason.DEPENDENCY}


def test_or_dependencies_need_one():
    facts = {5: JobFacts(5, JobState.FAILED, 1), 6: JobFacts(6, JobState.COMPLETED, 0)}
    spec = DependencySpec(combine="OR", deps=[Dependency(type="afterok", job_id=5),
                                              Dependency(type="afterok", job_id=6)])
    r = run_cycle(Snapshot(nodes=(node(),), jobs=facts), [job(1, dependency=spec)], CFG, NOW)
    assert [p.job_id for p in r.admitted] == [1]


def test_after_with_delay_waits_for_the_delay():
    facts = {5: JobFacts(5, JobState.RUNNING, start_time=NOW - timedelta(minutes=1))}
    spec = DependencySpec(deps=[Dependency(type="after", job_id=5, delay_minutes=2)])
    r = run_cycle(Snapshot(nodes=(node(),), jobs=facts), [job(1, dependency=spec)], CFG, NOW)
    assert r.pending == {1: Reason.DEPENDENCY}


def test_held_jobs_wait_with_reason():
    r = run_cycle(Snapshot(nodes=(node(),)), [job(1, hold=True)], CFG, NOW)
    assert r.pending == {1: Reason.JOB_HELD_USER} and not r.admitted


def test_array_throttle_counts_running_and_newly_admitted_tasks():
    arr = ArraySpec(task_ids=[0, 1, 2, 3], max_running=2)
    jobs = [job(10 + t, array=arr, array_job_id=10, array_task_id=t) for t in range(4)]
    snap = Snapshot(nodes=(node(cpus=8),), running_per_array={10: 1})
    r = run_cycle(snap, jobs, CFG, NOW)
    assert len(r.admitted) == 1
    assert sum(1 for v in r.pending.values() if v == Reason.ARRAY_TASK_LIMIT) == 3
