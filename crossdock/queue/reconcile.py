"""The follower's rules: what to do about one backend's placed jobs, given what a pass read of them.

``reconcile(seen, limits) -> Plan`` is pure. The follower (``crossdock/workers/follow.py``) reads
what the rules need — the jobs, the backend's report or the heartbeats, the dispatch claims, the
stop requests standing, the watchers' traces — hands it here with ``now``, and carries out the
actions in order; nothing is performed here. Every action names one job, a job gets at most one,
and a terminal job (read just as it ended) gets none.

A backend followed by **heartbeat** (its own watcher writes one to the store), job by job:

1. a SCHEDULED job whose dispatch nobody claimed for ``resend_after`` s is sent again (``Resend``);
2. a claimed (or RUNNING) one whose heartbeat lives is left alone;
3. where the backend's watcher leaves traces outside the store, a silent job whose watcher lives
   (cut off from the store only) or cannot be asked is left alone; a dead watcher's end is
   recorded, and the job is lost only when it left none (``SettleLeftEnd``);
4. else a RUNNING job is lost (its watcher stopped reporting), a SCHEDULED one once it was placed
   ``lost_after`` s ago (dispatched, never started) (``MarkLost``, requeued when its spec allows).

A backend followed by **status** (one report for all its jobs), job by job:

1. one the backend does not report is lost when it ran, or had a backend reference for
   ``lost_after`` s; lost when the task that claimed its dispatch has been seen silent for
   ``dispatcher_silent`` s (it died between the claim and the submit, nobody will resend); sent
   again when nobody claimed it for ``resend_after`` s;
2. a reported one takes the reported state (PENDING inside the backend is SCHEDULED here; a stop
   request standing decides how an ended attempt ended: ``stopped_outcome``) in a ``Settle``,
   with its next step: a PREEMPTED attempt is requeued or cancelled (``Preempted``), a NODE_FAIL
   one requeued when its spec allows (``Requeue``, a cancel wins);
3. one whose state is unchanged only gets the backend reference the store lost (a store outage
   during its dispatch) and the pending reason the backend gives a SCHEDULED job (``Update``).

Silence is remembered between passes: ``Seen.silent_since`` maps each claimed attempt (job id,
attempt) to when its dispatch task was first seen not alive, and ``Plan.silent_since`` is the
memory the next pass starts from.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timezone
from enum import StrEnum
from typing import Mapping, Protocol, Sequence

from crossdock.queue.models import Job
from crossdock.queue.ports import BackendStatus
from crossdock.queue.states import JobState, stopped_outcome

RESEND_AFTER_SECONDS = 15.0
"""A SCHEDULED job whose dispatch nobody claimed this long after it was placed is sent again."""
LOST_AFTER_SECONDS = 60.0
"""A dispatched job that never started (or that its backend forgot) this long after it was placed is lost."""
DISPATCHER_SILENT_SECONDS = 30.0
"""A claimed dispatch whose task stopped refreshing its liveness (seen so by this follower for
this long: a live task refreshes within seconds of a store outage's end) and that left nothing the
backend knows never submitted: its worker died between the claim and the submit."""

AttemptKey = tuple[int, int]
"""(job id, attempt)."""


@dataclass(frozen=True)
class Limits:
    """The rules' windows, in seconds (each compared strictly: a job placed exactly 15 s ago is not resent)."""

    resend_after: float = RESEND_AFTER_SECONDS
    lost_after: float = LOST_AFTER_SECONDS
    dispatcher_silent: float = DISPATCHER_SILENT_SECONDS


class Watcher(StrEnum):
    """What a backend that is ``WatchedOutsideStore`` says of a silent job's watcher."""

    ALIVE = "alive"
    """It runs: only cut off from the store (after an outage every heartbeat expires at once)."""
    DEAD = "dead"
    """It is gone: the end it left, if any, is recorded; without one the job is lost."""
    UNKNOWN = "unknown"
    """The backend could not be asked: nothing is marked lost on a guess."""


class Stop(Protocol):
    """A stop request standing on a job (the store's ``StopRequest``)."""

    @property
    def cancel(self) -> bool: ...

    @property
    def preempt(self) -> bool: ...


@dataclass(frozen=True)
class Seen:
    """What one pass read about one backend's placed jobs (a job id absent from a mapping: no)."""

    kind: str
    jobs: Sequence[Job]
    now: float
    """Epoch seconds; placement ages and silences are measured against it, ends stamped with it."""
    statuses: Mapping[int, BackendStatus] | None = None
    """The backend's report by job id (a ``status`` backend); None: followed by heartbeat."""
    heartbeats: Mapping[int, bool] = field(default_factory=dict)
    """Job id → its watcher's heartbeat lives (heartbeat backends)."""
    claims: Mapping[int, bool] = field(default_factory=dict)
    """Job id → a dispatch task claimed its current attempt."""
    dispatchers: Mapping[int, bool] = field(default_factory=dict)
    """Job id → the task holding that claim still refreshes its liveness."""
    watchers: Mapping[int, Watcher] = field(default_factory=dict)
    """Job id → its watcher's traces outside the store; absent where the backend leaves none."""
    stops: Mapping[int, Stop] = field(default_factory=dict)
    """Job id → the cancel or preemption request standing on it."""
    silent_since: Mapping[AttemptKey, float] = field(default_factory=dict)
    """Claimed attempt → when its dispatch task was first seen not alive (the last plan's memory)."""


@dataclass(frozen=True)
class Resend:
    """Send the job's dispatch again (and restart its resend clock)."""

    job: Job
    waited: float
    """Seconds since it was placed."""


@dataclass(frozen=True)
class MarkLost:
    """Stop what is left of the job, mark it NODE_FAIL (NodeLost) and, with ``requeue``, start a
    new attempt in the same step."""

    job: Job
    why: str
    requeue: bool
    at: datetime
    """Its end time."""


@dataclass(frozen=True)
class SettleLeftEnd:
    """Record the end the job's dead watcher left; ``otherwise`` when it left none."""

    job: Job
    otherwise: MarkLost | None


@dataclass(frozen=True)
class Requeue:
    """A :class:`Settle`'s next step: a new attempt, unless a cancel is requested."""

    reason: str


@dataclass(frozen=True)
class Preempted:
    """A :class:`Settle`'s next step for a PREEMPTED attempt: requeued when ``requeue`` and not
    ``cancelled``, else CANCELLED."""

    requeue: bool
    cancelled: bool


@dataclass(frozen=True)
class Settle:
    """Move the job's attempt to the state its backend reports, with the report's facts."""

    job: Job
    state: JobState
    reason: str
    exit_code: int | None
    nodes: tuple[str, ...]
    signal: int | None = None
    started: datetime | None = None
    """Set when the attempt starts running."""
    ended: datetime | None = None
    """Set when the attempt ended (or was preempted)."""
    again: bool = False
    """The backend requeued a running attempt itself (RUNNING → SCHEDULED): the run that ended is
    kept (sacct -D's REQUEUED row) and the same attempt starts again."""
    ref: str | None = None
    """The backend reference to record first (the store lost it)."""
    then: Requeue | Preempted | None = None


@dataclass(frozen=True)
class Update:
    """Record what the store lacks of a job whose state is unchanged, while it stays placed."""

    job: Job
    ref: str | None = None
    """The backend reference (SCHEDULED or RUNNING)."""
    reason: str | None = None
    """The backend's pending reason (SCHEDULED only)."""


Action = Resend | MarkLost | SettleLeftEnd | Settle | Update


@dataclass(frozen=True)
class Plan:
    actions: tuple[Action, ...]
    silent_since: dict[AttemptKey, float]
    """The memory of silent dispatch tasks the next pass starts from."""


def reconcile(seen: Seen, limits: Limits = Limits()) -> Plan:
    """The actions for one backend's jobs, in the jobs' order (the rules are this module's docstring)."""
    silent = dict(seen.silent_since)
    actions: list[Action] = []
    for job in seen.jobs:
        if job.state.terminal:
            continue
        if seen.statuses is None:
            action = _by_heartbeat(job, seen, limits)
        elif (st := seen.statuses.get(job.id)) is None:
            action = _unreported(job, seen, limits, silent)
        else:
            action = _reported(job, st, seen)
        if action is not None:
            actions.append(action)
    return Plan(tuple(actions), silent)


def _placed_for(job: Job, now: float) -> float:
    """Seconds since the job was placed (0 without a placement time)."""
    return now - job.scheduled_time.timestamp() if job.scheduled_time else 0.0


def _lost(job: Job, why: str, now: float) -> MarkLost:
    return MarkLost(job, why, job.spec.requeue, datetime.fromtimestamp(now, timezone.utc))


def _by_heartbeat(job: Job, seen: Seen, limits: Limits) -> Action | None:
    waited = _placed_for(job, seen.now)
    if not (job.state is JobState.RUNNING or seen.claims.get(job.id, False)):
        return Resend(job, waited) if waited > limits.resend_after else None
    if seen.heartbeats.get(job.id, False):
        return None
    lost = None
    if job.state is JobState.RUNNING:
        lost = _lost(job, "its supervisor stopped reporting", seen.now)
    elif waited > limits.lost_after:
        lost = _lost(job, "dispatched but never started", seen.now)
    watcher = seen.watchers.get(job.id)
    if watcher is None:
        return lost
    return SettleLeftEnd(job, lost) if watcher is Watcher.DEAD else None


def _unreported(job: Job, seen: Seen, limits: Limits, silent: dict[AttemptKey, float]) -> Action | None:
    waited = _placed_for(job, seen.now)
    claimed = seen.claims.get(job.id, False)
    if job.state is JobState.RUNNING or (job.backend_ref and waited > limits.lost_after):
        return _lost(job, f"{seen.kind} no longer knows it", seen.now)
    if claimed and _dispatcher_gone(job, seen, limits, silent):
        # the backend holds nothing under this attempt's tag or name: the dispatch died between
        # its claim and its submit, nobody will resend
        return _lost(job, f"its dispatch task died, {seen.kind} never got it", seen.now)
    if not claimed and waited > limits.resend_after:
        return Resend(job, waited)
    return None


def _dispatcher_gone(job: Job, seen: Seen, limits: Limits, silent: dict[AttemptKey, float]) -> bool:
    key = (job.id, job.attempts)
    if seen.dispatchers.get(job.id, False):
        silent.pop(key, None)
        return False
    return seen.now - silent.setdefault(key, seen.now) > limits.dispatcher_silent


def _reported(job: Job, st: BackendStatus, seen: Seen) -> Settle | Update | None:
    ref = st.ref if st.ref and not job.backend_ref else None
    # Waiting inside the backend (Slurm PENDING, or requeued there by the backend itself) is
    # SCHEDULED for crossdock: the backend owns that attempt and will start it again.
    state = JobState.SCHEDULED if st.state is JobState.PENDING else st.state
    stop = seen.stops.get(job.id)
    cancel = bool(stop and stop.cancel)
    state, reason = stopped_outcome(state, st.reason, cancel=cancel, preempt=bool(stop and stop.preempt))
    if state is job.state:
        pending = st.reason if st.reason and job.state is JobState.SCHEDULED and st.reason != job.reason else None
        return Update(job, ref, pending) if ref or pending else None
    at = datetime.fromtimestamp(seen.now, timezone.utc)
    then: Requeue | Preempted | None = None
    if state is JobState.PREEMPTED:
        then = Preempted(job.spec.requeue, cancel)
    elif state is JobState.NODE_FAIL and job.spec.requeue:
        # The backend lost this attempt's node (a Slurm node that failed to resume, a launch
        # slurmctld lost): a new attempt, as for a job whose watcher vanished; a cancel wins.
        then = Requeue(reason)
    return Settle(job, state, reason, st.exit_code, tuple(st.nodes) or tuple(job.nodes), signal=st.signal,
                  started=at if state is JobState.RUNNING else None,
                  ended=at if state.terminal or state is JobState.PREEMPTED else None,
                  again=job.state is JobState.RUNNING and state is JobState.SCHEDULED, ref=ref, then=then)
