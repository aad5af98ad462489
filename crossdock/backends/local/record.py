"""Record the end of a local attempt in the store: by its supervisor, or by the reconciler from
what a dead supervisor left (:mod:`workspace`). Either may run it, several times, after parts of
an earlier try landed; the attempt guard makes every repeat move nothing."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

from crossdock import signing
from crossdock.backends.local.workspace import Outcome
from crossdock.queue.errors import NoSuchJob, StoreUnavailable
from crossdock.queue.ports import BackendStore
from crossdock.queue.states import JobState, stopped_outcome


def _time(epoch: float | None) -> datetime | None:
    return None if epoch is None else datetime.fromtimestamp(epoch, timezone.utc)


def record(store: BackendStore, job_id: int, attempt: int, outcome: Outcome, result: bytes | None, requeue: bool,
           state_dir: Path, actor: str = "local") -> bool:
    """Record ``outcome`` for ``attempt`` unless the job moved on. True when the attempt's end is
    in the store now (recorded here or before); False when the attempt is no longer the job's.
    The stop requests standing now decide how a stopped attempt ended, as on every backend
    (:func:`~crossdock.queue.states.stopped_outcome`: a cancel during a preemption's grace wins);
    a Python job's ``result`` is sealed under its owner's key (the runner runs as the service).
    Raises :class:`StoreUnavailable` when the store does not answer (try again later)."""
    try:
        job = store.get(job_id)
    except NoSuchJob:
        return False
    if job.attempts != attempt:
        return False
    if not job.state.active:  # recorded already (by this or by the reconciler), or lost meanwhile
        return True
    if result:  # before the end state, so a finished job always has its result
        store.set_result(job_id, signing.seal(signing.user_key(state_dir, job.spec.user), f"result:{job_id}", result))
    state, reason = stopped_outcome(outcome.state, outcome.reason, cancel=job.cancel_requested,
                                    preempt=job.preempt_requested)
    fields = {"end_time": _time(outcome.end_time), "exit_code": outcome.exit_code, "signal": outcome.signal,
              "pid": None, "max_rss_kib": outcome.max_rss_kib}
    if job.start_time is None and outcome.start_time is not None:  # RUNNING never got through
        fields["start_time"] = _time(outcome.start_time)
    if outcome.backend_ref and not job.backend_ref:
        fields["backend_ref"] = outcome.backend_ref
    with store.pipeline(transaction=True) as pipe:  # the end and its follow-up land together
        store.transition(job_id, state, attempt=attempt, reason=reason, fields=fields, actor=actor, pipe=pipe)
        if state is JobState.PREEMPTED:
            store.settle_preempted(job_id, requeue, actor=actor, attempt=attempt, cancelled=job.cancel_requested,
                                   pipe=pipe)
        pipe.execute()
    return True
