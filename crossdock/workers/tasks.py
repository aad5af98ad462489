"""Celery tasks: dispatch one job (or one group of array tasks), cancel and preempt. Each is idempotent.

A dispatch claims each (job id, attempt) before it submits; a second task for the same attempt
(a resend, a duplicate) sees the claim and does nothing. For Slurm and Kubernetes, the same task
delivered again after its worker died (same Celery task id) recognises its own claims and submits
again, which the backend answers with what it already started (deterministic tags and names).
"""

from __future__ import annotations

import logging
import socket
import time
from concurrent.futures import ThreadPoolExecutor
from functools import lru_cache

from crossdock.backends.base import BackendUnavailable, SubmitFailed, SupportsArrays
from crossdock.queue.errors import NoSuchJob
from crossdock.queue.states import JobState, Reason
from crossdock.runtime import Runtime
from crossdock.workers.app import app
from crossdock.workers.backends import backend

log = logging.getLogger(__name__)

REOWNING_BACKENDS = frozenset({"slurm", "k8s"})
"""Backends whose submit finds the object an earlier delivery started (tag, name)."""
BATCH_PARALLELISM = 4
"""Submissions in flight at once in one batch dispatch (sbatch or API calls)."""


@lru_cache(maxsize=1)
def runtime() -> Runtime:
    return Runtime.from_env()


def _claim(store, ids: list[int], attempt: int, worker: str, reown: bool = True) -> tuple[list[int], bool]:
    """The ids whose dispatch of ``attempt`` this task owns: claimed now, or (``reown``) by this
    very task (same Celery id) before its worker died; and whether every one was claimed just now.
    Only backends that find what they already started may re-own (Slurm by tag, Kubernetes by
    name); a local job's supervisor may already run. Three round trips for any number of jobs."""
    keys = [store.k.dispatch_claim(i, attempt) for i in ids]
    with store.r.pipeline(transaction=False) as pipe:
        for key in keys:
            pipe.set(key, worker, nx=True, ex=7 * 86400)
        got = pipe.execute()
    with store.r.pipeline(transaction=False) as pipe:
        for key in keys:
            pipe.get(key)
        holders = pipe.execute()
    mine = [i for i, new, holder in zip(ids, got, holders) if new or (reown and holder == worker)]
    with store.r.pipeline(transaction=False) as pipe:
        for i in mine:
            store.update_if(i, (JobState.SCHEDULED,), {"dispatched": str(time.time())}, pipe=pipe)
        pipe.execute()
    return mine, all(got)


def _release(store, ids: list[int], attempt: int) -> None:
    """Free the claims so a retry may submit; the backend's own idempotency covers a submission
    that did reach it before the error."""
    with store.r.pipeline(transaction=False) as pipe:
        for i in ids:
            pipe.delete(store.k.dispatch_claim(i, attempt))
            store.update_if(i, (JobState.SCHEDULED,), {"reason": Reason.DISPATCH_RETRY, "dispatched": ""}, pipe=pipe)
        pipe.execute()


def _fail(store, ids: list[int], attempt: int, reason: str) -> None:
    for i in ids:
        store.transition(i, JobState.FAILED, attempt=attempt, reason=reason, actor="dispatch")


@app.task(name="crossdock.dispatch", bind=True, max_retries=None)
def dispatch(self, job_id: int, attempt: int) -> str:
    """Start attempt ``attempt`` of a SCHEDULED job on its backend, exactly once."""
    rt = runtime()
    store = rt.store
    try:
        job = store.get(job_id)
    except NoSuchJob:
        return "missing"
    if job.state is not JobState.SCHEDULED or job.attempts != attempt:
        return f"stale: {job.state} attempt {job.attempts}"
    worker = f"{socket.gethostname()}:{self.request.id}"
    if not _claim(store, [job_id], attempt, worker, reown=job.backend in REOWNING_BACKENDS)[0]:
        return "duplicate"
    try:
        ref = backend(job.backend or "local", rt).submit(job)
    except BackendUnavailable as exc:
        if not exc.retryable:
            _fail(store, [job_id], attempt, f"BackendUnavailable: {exc}")
            return "failed"
        _release(store, [job_id], attempt)
        raise self.retry(exc=exc, countdown=min(2 ** min(self.request.retries, 5), 30))
    except SubmitFailed as exc:
        _fail(store, [job_id], attempt, f"SubmitFailed: {exc}")
        return "failed"
    store.update_if(job_id, (JobState.SCHEDULED, JobState.RUNNING), {"backend_ref": ref})
    return ref


def _array_tasks(store, ids: list[int]) -> list:
    """Tasks of one array: the first SCHEDULED one read whole, the others as copies of it with
    their own id, task id, state and attempt (one group is one submission of one spec: a Slurm
    array has one script). Avoids parsing the same spec once per task (a 1,000-task array)."""
    fields = ("state", "attempts", "array_job_id", "array_task_id")
    with store.r.pipeline(transaction=False) as pipe:
        for i in ids:
            pipe.hmget(store.k.job(i), *fields)
        rows = pipe.execute()
    found = [(i, row) for i, row in zip(ids, rows) if row[0]]
    lead_id = next((i for i, row in found if row[0] == JobState.SCHEDULED.value), None)
    if lead_id is None:
        return []
    lead = store.get(lead_id)
    return [lead.model_copy(update={"id": i, "state": JobState(st), "attempts": int(att or 0),
                                    "array_job_id": int(arr) if arr else None,
                                    "array_task_id": int(task) if task else None})
            for i, (st, att, arr, task) in found]


@app.task(name="crossdock.dispatch_array", bind=True, max_retries=None)
def dispatch_array(self, array_job_id: int, attempt: int, job_ids: list[int], throttle: int | None = None) -> str:
    """Start attempt ``attempt`` of these SCHEDULED tasks of one array as ONE backend submission
    (a Slurm array with ``%throttle``, an Indexed Job), exactly once.

    Tasks that moved on (cancelled, another attempt) or whose attempt another task claimed (a
    resend dispatched them one by one) are left out; the group's tag comes from the tasks it
    submits, so a redelivery, which claims the same tasks, finds the same submission."""
    rt = runtime()
    store = rt.store
    jobs = [j for j in _array_tasks(store, job_ids) if j.state is JobState.SCHEDULED and j.attempts == attempt
            and j.array_job_id == array_job_id]
    if not jobs:
        return "stale"
    worker = f"{socket.gethostname()}:{self.request.id}"
    claimed, all_new = _claim(store, [j.id for j in jobs], attempt, worker)
    mine = set(claimed)
    jobs = [j for j in jobs if j.id in mine]
    if not jobs:
        return "duplicate"
    ids = [j.id for j in jobs]
    # First delivery, first try, every claim taken just now: nothing can carry this group's tag.
    fresh = all_new and not self.request.retries and not (self.request.delivery_info or {}).get("redelivered")
    target = backend(jobs[0].backend or "local", rt)
    try:
        if isinstance(target, SupportsArrays) and len(jobs) > 1:
            refs = target.submit_array(jobs, throttle, fresh=fresh)
        else:
            refs = {j.id: target.submit(j) for j in jobs}
    except BackendUnavailable as exc:
        if not exc.retryable:
            _fail(store, ids, attempt, f"BackendUnavailable: {exc}")
            return "failed"
        _release(store, ids, attempt)
        raise self.retry(exc=exc, countdown=min(2 ** min(self.request.retries, 5), 30))
    except SubmitFailed as exc:
        _fail(store, ids, attempt, f"SubmitFailed: {exc}")
        return "failed"
    with store.r.pipeline(transaction=False) as pipe:
        for job_id, ref in refs.items():
            store.update_if(job_id, (JobState.SCHEDULED, JobState.RUNNING), {"backend_ref": ref}, pipe=pipe)
        pipe.execute()
    return f"{len(refs)} tasks: {next(iter(refs.values()))}…"


@app.task(name="crossdock.dispatch_batch", bind=True, max_retries=None)
def dispatch_batch(self, pairs: list[list[int]]) -> str:
    """Start separate SCHEDULED jobs of one pool (``[job id, attempt]`` pairs), each exactly once,
    several at a time: one task, one read and one claim round trip for the batch.

    A job that cannot be submitted now (backend unavailable) has its claim freed, so reconcile
    sends it again on its own; one the backend refuses fails alone."""
    rt = runtime()
    store = rt.store
    wanted = {job_id: attempt for job_id, attempt in pairs}
    jobs = [j for j in store.get_many(wanted) if j.state is JobState.SCHEDULED and j.attempts == wanted[j.id]]
    worker = f"{socket.gethostname()}:{self.request.id}"
    mine: list = []
    fresh = not self.request.retries and not (self.request.delivery_info or {}).get("redelivered")
    for attempt in sorted({j.attempts for j in jobs}):
        same = [j for j in jobs if j.attempts == attempt]
        claimed, all_new = _claim(store, [j.id for j in same], attempt, worker)
        fresh = fresh and all_new
        mine += [j for j in same if j.id in set(claimed)]
    if not mine:
        return "duplicate"
    target = backend(mine[0].backend or "local", rt)

    def submit(job) -> tuple[str | None, Exception | None]:
        try:
            if fresh and target.kind == "slurm":  # the look for its tag lists every job: skip it
                return target.submit(job, fresh=True), None
            return target.submit(job), None
        except (BackendUnavailable, SubmitFailed) as exc:
            return None, exc

    with ThreadPoolExecutor(max_workers=BATCH_PARALLELISM) as pool:
        outcomes = list(pool.map(submit, mine))
    with store.r.pipeline(transaction=False) as pipe:
        for job, (ref, _exc) in zip(mine, outcomes):
            if ref is not None:
                store.update_if(job.id, (JobState.SCHEDULED, JobState.RUNNING), {"backend_ref": ref}, pipe=pipe)
        pipe.execute()
    for job, (_ref, exc) in zip(mine, outcomes):
        if isinstance(exc, BackendUnavailable) and exc.retryable:
            _release(store, [job.id], job.attempts)
        elif exc is not None:
            kind = "BackendUnavailable" if isinstance(exc, BackendUnavailable) else "SubmitFailed"
            _fail(store, [job.id], job.attempts, f"{kind}: {exc}")
    failed = sum(1 for _ref, exc in outcomes if exc is not None)
    return f"{len(mine) - failed} submitted, {failed} not"


@app.task(name="crossdock.cancel")
def cancel(job_id: int) -> str:
    rt = runtime()
    job = rt.store.get(job_id)
    if job.state.terminal or not job.backend:
        return str(job.state)
    backend(job.backend, rt).cancel(job)
    return "requested"


@app.task(name="crossdock.preempt")
def preempt(job_id: int, grace_seconds: int) -> str:
    rt = runtime()
    job = rt.store.get(job_id)
    if job.state.terminal or not job.backend:
        return str(job.state)
    backend(job.backend, rt).preempt(job, grace_seconds)
    return "requested"
