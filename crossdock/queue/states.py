"""Job states, pending reasons and the one transition table.

States follow Slurm's names so that HPC users read them without a glossary; ``SCHEDULED`` is
crossdock's own: the scheduler has decided where the job goes and a dispatch is in flight.
"""

from __future__ import annotations

from enum import StrEnum

from crossdock.queue.errors import IllegalTransition


class JobState(StrEnum):
    PENDING = "PENDING"
    """Waiting in the queue; ``reason`` says why it is not running yet."""
    SCHEDULED = "SCHEDULED"
    """Placed by the scheduler; the dispatch to its backend is in flight."""
    RUNNING = "RUNNING"
    """The backend reports the job running."""
    COMPLETED = "COMPLETED"
    """Finished with exit code 0."""
    FAILED = "FAILED"
    """Finished with a non-zero exit code, or could not be started."""
    CANCELLED = "CANCELLED"
    """Cancelled by a user, an admin, or because a dependency can never be satisfied."""
    TIMEOUT = "TIMEOUT"
    """Killed when it reached its time limit."""
    OUT_OF_MEMORY = "OUT_OF_MEMORY"
    """Killed by the out-of-memory killer."""
    NODE_FAIL = "NODE_FAIL"
    """Its node, worker or backend lost it (crashed, deleted, unknown to the backend)."""
    PREEMPTED = "PREEMPTED"
    """Stopped to make room for a higher-priority job; requeued or cancelled per its policy."""

    @property
    def terminal(self) -> bool:
        return self in TERMINAL

    @property
    def active(self) -> bool:
        """Holds resources on a node (placed and not yet finished)."""
        return self in (JobState.SCHEDULED, JobState.RUNNING)


TERMINAL = frozenset({JobState.COMPLETED, JobState.FAILED, JobState.CANCELLED, JobState.TIMEOUT,
                      JobState.OUT_OF_MEMORY, JobState.NODE_FAIL})

_FINISH = {JobState.COMPLETED, JobState.FAILED, JobState.CANCELLED, JobState.TIMEOUT,
           JobState.OUT_OF_MEMORY, JobState.NODE_FAIL}

# old state -> states it may move to. Requeue (back to PENDING) is allowed from every state
# that ran or tried to run, like `scontrol requeue` on running and finished batch jobs.
TRANSITIONS: dict[JobState, frozenset[JobState]] = {
    JobState.PENDING: frozenset({JobState.SCHEDULED, JobState.CANCELLED, JobState.FAILED}),
    JobState.SCHEDULED: frozenset({JobState.RUNNING, JobState.PENDING, JobState.PREEMPTED} | _FINISH),
    # RUNNING -> SCHEDULED: the backend requeued the job itself (Slurm's own preemption) and
    # will start the same attempt again.
    JobState.RUNNING: frozenset({JobState.PENDING, JobState.SCHEDULED, JobState.PREEMPTED} | _FINISH),
    JobState.PREEMPTED: frozenset({JobState.PENDING, JobState.CANCELLED}),
    JobState.COMPLETED: frozenset({JobState.PENDING}),
    JobState.FAILED: frozenset({JobState.PENDING}),
    JobState.CANCELLED: frozenset({JobState.PENDING}),
    JobState.TIMEOUT: frozenset({JobState.PENDING}),
    JobState.OUT_OF_MEMORY: frozenset({JobState.PENDING}),
    JobState.NODE_FAIL: frozenset({JobState.PENDING}),
}


def can_transition(old: JobState, new: JobState) -> bool:
    return new in TRANSITIONS[old]


def stopped_outcome(state: JobState, reason: str, *, cancel: bool, preempt: bool) -> tuple[JobState, str]:
    """How an attempt that crossdock asked to stop ended: the stop request decides, not the exit
    status (a victim killed, exiting on SIGTERM with 143, or checkpointing and exiting 0 was
    preempted all the same), and a user's cancel wins over a preemption in flight.

    ``state`` is what the backend reports; an attempt that has not ended keeps it."""
    if not (state.terminal or state is JobState.PREEMPTED):
        return state, reason
    if cancel:
        return JobState.CANCELLED, Reason.CANCELLED_BY_USER
    if preempt:
        return JobState.PREEMPTED, reason if state is JobState.PREEMPTED else Reason.PREEMPTED
    return state, reason


def transition(old: JobState, new: JobState, job_id: int | None = None) -> JobState:
    """Return ``new`` if the move is legal, else raise :class:`IllegalTransition`."""
    if not can_transition(old, new):
        raise IllegalTransition(job_id, old, new)
    return new


class Reason(StrEnum):
    """Why a job is pending (or how it ended), as in squeue's REASON column."""

    NONE = "None"
    PRIORITY = "Priority"
    """Higher-priority jobs are ahead of it."""
    RESOURCES = "Resources"
    """No node has the free resources it needs right now."""
    DEPENDENCY = "Dependency"
    """Waiting for the jobs it depends on."""
    DEPENDENCY_NEVER_SATISFIED = "DependencyNeverSatisfied"
    """A dependency can no longer be met; the job is cancelled."""
    JOB_HELD_USER = "JobHeldUser"
    JOB_HELD_ADMIN = "JobHeldAdmin"
    QUOTA_EXCEEDED = "QuotaExceeded"
    """Its queue (or user) is at its quota."""
    LICENSES = "Licenses"
    """A license it asks for (``--licenses``) is all held by running jobs (the config's ``licenses:`` counts)."""
    BEGIN_TIME = "BeginTime"
    """Not eligible before its begin time (e.g. a requeue delay)."""
    DEADLINE = "DeadLine"
    """It can no longer end by its ``--deadline`` (start > deadline - time-min, else - time); the job is cancelled."""
    ARRAY_TASK_LIMIT = "JobArrayTaskLimit"
    """Its array already runs ``%max_running`` tasks."""
    UNSCHEDULABLE = "Unschedulable"
    """No node can ever satisfy the request."""
    PREEMPTING = "Preempting"
    """Capacity is being freed for it by preemption."""
    WAITING_FOR_CAPACITY = "WaitingForCapacity"
    """Nothing fits now; the autoscaler is adding nodes (or powering them up) for it."""
    INVALID_SPEC = "InvalidSpec"
    """The scheduler cannot evaluate its spec (stored by an older version, or beyond what a cycle
    can compute); set aside, with the error in its explanation, so that the others still run."""
    DISPATCH_RETRY = "DispatchRetry"
    """Its backend was unreachable; the dispatch will be retried."""
    NON_ZERO_EXIT = "NonZeroExitCode"
    TIME_LIMIT = "TimeLimit"
    CANCELLED_BY_USER = "CancelledByUser"
    NODE_LOST = "NodeLost"
    PREEMPTED = "Preempted"
    MIGRATED = "Migrated"
    """Evicted by the descheduler to be placed elsewhere (the event says from where and why)."""
    OUT_OF_MEMORY = "OutOfMemory"
    """Went past its memory request and was killed."""
