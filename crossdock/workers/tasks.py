"""Celery tasks: dispatch, cancel and preempt one job on its backend. Each is idempotent."""

from __future__ import annotations

import logging
import socket
from functools import lru_cache

from crossdock.backends.base import BackendUnavailable, SubmitFailed
from crossdock.queue.errors import NoSuchJob
from crossdock.queue.states import JobState, Reason
from crossdock.runtime import Runtime
from crossdock.workers.app import app
from crossdock.workers.backends import backend

log = logging.getLogger(__name__)


@lru_cache(maxsize=1)
def runtime() -> Runtime:
    return Runtime.from_env()


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
    if not store.claim_dispatch(job_id, attempt, worker):
        return "duplicate"
    try:
        ref = backend(job.backend or "local", rt).submit(job)
    except BackendUnavailable as exc:
        if not exc.retryable:
            store.transition(job_id, JobState.FAILED, attempt=attempt, reason=f"BackendUnavailable: {exc}",
                             actor="dispatch")
            return "failed"
        # Free the claim so the retry may submit; the backend's own idempotency covers a
        # submission that did reach it before the error.
        store.r.delete(store.k.dispatch_claim(job_id, attempt))
        store.update_if(job_id, (JobState.SCHEDULED,), {"reason": Reason.DISPATCH_RETRY, "dispatched": ""})
        raise self.retry(exc=exc, countdown=min(2 ** min(self.request.retries, 5), 30))
    except SubmitFailed as exc:
        store.transition(job_id, JobState.FAILED, attempt=attempt, reason=f"SubmitFailed: {exc}", actor="dispatch")
        return "failed"
    store.update_if(job_id, (JobState.SCHEDULED, JobState.RUNNING), {"backend_ref": ref})
    return ref


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
