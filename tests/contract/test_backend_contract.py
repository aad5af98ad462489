"""What every backend promises, checked on each (``conftest.py`` has the adapters): a dispatched
job is followed to each end state the backend can produce, with its exit code; a duplicate or
redelivered dispatch submits nothing new; a restarted scheduler picks a running job up."""

from __future__ import annotations

import inspect

import pytest

from crossdock.queue.ports import Backend, SupportsArrays
from crossdock.queue.states import TERMINAL, JobState, Reason

pytestmark = pytest.mark.redis

RAN = {JobState.PENDING.value, JobState.SCHEDULED.value, JobState.RUNNING.value}
"""States a job passes through before it ends (RUNNING may be too short for the follower to see)."""


# --- followed to each end -------------------------------------------------------------------------


@pytest.mark.parametrize("exit_code, state, reason", [
    (0, JobState.COMPLETED, Reason.NONE),
    (3, JobState.FAILED, Reason.NON_ZERO_EXIT),
], ids=["exit-0", "exit-3"])
def test_a_job_ends_with_its_exit_code(contract, exit_code, state, reason):
    job = contract.job(exit_code)
    ref = contract.dispatch(job)
    done = contract.follow(job.id, *TERMINAL)
    assert (done.state, done.exit_code, done.reason) == (state, exit_code, reason)
    went = contract.history(job.id)
    assert went[-1] == state.value and set(went[:-1]) <= RAN, went
    assert done.attempts == 1 and done.backend_ref and ref
    assert done.end_time is not None
    assert contract.sent == []  # nothing resent, nothing lost


def test_cancel_ends_it_cancelled(contract):
    job = contract.job(None)
    contract.dispatch(job)
    contract.follow(job.id, JobState.RUNNING)
    contract.cancel(job)
    done = contract.follow(job.id, *TERMINAL)
    assert (done.state, done.reason) == (JobState.CANCELLED, Reason.CANCELLED_BY_USER)
    assert contract.history(job.id)[-2:] == ["RUNNING", "CANCELLED"]
    assert contract.sent == []


def test_preempt_ends_it_preempted_and_requeues_it(contract):
    job = contract.job(None)
    contract.dispatch(job)
    contract.follow(job.id, JobState.RUNNING)
    contract.preempt(job, grace_seconds=0)
    again = contract.follow(job.id, JobState.PENDING)
    assert contract.history(job.id)[-3:] == ["RUNNING", "PREEMPTED", "PENDING"]
    assert again.reason == Reason.PREEMPTED
    # Back in the queue for a new attempt, its placement and stop cleared.
    assert (again.attempts, again.nodes, again.backend_ref, again.preempt_requested) == (1, [], None, False)
    assert contract.sent == []


def test_preempted_without_requeue_is_not_requeued(contract):
    job = contract.job(None, requeue=False)
    contract.dispatch(job)
    contract.follow(job.id, JobState.RUNNING)
    contract.preempt(job, grace_seconds=0)
    done = contract.follow(job.id, *TERMINAL, JobState.PENDING)
    # One ending on every backend (the store's settle_preempted): PREEMPTED, then CANCELLED with
    # the preemption as its reason; never left PREEMPTED, which is neither active nor terminal.
    assert (done.state, done.reason) == (JobState.CANCELLED, Reason.PREEMPTED)
    assert contract.history(job.id)[-3:] == ["RUNNING", "PREEMPTED", "CANCELLED"]


GRACE_SECONDS = 4


@pytest.mark.parametrize("behaviour", ["keeps-running", "dies-of-term", "exits-143", "checkpoints"])  # conftest VICTIMS
def test_a_preempted_job_is_requeued_however_it_ends(contract, behaviour):
    """Killed at the end of its grace period, killed by SIGTERM, exiting 143 on it, or saving a
    checkpoint and exiting 0: the stop request decides, and the job is back in the queue."""
    job = contract.victim(behaviour)
    contract.dispatch(job)
    contract.follow(job.id, JobState.RUNNING)
    contract.adapter.victim_ready(job)
    contract.preempt(job, grace_seconds=GRACE_SECONDS, behaviour=behaviour)
    if behaviour == "keeps-running" and contract.adapter.honours_grace:
        # The task has returned, and the victim, which ignores SIGTERM, still runs: the task
        # did not wait out the grace period (the follower's status pass or the supervisor does).
        assert contract.backend.status([contract.store.get(job.id)])[job.id].state is JobState.RUNNING
    again = contract.follow(job.id, JobState.PENDING, *TERMINAL)
    assert (again.state, again.reason) == (JobState.PENDING, Reason.PREEMPTED), contract.history(job.id)
    assert contract.history(job.id)[-3:] == ["RUNNING", "PREEMPTED", "PENDING"]
    assert (again.attempts, again.backend_ref, again.preempt_requested, again.preempt_deadline) == (
        1, None, False, None)
    if behaviour == "checkpoints":
        assert contract.adapter.checkpointed(job) in (True, None)
    assert contract.sent == []


def test_cancel_during_the_grace_period_wins(contract):
    """A user cancels a victim while it is being preempted: CANCELLED, and not requeued."""
    job = contract.victim("keeps-running")
    contract.dispatch(job)
    contract.follow(job.id, JobState.RUNNING)
    contract.adapter.victim_ready(job)
    contract.preempt(job, grace_seconds=60)
    contract.cancel(job)
    done = contract.follow(job.id, *TERMINAL, JobState.PENDING)
    assert (done.state, done.reason, done.attempts) == (JobState.CANCELLED, Reason.CANCELLED_BY_USER, 1)
    assert "PENDING" not in contract.history(job.id)[1:]
    assert contract.sent == []


# --- dispatch exactly once ------------------------------------------------------------------------


def test_a_duplicate_dispatch_submits_nothing(contract, monkeypatch):
    """A second task for the same attempt (a resend, a duplicated message) finds the claim taken,
    whether it arrives while the first one is submitting or after."""
    job = contract.job(None)
    during: list[str] = []
    submit = contract.backend.submit

    def submit_with_a_duplicate_arriving(j, fresh=False):
        during.append(contract.dispatch(job, task_id="duplicate-during"))
        return submit(j, fresh=fresh)

    monkeypatch.setattr(contract.backend, "submit", submit_with_a_duplicate_arriving)
    ref = contract.dispatch(job, task_id="first")
    monkeypatch.setattr(contract.backend, "submit", submit)
    assert during == ["duplicate"]
    # After: still SCHEDULED for crossdock (nothing followed it yet), or already RUNNING where
    # the backend reports that itself (the local supervisor).
    assert contract.dispatch(job, task_id="duplicate-after") in ("duplicate", "stale: RUNNING attempt 1")
    assert contract.objects(job) == 1
    assert contract.store.get(job.id).backend_ref  # the first dispatch's, or the backend's own
    assert ref


def test_a_redelivered_dispatch_submits_nothing_new(contract):
    """The same task delivered again after its worker died (same Celery task id): a backend that
    ``reowns_claims`` submits again and finds what the first delivery started; the others do nothing."""
    job = contract.job(None)
    ref = contract.dispatch(job, task_id="delivery")
    # The worker died after the submission and before it recorded the reference.
    contract.store.update_if(job.id, (JobState.SCHEDULED,), {"backend_ref": None})
    again = contract.dispatch(job, task_id="delivery")
    if contract.capabilities.reowns_claims:
        assert again == ref
        assert contract.store.get(job.id).backend_ref == ref
    else:
        assert again in ("duplicate", "stale: RUNNING attempt 1")
    assert contract.objects(job) == 1


# --- reconcile after a restart --------------------------------------------------------------------


def test_a_restarted_scheduler_follows_a_running_job_to_its_end(contract):
    job = contract.job(None)
    contract.dispatch(job)
    contract.follow(job.id, JobState.RUNNING)
    contract.restart()  # the leader died; a new one starts with nothing in memory
    contract.release(job, exit_code=4)
    done = contract.follow(job.id, *TERMINAL)
    assert (done.state, done.exit_code, done.attempts) == (JobState.FAILED, 4, 1)
    assert contract.history(job.id)[-2:] == ["RUNNING", "FAILED"]
    assert contract.objects(job) == 1 and contract.sent == []


# --- what the backend tells without being asked to act --------------------------------------------


def test_inventory_lists_the_pools_nodes(contract):
    nodes = {n.name: n for n in contract.backend.inventory().nodes}
    for name in contract.adapter.nodes:
        assert (nodes[name].pool, nodes[name].backend) == ("box", contract.adapter.kind), nodes
        assert nodes[name].cpu_milli > 0 and nodes[name].memory_mib > 0


def test_status_leaves_out_jobs_it_does_not_know(contract):
    never_sent = contract.job(None)
    assert contract.backend.status([never_sent]) == {}


def test_methods_take_the_protocols_arguments(contract):
    """Callable as ``ports.Backend`` (and ``SupportsArrays``) spell them, positionally."""
    backend, job = contract.backend, contract.job(None)
    assert isinstance(backend, Backend) and backend.kind == contract.adapter.kind
    inspect.signature(backend.submit).bind(job, True)
    inspect.signature(backend.cancel).bind(job)
    inspect.signature(backend.preempt).bind(job, 0)
    inspect.signature(backend.status).bind([job])
    if contract.capabilities.arrays:
        assert isinstance(backend, SupportsArrays)
        inspect.signature(backend.submit_array).bind([job], None, True)
