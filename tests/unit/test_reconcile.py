"""The follower's rules (``crossdock.queue.reconcile``) on plain data with a driven clock: resend,
lost, settle with its next step, the reference and reason the store lacks, silent dispatch tasks
remembered between passes; and properties over random passes (one action per job at most, none
for a terminal job, nothing decided without its cause)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime, timezone

import pytest
from hypothesis import given, settings
from hypothesis import strategies as hs

from crossdock.queue.models import Job, JobSpec
from crossdock.queue.ports import BackendStatus
from crossdock.queue.reconcile import (DISPATCHER_SILENT_SECONDS, LOST_AFTER_SECONDS, RESEND_AFTER_SECONDS, Limits,
                                       MarkLost, Preempted, Requeue, Resend, Seen, Settle, SettleLeftEnd, Update,
                                       Watcher, reconcile)
from crossdock.queue.states import TERMINAL, JobState

NOW = 1_800_000_000.0
AT = datetime.fromtimestamp(NOW, timezone.utc)


@dataclass(frozen=True)
class Stop:
    cancel: bool = False
    preempt: bool = False


def job(id: int = 1, state: JobState = JobState.SCHEDULED, age: float = 0.0, ref: str | None = None,
        requeue: bool = True, reason: str = "None", nodes: tuple[str, ...] = (), attempts: int = 1) -> Job:
    """A placed job ``age`` seconds after its placement at NOW."""
    return BASE[requeue].model_copy(update={
        "id": id, "state": state, "reason": reason, "attempts": attempts, "backend_ref": ref, "nodes": list(nodes),
        "scheduled_time": datetime.fromtimestamp(NOW - age, timezone.utc)})


BASE = {requeue: Job(id=1, spec=JobSpec(command=["true"], requeue=requeue), queue="q", backend="slurm")
        for requeue in (True, False)}


def by_heartbeat(*jobs: Job, now: float = NOW, **seen) -> list:
    return list(reconcile(Seen("local", jobs, now, **seen)).actions)


def by_status(*jobs: Job, statuses=None, now: float = NOW, **seen) -> list:
    return list(reconcile(Seen("slurm", jobs, now, statuses=statuses or {}, **seen)).actions)


def lost(j: Job, why: str) -> MarkLost:
    return MarkLost(j, why, j.spec.requeue, AT)


# --- followed by heartbeat -----------------------------------------------------------------------

SCHEDULED_YOUNG = job(age=RESEND_AFTER_SECONDS - 1)
SCHEDULED_WAITED = job(age=RESEND_AFTER_SECONDS + 1)
SCHEDULED_OLD = job(age=LOST_AFTER_SECONDS + 1)
RUNNING = job(state=JobState.RUNNING, age=LOST_AFTER_SECONDS + 1)
RUNNING_NO_REQUEUE = job(state=JobState.RUNNING, requeue=False)

HEARTBEAT_RULES = [
    ("unclaimed-within-resend-window", SCHEDULED_YOUNG, {}, []),
    ("unclaimed-past-resend-window", SCHEDULED_WAITED, {}, [Resend(SCHEDULED_WAITED, RESEND_AFTER_SECONDS + 1)]),
    ("unclaimed-at-exactly-the-window", job(age=RESEND_AFTER_SECONDS), {}, []),
    ("claimed-and-beating", SCHEDULED_OLD, {"claims": {1: True}, "heartbeats": {1: True}}, []),
    ("running-and-beating", RUNNING, {"heartbeats": {1: True}}, []),
    ("running-silent", RUNNING, {}, [lost(RUNNING, "its supervisor stopped reporting")]),
    ("running-silent-no-requeue", RUNNING_NO_REQUEUE, {},
     [MarkLost(RUNNING_NO_REQUEUE, "its supervisor stopped reporting", False, AT)]),
    ("claimed-silent-not-started-yet", SCHEDULED_WAITED, {"claims": {1: True}}, []),
    ("claimed-silent-never-started", SCHEDULED_OLD, {"claims": {1: True}},
     [lost(SCHEDULED_OLD, "dispatched but never started")]),
    ("watcher-alive-only-cut-off", RUNNING, {"watchers": {1: Watcher.ALIVE}}, []),
    ("watcher-cannot-be-asked", RUNNING, {"watchers": {1: Watcher.UNKNOWN}}, []),
    ("watcher-dead-running", RUNNING, {"watchers": {1: Watcher.DEAD}},
     [SettleLeftEnd(RUNNING, lost(RUNNING, "its supervisor stopped reporting"))]),
    ("watcher-dead-young", SCHEDULED_WAITED, {"claims": {1: True}, "watchers": {1: Watcher.DEAD}},
     [SettleLeftEnd(SCHEDULED_WAITED, None)]),
    ("watcher-dead-never-started", SCHEDULED_OLD, {"claims": {1: True}, "watchers": {1: Watcher.DEAD}},
     [SettleLeftEnd(SCHEDULED_OLD, lost(SCHEDULED_OLD, "dispatched but never started"))]),
]


@pytest.mark.parametrize(("the_job", "seen", "expected"), [r[1:] for r in HEARTBEAT_RULES],
                         ids=[r[0] for r in HEARTBEAT_RULES])
def test_heartbeat_rules(the_job, seen, expected):
    assert by_heartbeat(the_job, **seen) == expected


def test_a_job_placed_without_a_time_counts_as_placed_now():
    bare = job().model_copy(update={"scheduled_time": None})
    assert by_heartbeat(bare) == [] and by_heartbeat(bare, claims={1: True}) == []


def test_the_limits_decide_the_windows():
    quick = Limits(resend_after=1, lost_after=2, dispatcher_silent=0)
    j = job(age=3)
    assert reconcile(Seen("local", [j], NOW), quick).actions == (Resend(j, 3),)
    assert reconcile(Seen("local", [j], NOW, claims={1: True}), quick).actions == (lost(j, "dispatched but never started"),)


# --- followed by status: jobs the backend does not report -----------------------------------------

UNREPORTED_RULES = [
    ("running", RUNNING, {}, [lost(RUNNING, "slurm no longer knows it")]),
    ("with-a-reference-past-the-lost-window", job(age=LOST_AFTER_SECONDS + 1, ref="77"), {},
     [lost(job(age=LOST_AFTER_SECONDS + 1, ref="77"), "slurm no longer knows it")]),
    ("with-a-reference-young", job(age=RESEND_AFTER_SECONDS + 1, ref="77"), {"claims": {1: True}, "dispatchers": {1: True}},
     []),
    ("unclaimed-young", SCHEDULED_YOUNG, {}, []),
    ("unclaimed-past-resend-window", SCHEDULED_WAITED, {}, [Resend(SCHEDULED_WAITED, RESEND_AFTER_SECONDS + 1)]),
    ("claimed-by-a-live-task", SCHEDULED_OLD, {"claims": {1: True}, "dispatchers": {1: True}}, []),
    ("claimed-by-a-task-first-seen-silent", SCHEDULED_OLD, {"claims": {1: True}}, []),
]


@pytest.mark.parametrize(("the_job", "seen", "expected"), [r[1:] for r in UNREPORTED_RULES],
                         ids=[r[0] for r in UNREPORTED_RULES])
def test_rules_for_a_job_the_backend_does_not_report(the_job, seen, expected):
    assert by_status(the_job, **seen) == expected


def test_a_claimed_dispatch_is_lost_once_its_task_was_seen_silent_long_enough():
    """Driven clock: the first silent pass remembers when; lost only strictly past the limit; a
    task seen alive again is forgotten, and a later silence counts from then."""
    j = job(age=RESEND_AFTER_SECONDS + 1)
    claimed = {"claims": {1: True}}
    first = reconcile(Seen("slurm", [j], NOW, statuses={}, **claimed))
    assert first.actions == () and first.silent_since == {(1, 1): NOW}
    at_limit = reconcile(Seen("slurm", [j], NOW + DISPATCHER_SILENT_SECONDS, statuses={},
                              silent_since=first.silent_since, **claimed))
    assert at_limit.actions == () and at_limit.silent_since == {(1, 1): NOW}
    later = NOW + DISPATCHER_SILENT_SECONDS + 1
    past = reconcile(Seen("slurm", [j], later, statuses={}, silent_since=first.silent_since, **claimed))
    assert past.actions == (MarkLost(j, "its dispatch task died, slurm never got it", True,
                                     datetime.fromtimestamp(later, timezone.utc)),)
    back = reconcile(Seen("slurm", [j], later, statuses={}, silent_since=first.silent_since,
                          dispatchers={1: True}, **claimed))
    assert back.actions == () and back.silent_since == {}
    again = reconcile(Seen("slurm", [j], later + 1, statuses={}, silent_since=back.silent_since, **claimed))
    assert again.actions == () and again.silent_since == {(1, 1): later + 1}


def test_silence_is_remembered_per_attempt_and_other_memory_is_kept():
    j = job(attempts=2, age=RESEND_AFTER_SECONDS + 1)
    plan = reconcile(Seen("slurm", [j], NOW, statuses={}, claims={1: True}, silent_since={(1, 1): NOW - 999, (5, 1): 3.0}))
    assert plan.actions == () and plan.silent_since == {(1, 1): NOW - 999, (5, 1): 3.0, (1, 2): NOW}


# --- followed by status: reported jobs -------------------------------------------------------------

def st(state: JobState, ref: str = "77", **kw) -> BackendStatus:
    return BackendStatus(ref, state, **kw)


SCHED = job(ref="77", reason="Priority")
RUN = job(state=JobState.RUNNING, ref="77", nodes=("cpu1",))
NO_REF = job()

REPORTED_RULES = [
    ("pending-inside-the-backend-stays-scheduled", SCHED, st(JobState.PENDING, reason="Priority"), {}, []),
    ("the-backends-pending-reason", SCHED, st(JobState.PENDING, reason="Resources"), {},
     [Update(SCHED, reason="Resources")]),
    ("a-reason-for-a-running-job-is-not-recorded", RUN, st(JobState.RUNNING, reason="x", nodes=("cpu1",)), {}, []),
    ("the-reference-the-store-lost", NO_REF, st(JobState.PENDING), {}, [Update(NO_REF, ref="77")]),
    ("reference-and-reason", NO_REF, st(JobState.PENDING, reason="Resources"), {},
     [Update(NO_REF, ref="77", reason="Resources")]),
    ("started", SCHED, st(JobState.RUNNING, nodes=("cpu1", "cpu2")), {},
     [Settle(SCHED, JobState.RUNNING, "", None, ("cpu1", "cpu2"), started=AT)]),
    ("started-with-the-reference-the-store-lost", NO_REF, st(JobState.RUNNING, nodes=("cpu1",)), {},
     [Settle(NO_REF, JobState.RUNNING, "", None, ("cpu1",), started=AT, ref="77")]),
    ("completed-keeps-the-jobs-nodes-when-none-reported", RUN, st(JobState.COMPLETED, exit_code=0), {},
     [Settle(RUN, JobState.COMPLETED, "", 0, ("cpu1",), ended=AT)]),
    ("failed-with-its-signal", RUN, st(JobState.FAILED, exit_code=137, signal=9), {},
     [Settle(RUN, JobState.FAILED, "", 137, ("cpu1",), signal=9, ended=AT)]),
    ("requeued-by-the-backend-itself", RUN, st(JobState.PENDING, reason="BeginTime"), {},
     [Settle(RUN, JobState.SCHEDULED, "BeginTime", None, ("cpu1",), again=True)]),
    ("preempted-in-the-backend", RUN, st(JobState.PREEMPTED, reason="Preempted"), {},
     [Settle(RUN, JobState.PREEMPTED, "Preempted", None, ("cpu1",), ended=AT, then=Preempted(True, False))]),
    ("a-requested-preemption-decides-the-end", RUN, st(JobState.COMPLETED, exit_code=0), {"stops": {1: Stop(preempt=True)}},
     [Settle(RUN, JobState.PREEMPTED, "Preempted", 0, ("cpu1",), ended=AT, then=Preempted(True, False))]),
    ("a-cancel-wins", RUN, st(JobState.PREEMPTED), {"stops": {1: Stop(cancel=True, preempt=True)}},
     [Settle(RUN, JobState.CANCELLED, "CancelledByUser", None, ("cpu1",), ended=AT)]),
    ("a-stop-request-leaves-a-running-attempt-running", RUN, st(JobState.RUNNING, nodes=("cpu1",)),
     {"stops": {1: Stop(cancel=True)}}, []),
    ("node-failure-is-a-new-attempt", RUN, st(JobState.NODE_FAIL, reason="ResumeFailed"), {},
     [Settle(RUN, JobState.NODE_FAIL, "ResumeFailed", None, ("cpu1",), ended=AT, then=Requeue("ResumeFailed"))]),
]


@pytest.mark.parametrize(("the_job", "status", "seen", "expected"), [r[1:] for r in REPORTED_RULES],
                         ids=[r[0] for r in REPORTED_RULES])
def test_rules_for_a_reported_job(the_job, status, seen, expected):
    assert by_status(the_job, statuses={1: status}, **seen) == expected


@pytest.mark.parametrize("requeue", [True, False], ids=["requeue", "no-requeue"])
def test_the_spec_decides_whether_an_ended_attempt_is_requeued(requeue):
    run = job(state=JobState.RUNNING, ref="77", requeue=requeue)
    node_fail, = by_status(run, statuses={1: st(JobState.NODE_FAIL, reason="NodeFail")})
    preempted, = by_status(run, statuses={1: st(JobState.PREEMPTED)})
    assert node_fail.then == (Requeue("NodeFail") if requeue else None)
    assert preempted.then == Preempted(requeue, False)


@pytest.mark.parametrize("state", sorted(TERMINAL), ids=str)
def test_a_terminal_job_gets_no_action(state):
    """Read just as it ended (the active index and the record are two reads): nothing to do."""
    old = job(state=state, age=LOST_AFTER_SECONDS * 10, ref="77")
    assert by_heartbeat(old, watchers={1: Watcher.DEAD}) == []
    assert by_status(old) == []
    assert by_status(old, statuses={1: st(JobState.RUNNING)}) == []


# --- properties ------------------------------------------------------------------------------------

STATES = list(JobState)
ages = hs.sampled_from([0.0, RESEND_AFTER_SECONDS, RESEND_AFTER_SECONDS + 1, LOST_AFTER_SECONDS + 1, 1e4])


@hs.composite
def passes(draw) -> Seen:
    n = draw(hs.integers(0, 8))
    jobs = [job(id=i + 1, state=draw(hs.sampled_from(STATES)), age=draw(ages), ref=draw(hs.sampled_from([None, "r"])),
                requeue=draw(hs.booleans()), reason=draw(hs.sampled_from(["None", "Priority"])),
                nodes=draw(hs.sampled_from([(), ("n1",)])))
            for i in range(n)]
    ids = [j.id for j in jobs]
    some = lambda values: draw(hs.dictionaries(hs.sampled_from(ids), values) if ids else hs.just({}))  # noqa: E731
    statuses = None
    if draw(hs.booleans()):
        statuses = some(hs.builds(BackendStatus, ref=hs.sampled_from(["", "r"]), state=hs.sampled_from(STATES),
                                  reason=hs.sampled_from(["", "Priority", "Resources"]),
                                  exit_code=hs.none() | hs.integers(0, 255), nodes=hs.sampled_from([(), ("n2",)])))
    silent = {(i, 1): draw(hs.sampled_from([NOW - 1e4, NOW - 1, NOW])) for i in draw(hs.lists(hs.sampled_from(ids)))} if ids else {}
    return Seen("slurm", jobs, NOW, statuses=statuses, heartbeats=some(hs.booleans()), claims=some(hs.booleans()),
                dispatchers=some(hs.booleans()), watchers=some(hs.sampled_from(list(Watcher))),
                stops=some(hs.builds(Stop, hs.booleans(), hs.booleans())), silent_since=silent)


@settings(max_examples=150, deadline=None)
@given(passes())
def test_each_job_gets_at_most_one_action_and_a_terminal_one_none(seen):
    plan = reconcile(seen)
    named = [a.job.id for a in plan.actions]
    assert len(named) == len(set(named))
    states = {j.id: j.state for j in seen.jobs}
    assert set(named) <= set(states)
    assert not [i for i in named if states[i].terminal]
    assert named == sorted(named)  # in the jobs' order


@settings(max_examples=150, deadline=None)
@given(passes())
def test_every_action_has_its_cause(seen):
    limits = Limits()
    for action in reconcile(seen, limits).actions:
        j = action.job
        waited = NOW - j.scheduled_time.timestamp()
        report = None if seen.statuses is None else seen.statuses.get(j.id)
        match action:
            case Resend():
                assert waited > limits.resend_after and j.state is not JobState.RUNNING
                assert not seen.claims.get(j.id, False)
            case MarkLost(requeue=requeue):
                assert report is None and requeue == j.spec.requeue
                assert j.state is JobState.RUNNING or waited > limits.lost_after or seen.claims.get(j.id)
            case SettleLeftEnd():
                assert seen.statuses is None and seen.watchers.get(j.id) is Watcher.DEAD
            case Settle():
                assert report is not None and action.state is not j.state
                assert (action.then is not None) == (action.state is JobState.PREEMPTED
                                                    or (action.state is JobState.NODE_FAIL and j.spec.requeue))
            case Update():
                assert report is not None and (action.ref or action.reason)


@settings(max_examples=150, deadline=None)
@given(passes())
def test_a_pass_is_pure(seen):
    memory = dict(seen.silent_since)
    first = reconcile(seen)
    assert seen.silent_since == memory  # the input memory is not changed
    assert reconcile(replace(seen)) == first
    remembered = set(first.silent_since) - set(memory)
    unreported = {(j.id, j.attempts) for j in seen.jobs
                  if seen.statuses is not None and j.id not in seen.statuses and seen.claims.get(j.id)}
    assert remembered <= unreported
