"""The reconciler's translation of backend reports, with a scripted backend on a real store."""

from __future__ import annotations

import pytest

from crossdock.queue.ports import BackendStatus, Capabilities, Inventory
from crossdock.queue.models import Job, JobSpec
from crossdock.queue.states import JobState
from crossdock.workers.leader import Scheduler

pytestmark = pytest.mark.redis


class Scripted:
    kind = "slurm"
    capabilities = Capabilities()

    def __init__(self):
        self.report: BackendStatus | None = None

    def inventory(self):
        return Inventory(())

    def status(self, jobs):
        return {j.id: self.report for j in jobs if self.report is not None}


@pytest.fixture
def scripted(runtime, monkeypatch):
    fake = Scripted()
    runtime.backends.use("slurm", fake)
    return fake


def placed(store, requeue=True) -> Job:
    job, = store.submit([Job(id=0, spec=JobSpec(command=["true"], requeue=requeue), queue="q")])
    store.transition(job.id, JobState.SCHEDULED, bump_attempt=True, fields={"backend": "slurm", "backend_ref": "77"})
    store.claim_dispatch([job.id], 1, "w")[0]
    return store.get(job.id)


def test_waiting_inside_the_backend_stays_scheduled_and_a_backend_requeue_keeps_the_attempt(runtime, scripted):
    sent = []
    sched = Scheduler(runtime, lambda *a: sent.append(a))
    job = placed(runtime.store)
    steps = [("PENDING", JobState.SCHEDULED), ("RUNNING", JobState.RUNNING), ("PENDING", JobState.SCHEDULED),
             ("RUNNING", JobState.RUNNING), ("COMPLETED", JobState.COMPLETED)]
    for native, expected in steps:
        state = {"PENDING": JobState.PENDING, "RUNNING": JobState.RUNNING, "COMPLETED": JobState.COMPLETED}[native]
        scripted.report = BackendStatus("77", state, reason="Priority" if native == "PENDING" else "",
                                        exit_code=0 if native == "COMPLETED" else None, nodes=("cpu1",))
        sched.reconcile()
        got = runtime.store.get(job.id)
        assert got.state is expected, native
        assert got.attempts == 1
    assert sent == []
    assert runtime.store.get(job.id).exit_code == 0


def test_preempted_in_the_backend_is_requeued_as_a_new_attempt(runtime, scripted):
    sched = Scheduler(runtime, lambda *a: None)
    job = placed(runtime.store)
    scripted.report = BackendStatus("77", JobState.RUNNING, nodes=("cpu1",))
    sched.reconcile()
    scripted.report = BackendStatus("77", JobState.PREEMPTED, reason="Preempted")
    sched.reconcile()
    got = runtime.store.get(job.id)
    assert got.state is JobState.PENDING and got.reason == "Preempted"
    assert [e["to"] for e in runtime.store.events(job.id)][-2:] == ["PREEMPTED", "PENDING"]


def test_a_job_the_backend_forgot_is_marked_lost(runtime, scripted):
    sched = Scheduler(runtime, lambda *a: None)
    job = placed(runtime.store, requeue=False)
    scripted.report = BackendStatus("77", JobState.RUNNING)
    sched.reconcile()
    scripted.report = None
    sched.reconcile()
    got = runtime.store.get(job.id)
    assert (got.state, got.reason) == (JobState.NODE_FAIL, "NodeLost")


@pytest.mark.parametrize("requeue", [True, False], ids=["requeue", "no-requeue"])
def test_a_node_failure_the_backend_reports_is_a_new_attempt_when_the_spec_allows(runtime, scripted, requeue):
    """A Slurm node that failed to resume strands its job: the backend reports NODE_FAIL."""
    sched = Scheduler(runtime, lambda *a: None)
    job = placed(runtime.store, requeue=requeue)
    scripted.report = BackendStatus("77", JobState.NODE_FAIL, reason="ResumeFailed")
    sched.reconcile()
    got = runtime.store.get(job.id)
    assert [e["to"] for e in runtime.store.events(job.id)][-2:] == (["NODE_FAIL", "PENDING"] if requeue
                                                                     else ["SCHEDULED", "NODE_FAIL"])
    assert got.state is (JobState.PENDING if requeue else JobState.NODE_FAIL)
    assert got.reason == "ResumeFailed"
    assert got.backend_ref == (None if requeue else "77")  # a new attempt has no backend object yet


def test_a_claimed_dispatch_is_lost_only_once_its_task_stopped_refreshing(runtime, scripted, monkeypatch):
    """A worker SIGKILLed between the claim and the submit: nobody will send that attempt again,
    so it is lost (a new attempt) once its task is seen silent, while a live task is waited for."""
    from crossdock.workers import follow

    monkeypatch.setattr(follow, "DISPATCHER_SILENT_SECONDS", 0.0)
    store = runtime.store
    job, = store.submit([Job(id=0, spec=JobSpec(command=["true"]), queue="q")])
    store.transition(job.id, JobState.SCHEDULED, bump_attempt=True, fields={"backend": "slurm"})
    assert store.claim_dispatch([job.id], 1, "host:task-1")[0] == [job.id]
    sched = Scheduler(runtime, lambda *a: None)
    for _ in range(3):  # still submitting (a long batch): it refreshes its liveness
        sched.reconcile()
        assert store.dispatcher_alive(job.id, 1)
        assert store.get(job.id).state is JobState.SCHEDULED
    store.dispatching("host:task-1", alive=False)  # the worker died
    sched.reconcile()  # first seen silent
    assert store.get(job.id).state is JobState.SCHEDULED
    sched.reconcile()
    got = store.get(job.id)
    assert (got.state, got.attempts) == (JobState.PENDING, 1)
    assert [e["to"] for e in store.events(job.id)][-2:] == ["NODE_FAIL", "PENDING"]


def test_a_status_pass_is_recorded_in_one_typed_call_and_a_replay_moves_nothing(runtime):
    """``JobStore.record_statuses``: one result per change (the transition's, or the update's),
    each next step landing with its end; the same changes again (a replayed pass) move nothing."""
    from datetime import datetime, timezone

    from crossdock.queue.reconcile import Requeue, Settle, Update

    store = runtime.store
    lost_node, running = placed(store), placed(store)
    store.transition(running.id, JobState.RUNNING)
    no_ref = placed(store)
    store.update_if(no_ref.id, (JobState.SCHEDULED,), {"backend_ref": None})
    no_ref = store.get(no_ref.id)
    at = datetime(2026, 1, 2, tzinfo=timezone.utc)
    changes = [Settle(lost_node, JobState.NODE_FAIL, "ResumeFailed", None, ("cpu1",), ended=at, then=Requeue("ResumeFailed")),
               Settle(store.get(running.id), JobState.COMPLETED, "", 0, ("cpu2",), ended=at),
               Update(no_ref, ref="78", reason="Priority")]
    done = store.record_statuses(changes, actor="slurm")
    assert [(d.job_id, d.state, d.moved, d.was) for d in done] == [
        (lost_node.id, JobState.NODE_FAIL, True, "SCHEDULED"), (running.id, JobState.COMPLETED, True, "RUNNING"),
        (no_ref.id, None, True, "")]
    assert store.get(lost_node.id).state is JobState.PENDING
    finished = store.get(running.id)
    assert (finished.state, finished.exit_code, finished.nodes, finished.end_time) == (JobState.COMPLETED, 0, ["cpu2"], at)
    assert (store.get(no_ref.id).backend_ref, store.get(no_ref.id).reason) == ("78", "Priority")
    again = store.record_statuses(changes[:2], actor="slurm")
    assert [(d.moved, d.was) for d in again] == [(False, "PENDING"), (False, "COMPLETED")]
    assert [e["to"] for e in store.events(lost_node.id)][-2:] == ["NODE_FAIL", "PENDING"]
    assert store.record_statuses([], actor="slurm") == []
