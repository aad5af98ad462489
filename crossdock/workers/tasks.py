"""Celery tasks: dispatch one job (or one group of array tasks, or a batch), cancel and preempt.
Each is idempotent.

A dispatch claims each (job id, attempt) before it submits; a second task for the same attempt
(a resend, a duplicate) sees the claim and does nothing. For backends that ``reowns_claims``
(Slurm by tag, Kubernetes by name), the same task delivered again after its worker died (same
Celery task id) recognises its own claims and submits again, which the backend answers with what
it already started.
"""

from __future__ import annotations

import logging
import socket
import threading
from concurrent.futures import ThreadPoolExecutor
from functools import lru_cache, wraps

from celery import shared_task

from crossdock import signing
from crossdock.backends.redis_store.sealing import BAD_SEAL
from crossdock.observe import metrics
from crossdock.queue.errors import BadSignature
from crossdock.queue.jobstore import DISPATCHER_TTL_SECONDS
from crossdock.queue.ports import BackendUnavailable, JobTransitions, SubmitFailed, SupportsArrays
from crossdock.queue.states import JobState
from crossdock.runtime import Runtime

log = logging.getLogger(__name__)

BATCH_PARALLELISM = 4
"""Submissions in flight at once in one batch dispatch (sbatch or API calls)."""


@lru_cache(maxsize=1)
def _process_runtime() -> Runtime:
    return Runtime.from_env(start_redis=False)


def runtime() -> Runtime:
    """This worker's runtime, on the config in force (a live change is taken before the next task:
    the leader admitted the job under it)."""
    rt = _process_runtime()
    rt.refresh_config()
    return rt


runtime.cache_clear = _process_runtime.cache_clear  # type: ignore[attr-defined]  # tests start afresh


def _worker(task) -> str:
    return f"{socket.gethostname()}:{task.request.id}"


def _keeps_alive(fn):
    """While the dispatch task runs, refresh its liveness (the follower tells a claim left by a
    task that died mid-dispatch, a SIGKILLed worker, from a long batch still submitting); gone
    when it returns."""
    @wraps(fn)
    def task(self, *args, **kwargs):
        store, worker = _process_runtime().store, _worker(self)
        stop = threading.Event()

        def beat() -> None:
            while not stop.wait(DISPATCHER_TTL_SECONDS / 3):
                try:
                    store.dispatching(worker)
                except Exception as exc:  # noqa: BLE001 - the store is away: beat again later
                    log.debug("dispatch %s: liveness not refreshed: %s", worker, exc)

        beating = threading.Thread(target=beat, daemon=True, name="dispatch-alive")
        beating.start()
        try:
            return fn(self, *args, **kwargs)
        finally:
            stop.set()
            beating.join()
            try:
                store.dispatching(worker, alive=False)
            except Exception as exc:  # noqa: BLE001 - it expires on its own
                log.debug("dispatch %s: liveness not dropped: %s", worker, exc)
    return task


def _fresh(task) -> bool:
    """First delivery, first try: nothing can carry this task's tags yet."""
    return not task.request.retries and not (task.request.delivery_info or {}).get("redelivered")


def _submitted(kind: str, jobs: list, refs: dict) -> None:
    metrics.record_dispatch(kind, "submitted", [j for j in jobs if j.id in refs])


def _fail(store: JobTransitions, ids: list[int], attempt: int, reason: str) -> None:
    for i in ids:
        store.transition(i, JobState.FAILED, attempt=attempt, reason=reason, actor="dispatch")


def _sealed(rt: Runtime, jobs: list, refusals: dict[int, str]) -> list:
    """The jobs whose spec and Python payload carry their owner's seals; the others fail here,
    before any backend sees them (a spec changed in the store after submit; a Slurm or Kubernetes
    node unpickles the payload with no key to check it)."""
    good = []
    for job in jobs:
        if refusals.get(job.id):
            log.error("dispatch of job %s refused: %s", job.display_id, refusals[job.id])
            _fail(rt.store, [job.id], job.attempts, f"{BAD_SEAL}: {refusals[job.id]}")
            continue
        try:
            signing.check_payload(rt.settings.state_dir, job.spec, f"the Python payload of job {job.display_id}")
            good.append(job)
        except BadSignature as exc:
            _fail(rt.store, [job.id], job.attempts, f"BadSignature: {exc}")
    return good


def _unavailable(task, store, ids: list[int], attempt: int, exc: BackendUnavailable, kind: str) -> str:
    if not exc.retryable:
        _fail(store, ids, attempt, f"BackendUnavailable: {exc}")
        metrics.record_dispatch(kind, "failed")
        return "failed"
    metrics.dispatch_retried(kind)
    store.release_claims(ids, attempt)
    raise task.retry(exc=exc, countdown=min(2 ** min(task.request.retries, 5), 30))


@shared_task(name="crossdock.dispatch", bind=True, max_retries=None)
@_keeps_alive
def dispatch(self, job_id: int, attempt: int) -> str:
    """Start attempt ``attempt`` of a SCHEDULED job on its backend, exactly once."""
    rt = runtime()
    store = rt.store
    read = store.opened([job_id])
    if not read:
        return "missing"
    [(job, refusal)] = read
    if job.state is not JobState.SCHEDULED or job.attempts != attempt:
        return f"stale: {job.state} attempt {job.attempts}"
    kind = job.backend or "local"
    if not store.claim_dispatch([job_id], attempt, _worker(self), reown=rt.backends.capabilities(kind).reowns_claims)[0]:
        return "duplicate"
    if not _sealed(rt, [job], {job_id: refusal}):
        return "failed"
    try:
        with metrics.backend_call(kind, "submit"):
            ref = rt.backends(kind).submit(job)
    except BackendUnavailable as exc:
        return _unavailable(self, store, [job_id], attempt, exc, kind)
    except SubmitFailed as exc:
        _fail(store, [job_id], attempt, f"SubmitFailed: {exc}")
        metrics.record_dispatch(kind, "failed")
        return "failed"
    store.set_backend_refs({job_id: ref})
    _submitted(kind, [job], {job_id: ref})
    return ref


@shared_task(name="crossdock.dispatch_array", bind=True, max_retries=None)
@_keeps_alive
def dispatch_array(self, array_job_id: int, attempt: int, job_ids: list[int], throttle: int | None = None) -> str:
    """Start attempt ``attempt`` of these SCHEDULED tasks of one array as ONE backend submission
    (a Slurm array with ``%throttle``, an Indexed Job), exactly once.

    Tasks that moved on (cancelled, another attempt) or whose attempt another task claimed (a
    resend dispatched them one by one) are left out; the group's tag comes from the tasks it
    submits, so a redelivery, which claims the same tasks, finds the same submission."""
    rt = runtime()
    store = rt.store
    tasks, refusal = store.array_tasks(job_ids)
    jobs = [j for j in tasks if j.state is JobState.SCHEDULED and j.attempts == attempt
            and j.array_job_id == array_job_id]
    if not jobs:
        return "stale"
    kind = jobs[0].backend or "local"
    claimed, all_new = store.claim_dispatch([j.id for j in jobs], attempt, _worker(self),
                                            reown=rt.backends.capabilities(kind).reowns_claims)
    mine = set(claimed)
    jobs = [j for j in jobs if j.id in mine]
    if not jobs:
        return "duplicate"
    jobs = _sealed(rt, jobs, dict.fromkeys((j.id for j in jobs), refusal))
    if not jobs:
        return "failed"
    ids = [j.id for j in jobs]
    target = rt.backends(kind)
    try:
        with metrics.backend_call(kind, "submit_array"):
            if isinstance(target, SupportsArrays) and len(jobs) > 1:
                refs = target.submit_array(jobs, throttle, fresh=all_new and _fresh(self))
            else:
                refs = {j.id: target.submit(j) for j in jobs}
    except BackendUnavailable as exc:
        return _unavailable(self, store, ids, attempt, exc, kind)
    except SubmitFailed as exc:
        _fail(store, ids, attempt, f"SubmitFailed: {exc}")
        metrics.record_dispatch(kind, "failed")
        return "failed"
    store.set_backend_refs(refs)
    _submitted(kind, jobs, refs)
    return f"{len(refs)} tasks: {next(iter(refs.values()))}…"


@shared_task(name="crossdock.dispatch_batch", bind=True, max_retries=None)
@_keeps_alive
def dispatch_batch(self, pairs: list[list[int]]) -> str:
    """Start separate SCHEDULED jobs of one pool (``[job id, attempt]`` pairs), each exactly once,
    several at a time: one task, one read and one claim round trip for the batch.

    A job that cannot be submitted now (backend unavailable) has its claim freed, so reconcile
    sends it again on its own; one the backend refuses fails alone."""
    rt = runtime()
    store = rt.store
    wanted = {job_id: attempt for job_id, attempt in pairs}
    read = store.opened(wanted)
    refusals = {j.id: refusal for j, refusal in read}
    jobs = [j for j, _r in read if j.state is JobState.SCHEDULED and j.attempts == wanted[j.id]]
    if not jobs:
        return "stale"
    kind = jobs[0].backend or "local"
    reown = rt.backends.capabilities(kind).reowns_claims
    mine: list = []
    fresh = _fresh(self)
    for attempt in sorted({j.attempts for j in jobs}):
        same = [j for j in jobs if j.attempts == attempt]
        claimed, all_new = store.claim_dispatch([j.id for j in same], attempt, _worker(self), reown=reown)
        fresh = fresh and all_new
        mine += [j for j in same if j.id in set(claimed)]
    if not mine:
        return "duplicate"
    mine = _sealed(rt, mine, refusals)
    target = rt.backends(kind)

    def submit(job) -> tuple[str | None, Exception | None]:
        try:
            with metrics.backend_call(kind, "submit"):
                return target.submit(job, fresh=fresh), None  # fresh: skip the look for its tag
        except (BackendUnavailable, SubmitFailed) as exc:
            return None, exc

    with ThreadPoolExecutor(max_workers=BATCH_PARALLELISM) as pool:
        outcomes = list(pool.map(submit, mine))
    refs = {job.id: ref for job, (ref, _exc) in zip(mine, outcomes) if ref is not None}
    store.set_backend_refs(refs)
    _submitted(kind, mine, refs)
    for job, (_ref, exc) in zip(mine, outcomes):
        if isinstance(exc, BackendUnavailable) and exc.retryable:
            metrics.dispatch_retried(kind)
            store.release_claims([job.id], job.attempts)
        elif exc is not None:
            error = "BackendUnavailable" if isinstance(exc, BackendUnavailable) else "SubmitFailed"
            _fail(store, [job.id], job.attempts, f"{error}: {exc}")
    failed = sum(1 for _ref, exc in outcomes if exc is not None)
    return f"{len(mine) - failed} submitted, {failed} not"


@shared_task(name="crossdock.cancel")
def cancel(job_id: int) -> str:
    rt = runtime()
    job = rt.store.get(job_id)
    if job.state.terminal or not job.backend:
        return str(job.state)
    with metrics.backend_call(job.backend, "cancel"):
        rt.backends(job.backend).cancel(job)
    return "requested"


@shared_task(name="crossdock.preempt")
def preempt(job_id: int, grace_seconds: int, attempt: int | None = None) -> str:
    """Signal a victim and return: the grace period is never waited out in a worker (the follower
    or the job's supervisor stops what still runs at its ``preempt_deadline``). With ``attempt``,
    only that attempt: a task that arrives once the victim ended and was placed again (a requeue
    whose stop landed first) leaves the next attempt alone."""
    rt = runtime()
    job = rt.store.get(job_id)
    if job.state.terminal or not job.backend:
        return str(job.state)
    if attempt is not None and job.attempts != attempt:
        return f"attempt {attempt} ended"
    with metrics.backend_call(job.backend, "preempt"):
        rt.backends(job.backend).preempt(job, grace_seconds)
    return "requested"
