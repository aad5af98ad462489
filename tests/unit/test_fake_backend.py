"""The in-memory fake backend on its own: idempotent submit, what a test drives, the kwok-like
simulated runs, array throttles, inventory. (The contract suite runs it beside the real ones.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from crossdock.backends import registry
from crossdock.backends.fake.backend import FakeBackend
from crossdock.queue.config import parse_config
from crossdock.queue.models import ArraySpec, Job, JobSpec
from crossdock.queue.ports import Backend, SupportsArrays
from crossdock.queue.states import JobState, Reason
from tests.clock import Clock

CONFIG = parse_config({
    "priority_classes": {"b": {"value": 1}},
    "pools": {"box": {"backend": "fake", "nodes": [{"name": "f0", "cpus": 4, "memory_mib": 1024, "gpus": 2,
                                                     "gpu_model": "A100"},
                                                    {"name": "f1", "cpus": 2, "memory_mib": 512}]},
              "other": {"backend": "local"}},
    "queues": {"q": {"priority_class": "b", "pools": ["box"]}},
})


class Stops:
    """The store's side of a preemption, recorded."""

    def __init__(self):
        self.preempts: list[tuple[int, float]] = []

    def request_preempt(self, job_id: int, grace_seconds: float) -> None:
        self.preempts.append((job_id, grace_seconds))


def job(job_id: int, attempt: int = 1, env: dict | None = None, **kw) -> Job:
    return Job(id=job_id, spec=JobSpec(command=["true"], env=env or {}), attempts=attempt, nodes=["f0"], **kw)


def states(fake: FakeBackend, *jobs: Job) -> list:
    got = fake.status(list(jobs))
    return [(got[j.id].state, got[j.id].exit_code) if j.id in got else None for j in jobs]


def test_registered_and_implements_the_protocols():
    fake = registry.create("fake", registry.BackendContext(CONFIG, None, state_dir=Path(".")))
    assert isinstance(fake, Backend) and isinstance(fake, SupportsArrays)
    assert registry.capabilities("fake") is fake.capabilities
    assert (fake.capabilities.arrays, fake.capabilities.reowns_claims, fake.capabilities.heartbeat) == (True, True, False)


def test_submit_is_idempotent_per_job_and_attempt():
    fake = FakeBackend(CONFIG)
    j = job(7)
    assert fake.submit(j) == fake.submit(j) == "fake:7:1"
    assert fake.submit(job(7, attempt=2)) == "fake:7:2"
    assert fake.created == ["fake:7:1", "fake:7:2"]


def test_driven_to_each_end():
    fake = FakeBackend(CONFIG, start_on_submit=False)
    ok, bad, lost, gone = job(1), job(2), job(3), job(4)
    for j in (ok, bad, lost, gone):
        fake.submit(j)
    assert states(fake, ok) == [(JobState.PENDING, None)]
    for j in (ok, bad, lost, gone):
        fake.start(j.id)
    fake.finish(ok.id)
    fake.finish(bad.id, exit_code=3)
    fake.forget(gone.id)
    assert states(fake, ok, bad, lost, gone) == [(JobState.COMPLETED, 0), (JobState.FAILED, 3),
                                                 (JobState.RUNNING, None), None]
    assert fake.fail_node("f0") == [lost.id]
    assert fake.status([lost])[lost.id].reason == Reason.NODE_LOST
    assert [n.schedulable for n in fake.inventory().nodes] == [False, True]
    fake.restore_node("f0")
    assert all(n.schedulable for n in fake.inventory().nodes)
    with pytest.raises(ValueError, match="ended already"):
        fake.finish(ok.id)


def test_cancel_and_preempt_with_its_grace():
    clock, stops = Clock(100.0), Stops()
    fake = FakeBackend(CONFIG, stops, clock=clock)
    a, b, c = job(1), job(2), job(3)
    for j in (a, b, c):
        fake.submit(j)
    fake.cancel(a)
    fake.preempt(b, 0)
    fake.preempt(c, 5)
    assert fake.status([a])[a.id].reason == Reason.CANCELLED_BY_USER
    assert [s for s, _ in states(fake, a, b, c)] == [JobState.CANCELLED, JobState.PREEMPTED, JobState.RUNNING]
    clock.now += 5
    assert states(fake, c)[0][0] is JobState.PREEMPTED
    assert stops.preempts == [(2, 0), (3, 5)]


def test_simulated_runs_end_by_themselves_as_on_kwok():
    clock = Clock(100.0)
    fake = FakeBackend(CONFIG, clock=clock)
    slow = job(1, env={"CROSSDOCK_SIMULATE_RUN_SECONDS": "2", "CROSSDOCK_SIMULATE_EXIT_CODE": "4"})
    at_once = job(2, env={"CROSSDOCK_SIMULATE_EXIT_CODE": "0"})
    forever = job(3)
    for j in (slow, at_once, forever):
        fake.submit(j)
    assert states(fake, slow, at_once, forever) == [(JobState.RUNNING, None), (JobState.COMPLETED, 0),
                                                    (JobState.RUNNING, None)]
    clock.now += 2
    assert states(fake, slow, forever) == [(JobState.FAILED, 4), (JobState.RUNNING, None)]


def test_array_is_one_submission_that_keeps_its_throttle():
    clock = Clock(100.0)
    fake = FakeBackend(CONFIG, clock=clock)
    spec = JobSpec(command=["true"], array=ArraySpec(task_ids=[0, 1, 2], max_running=2),
                   env={"CROSSDOCK_SIMULATE_RUN_SECONDS": "1"})
    tasks = [Job(id=10 + t, spec=spec, attempts=1, array_job_id=10, array_task_id=t) for t in range(3)]
    refs = fake.submit_array(tasks)
    assert fake.submit_array(tasks) == refs == {10: "fake:10:1", 11: "fake:11:1", 12: "fake:12:1"}
    assert [s for s, _ in states(fake, *tasks)] == [JobState.RUNNING, JobState.RUNNING, JobState.PENDING]
    clock.now += 1  # the first two end; the third's turn comes, and it runs its own second
    assert [s for s, _ in states(fake, *tasks)] == [JobState.COMPLETED, JobState.COMPLETED, JobState.RUNNING]
    clock.now += 1
    assert [s for s, _ in states(fake, *tasks)] == [JobState.COMPLETED] * 3


def test_inventory_is_the_fake_pools_declared_nodes():
    nodes = FakeBackend(CONFIG).inventory().nodes
    assert [(n.name, n.pool, n.backend, n.cpu_milli, n.memory_mib) for n in nodes] == [
        ("f0", "box", "fake", 4000, 1024), ("f1", "box", "fake", 2000, 512)]
    assert [g.id for g in nodes[0].gpus] == ["f0:0", "f0:1"] and nodes[0].gpus[0].model == "A100"
