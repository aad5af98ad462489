"""What the CLI and the Python API share: who the caller is, what they may do to which job
(the one ownership check), submit, cancel, hold, requeue and results."""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Iterable, Sequence

from crossdock import signing
from crossdock.backends.local import gpus
from crossdock.backends.local.backend import local_nodes
from crossdock.queue.admission import admit
from crossdock.queue.bounds import JobCounts
from crossdock.queue.durations import duration
from crossdock.queue.errors import InvalidArgument, InvalidJob, PermissionDenied, StoreUnavailable, shown
from crossdock.queue.models import Job, JobSpec
from crossdock.queue.snapshot import Node
from crossdock.queue.states import JobState, Reason
from crossdock.runtime import Runtime
from crossdock.settings import is_admin, user_name

if TYPE_CHECKING:
    from crossdock.queue.trial import Trial


@dataclass(frozen=True)
class Caller:
    """Who acts: ``name`` as the jobs record it; ``admin`` may act on anyone's jobs."""

    name: str
    admin: bool


def caller(rt: Runtime, declared: str | None = None, uid: int | None = None) -> Caller:
    """The caller from the OS, never from what it declares: ``uid`` is this process's real uid or,
    through the service's socket, the peer's (SO_PEERCRED). ``declared`` (the API's ``user=``)
    must be that user unless the caller is an admin (root or ``admins:``)."""
    uid = os.getuid() if uid is None else uid
    real = user_name(uid)
    admin = is_admin(rt.config.admins, uid)
    if declared is not None and declared != real and not admin:
        raise PermissionDenied(f"user={declared!r}: you are {real!r}; only root or a user in the config's"
                               " admins may act as another user")
    return Caller(declared or real, admin)


def authorize(rt: Runtime, who: Caller, jobs: Iterable[Job], action: str) -> None:
    """Allow ``action`` on ``jobs`` to their owner or an admin; else record a ``refused`` event on
    the first other user's job and raise :class:`PermissionDenied` naming it and its owner."""
    for job in jobs:
        if who.admin or job.spec.user == who.name:
            continue
        rt.store.record_refusal(job.id, who.name, action)
        raise PermissionDenied(f"{action} job {job.display_id}: it belongs to {job.spec.user or 'nobody'!r}"
                               f" and you are {who.name!r}; only its owner or an admin may")


def acting_users(who: Caller, users: set[str] | None) -> set[str] | None:
    """Whose jobs a filtered action (``cancel -t PD``, ``-n NAME``) touches: the users named, else
    the caller's own jobs, or everyone's for an admin (None). Naming another user's jobs is allowed
    here; acting on them is refused by :func:`authorize` unless the caller is an admin."""
    if users:
        return users
    return None if who.admin else {who.name}


def load_inventory(rt: Runtime, store_optional: bool = False) -> list[Node]:
    """Nodes as the scheduler last saw them; before it ran, the local pools from the config.
    ``store_optional``: a store that does not answer counts as "not yet run" (``--dry-run``)."""
    try:
        nodes = rt.store.inventory()
    except StoreUnavailable:
        if not store_optional:
            raise
        nodes = None
    return list(local_nodes(rt.config, gpus.discovered())) if nodes is None else nodes


def check(rt: Runtime, specs: Iterable[JobSpec], nodes: Sequence[Node] | None = None,
          who: Caller | None = None) -> list[Job]:
    """Admit every spec, storing nothing: the jobs ``submit`` would store, or InvalidJob. A spec
    naming no user is the caller's; one naming another user needs an admin."""
    who = who or caller(rt)
    now = datetime.now(timezone.utc)
    nodes = load_inventory(rt) if nodes is None else nodes
    jobs: list[Job] = []
    for group, spec in enumerate(specs):
        if spec.service is not None:  # never preempted, never a victim: only the service controller makes one
            raise InvalidJob("service: a job cannot claim to be a service replica; deploy a service with"
                             " `crossdock serve` or client.serve(...), whose controller creates its replicas")
        if not spec.user:
            spec = spec.model_copy(update={"user": who.name})
        elif spec.user != who.name and not who.admin:
            raise PermissionDenied(f"user: {spec.user!r} is not you ({who.name!r}); only an admin submits for others")
        for job in admit(spec, rt.config, nodes, now):
            if job.array_job_id is not None:
                job = job.model_copy(update={"array_job_id": -1 - group})
            jobs.append(job)
    return jobs


def test_only(rt: Runtime, job: Job, nodes: Sequence[Node]) -> "Trial":
    """Where and when the scheduler would start ``job`` (checked by :func:`check`), among the jobs
    the store holds now; an unreachable store counts as an empty queue. Stores nothing. (The
    scheduler is imported here, not at the top: a plain submit never loads it.)"""
    from crossdock.queue.trial import trial

    try:
        pending = rt.store.get_many(rt.store.pending_ids())
        active = rt.store.get_many(rt.store.active_ids())
    except StoreUnavailable:
        pending, active = [], []
    return trial(job, pending, active, nodes, rt.config, datetime.now(timezone.utc))


def why(rt: Runtime, job_id: int, who: Caller) -> dict[str, Any]:
    """``crossdock why``: why the pending job ``job_id`` pends, when it would start as it is, and the
    one-edit changes that start it sooner (:mod:`crossdock.queue.whatif`), for its owner or an admin
    (the options show its request). A job that is not pending says its state."""
    from crossdock.queue.whatif import Why, why as explain

    job = rt.store.get(job_id)
    authorize(rt, who, [job], "why")
    if job.state is not JobState.PENDING:
        reason = "" if job.reason == Reason.NONE else job.reason
        return {**Why(job.id, reason, None).as_dict(), "state": job.state.value}
    pending = rt.store.get_many(rt.store.pending_ids())
    active = rt.store.get_many(rt.store.active_ids())
    report = explain(job, pending, active, load_inventory(rt), rt.config, datetime.now(timezone.utc)).as_dict()
    return {**report, "state": job.state.value}


TOKEN_MAX_CHARS = 256
"""An idempotency token's longest form (a UUID is 36)."""


def submit(rt: Runtime, specs: Iterable[JobSpec], token: str | None = None,
           nodes: Sequence[Node] | None = None, who: Caller | None = None) -> list[Job]:
    """Validate every spec, then store all their jobs in one atomic step (nothing stored on error).
    ``token`` (the owner's own: another user's same token is another submission) makes a retry
    return the jobs first stored; no owner may go over ``limits.max_submit_jobs``."""
    who = who or caller(rt)
    if token is not None and not (isinstance(token, str) and 0 < len(token) <= TOKEN_MAX_CHARS):
        raise InvalidArgument(f"idempotency token: {shown(token, 80)} is not a string of 1 to {TOKEN_MAX_CHARS}"
                              " characters; give a UUID")
    jobs = check(rt, specs, nodes, who)
    counts = JobCounts(Counter(j.spec.user for j in jobs), rt.config.limits)
    return rt.store.submit(jobs, token=token, actor=who.name, admit=counts)


def owned(rt: Runtime, refs: Iterable[str], who: Caller, action: str) -> list[Job]:
    """The jobs ``refs`` name (``12``, ``12_3``, an array ``12``), once the caller may ``action``
    every one of them: all are checked before anything is done, so a refusal leaves none half-done."""
    ids = [job_id for ref in refs for job_id in rt.store.resolve(ref)]
    jobs = rt.store.get_many(ids)
    authorize(rt, who, jobs, action)
    return jobs


def cancel(rt: Runtime, refs: Iterable[str], send, who: Caller | None = None) -> list[tuple[str, str]]:
    """Cancel jobs (``12``, ``12_3`` or a whole array ``12``); returns (the job as shown, e.g. 12_3, outcome) pairs."""
    who = who or caller(rt)
    out = []
    for job in owned(rt, refs, who, "cancel"):
        res = rt.store.cancel(job.id, actor=who.name)
        if res.cancelled_now:
            out.append((job.display_id, "CANCELLED"))
        elif res.state.terminal:
            out.append((job.display_id, f"already {res.state.value}"))
        else:
            send("crossdock.cancel", [job.id], res.backend or "local")
            out.append((job.display_id, "cancelling"))
    return out


def hold(rt: Runtime, refs: Iterable[str], held: bool, who: Caller | None = None) -> list[tuple[Job, bool]]:
    """Hold (or release) pending jobs; (job, whether it changed) pairs."""
    who = who or caller(rt)
    return [(job, rt.store.hold(job.id, held, actor=who.name))
            for job in owned(rt, refs, who, "hold" if held else "release")]


UPDATABLE = ("time_limit_seconds", "nice")
"""The spec fields ``update`` changes on a pending job (scontrol update's TimeLimit and Nice)."""


def update(rt: Runtime, refs: Iterable[str], changes: dict[str, Any], who: Caller | None = None) -> list[tuple[Job, bool]]:
    """Change ``changes`` (fields of :data:`UPDATABLE`; a time limit of None is unlimited) of
    pending jobs, as scontrol update does: (job, whether it changed) pairs. As in Slurm, only an
    admin raises a time limit or sets a negative nice; every problem is named before anything
    changes."""
    who = who or caller(rt)
    unknown = sorted(set(changes) - set(UPDATABLE))
    if unknown:
        raise InvalidArgument(f"update: cannot change {', '.join(unknown)}; only {', '.join(UPDATABLE)}")
    jobs = owned(rt, refs, who, "update")
    if not who.admin:
        problems = []
        if changes.get("nice", 0) < 0:
            problems.append(f"Nice={changes['nice']}: only an admin sets a negative nice")
        if "time_limit_seconds" in changes:
            new = changes["time_limit_seconds"]
            raised = [j.display_id for j in jobs if new is None and j.spec.time_limit_seconds is not None
                      or new is not None and j.spec.time_limit_seconds is not None and new > j.spec.time_limit_seconds]
            if raised:
                problems.append(f"TimeLimit: only an admin raises a job's time limit (job {raised[0]}); lower it, or"
                                " ask an admin")
        if problems:
            raise PermissionDenied("; ".join(problems))
    note = " ".join(f"TimeLimit={duration(v)}" if k == "time_limit_seconds" else f"Nice={v}" for k, v in changes.items())
    return [(job, rt.store.amend(job.id, changes, actor=who.name, note=note)) for job in jobs]


def requeue(rt: Runtime, refs: Iterable[str], send, who: Caller | None = None) -> list[tuple[Job, bool]]:
    """Put running or finished jobs back in the queue (a running one is preempted with no grace)."""
    who = who or caller(rt)
    out = []
    for job in owned(rt, refs, who, "requeue"):
        if job.state.active:
            rt.store.request_preempt(job.id, 0)
            send("crossdock.preempt", [job.id, 0, job.attempts], job.backend or "local")
            out.append((job, True))
        else:
            out.append((job, rt.store.requeue(job.id, actor=who.name, reason="Requeued")))
    return out


def result(rt: Runtime, job: Job, who: Caller) -> bytes | None:
    """A Python job's outcome as its runner wrote it, once its seal is checked (None: no result)."""
    authorize(rt, who, [job], "read the result of")
    blob = rt.store.result(job.id)
    if blob is None:
        return None
    key = signing.user_key(rt.settings.state_dir, job.spec.user)
    return signing.unseal(key, f"result:{job.id}", blob, f"the result of job {job.display_id}")


def seal(rt: Runtime, who: Caller, context: str, data: bytes) -> bytes:
    """``data`` sealed under ``who``'s key for ``context`` (a ``map``'s parts in the store)."""
    return signing.seal(signing.user_key(rt.settings.state_dir, who.name), context, data)


def sign_payload(rt: Runtime, who: Caller, payload: str) -> str:
    """The seal a runner checks before it unpickles ``payload`` for one of ``who``'s jobs."""
    return signing.sign_text(signing.user_key(rt.settings.state_dir, who.name), "payload", payload)


def autoscaling(rt: Runtime) -> dict:
    """The autoscaler's last pass with each fleet's and pool's last change (``crossdock autoscale``):
    ``{"at", "fleets": [...], "pools": [...]}``, each row with ``last_change`` (its event, or None);
    ``at`` is None before any pass."""
    passed = rt.store.autoscale.decisions() or {"at": None, "fleets": [], "pools": []}
    changes = rt.store.autoscale.last_changes()
    for row in passed["fleets"]:
        row["last_change"] = changes.get(f"fleet:{row['queue']}")
    for row in passed["pools"]:
        row["last_change"] = changes.get(f"pool:{row['pool']}")
    return passed


EVENTS_LIMIT = 1000
"""The most events one read returns (a follow reads again from the last one)."""


def events(rt: Runtime, job_ids: Sequence[int] = (), since: float | None = None, after: str | None = None,
           count: int = EVENTS_LIMIT, block_ms: int | None = None) -> dict[str, Any]:
    """Who did what, when and why: the global stream (every job's changes, refusals, the
    autoscaler's changes), or one job's own stream when ``job_ids`` names one job, or the global
    stream's events of those jobs when it names several (an array).

    ``{"events": [...], "last": ID|None}``: oldest first, each event with its stream ``id``; ``last``
    is the cursor to read on from (``after=last``; with ``block_ms``, waiting for the next one),
    past events a filter left out. ``since`` (epoch seconds) starts from a time; neither: the last
    ``count`` (see ``JobEvents.read_events``)."""
    count = max(1, min(count, EVENTS_LIMIT))
    single = job_ids[0] if len(job_ids) == 1 else None
    rows = rt.store.read_events(single, since=since, after=after, count=count, block_ms=block_ms)
    last = rows[-1]["id"] if rows else after
    if single is not None:
        rows = [{"job": str(single), **row} for row in rows]
    elif job_ids:
        wanted = {str(i) for i in job_ids}
        rows = [row for row in rows if row.get("job") in wanted]
    return {"events": rows, "last": last}


def history(rt: Runtime, since: float | None = None, until: float | None = None,
            limit: int | None = None) -> list[dict[str, Any]]:
    """Records of jobs that expired from the hot keys (``scheduler.min_job_age_seconds`` after
    their end), by end time: who, what, where, how it ended (``crossdock history`` and the API)."""
    return rt.store.history(since=since, until=until, limit=limit)


def deschedule(rt: Runtime, dry_run: bool = False) -> dict:
    """``crossdock deschedule``: the leader's last plan (``at`` None before any), or with ``dry_run``
    a plan made now from the store and the backends, which moves and writes nothing:
    ``{"at", "dry_run", "migrations": [...], "skipped": [...], "unblocked": [...]}``."""
    if not dry_run:
        return rt.store.deschedule.last_plan() or {"at": None, "migrations": [], "skipped": [], "unblocked": []}
    import time as _time

    from crossdock.queue.deschedule.migration import plan_report
    from crossdock.workers.descheduler import Descheduler
    from crossdock.workers.leader import Scheduler

    scheduler = Scheduler(rt, send=lambda *args, **kw: None, holder="deschedule-dry-run")
    planner = Descheduler(rt, scheduler.holder, lambda pending, active: scheduler.snapshot(pending, active, read_only=True))
    result, _jobs = planner.plan_once()
    return {"at": _time.time(), "dry_run": True, **plan_report(result)}
