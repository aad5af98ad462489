"""JobStore: submit, read, transition and follow jobs in Redis.

Every mutating step is atomic (a Lua script or MULTI/EXEC) and can join a caller's pipeline so
that one scheduling decision costs one round trip. The key layout lives in :mod:`keys`.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Iterable, Sequence

import redis

from crossdock.backends.redis_store import scripts
from crossdock.backends.redis_store.keys import Keys
from crossdock.queue.errors import NoSuchJob
from crossdock.queue.models import Job, JobSpec
from crossdock.queue.states import TRANSITIONS, JobState, Reason
from crossdock.settings import current_user

log = logging.getLogger(__name__)

STREAM_MAXLEN = 10_000
_STATUS_FIELDS = ("state", "reason", "attempts", "queue", "priority_class", "priority", "preemptible", "pools",
                  "array_job_id", "array_task_id", "backend", "pool", "backend_ref", "nodes", "gpu_ids",
                  "preempt_requested", "alloc_cpu_milli", "alloc_mem_mib", "exit_code", "signal", "submit_time", "eligible_time",
                  "scheduled_time", "start_time", "end_time")
_JSON_FIELDS = ("pools", "nodes", "gpu_ids")
_INT_FIELDS = ("attempts", "priority", "array_job_id", "array_task_id", "alloc_cpu_milli", "alloc_mem_mib",
               "exit_code", "signal")
_TIME_FIELDS = ("submit_time", "eligible_time", "scheduled_time", "start_time", "end_time")


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


def _allowed_from(new: JobState) -> str:
    return " ".join(old for old, targets in TRANSITIONS.items() if new in targets)


def encode(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):  # flags are present ("1") or absent: HEXISTS and truthiness agree
        return "1" if value else ""
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, (list, tuple, dict)):
        return json.dumps(value)
    return str(value)


def job_to_hash(job: Job) -> dict[str, str]:
    h = {"spec": job.spec.model_dump_json(exclude_defaults=True)}
    for f in _STATUS_FIELDS:
        v = encode(getattr(job, f))
        if v != "":
            h[f] = v
    return h


def hash_to_job(job_id: int, h: dict[str, str]) -> Job:
    data: dict[str, Any] = {"id": job_id, "spec": JobSpec.model_validate_json(h["spec"])}
    for f in _STATUS_FIELDS:
        v = h.get(f)
        if v is None or v == "":
            continue
        if f in _JSON_FIELDS:
            data[f] = json.loads(v)
        elif f in _INT_FIELDS:
            data[f] = int(v)
        elif f in _TIME_FIELDS:
            data[f] = datetime.fromisoformat(v)
        elif f in ("preemptible", "preempt_requested"):
            data[f] = v == "1"
        else:
            data[f] = v
    return Job.model_validate(data)


@dataclass(frozen=True)
class CancelOutcome:
    job_id: int
    cancelled_now: bool
    """True when the job was pending and is CANCELLED already; False when a backend must act."""
    state: JobState
    backend: str | None


class JobStore:
    def __init__(self, client: redis.Redis, prefix: str = "cd"):
        self.r = client
        self.k = Keys(prefix)
        self._transition = self.r.register_script(scripts.TRANSITION)
        self._update_if = self.r.register_script(scripts.UPDATE_IF)
        self._lease = self.r.register_script(scripts.LEASE)
        self._release = self.r.register_script(scripts.RELEASE)

    @classmethod
    def from_url(cls, url: str, prefix: str = "cd") -> "JobStore":
        return cls(redis.Redis.from_url(url, decode_responses=True), prefix)

    # --- submit ----------------------------------------------------------------------------
    def submit(self, jobs: Sequence[Job], token: str | None = None, actor: str | None = None) -> list[Job]:
        """Store new jobs atomically and give them ids. ``jobs`` carry id 0 (assigned here).

        An array is passed as its task jobs; they get consecutive ids and the first id is the
        array job id. With ``token``, a repeated submission returns the jobs first created.
        """
        actor = actor or current_user()
        idem = self.k.idempotency(token) if token else None
        while True:
            with self.r.pipeline() as pipe:
                try:
                    if idem:
                        pipe.watch(idem)
                        first = pipe.get(idem)
                        if first is not None:
                            ids = json.loads(first)
                            return self.get_many(ids)
                    last = self.r.incrby(self.k.job_counter, len(jobs))
                    stored = _assign_ids(jobs, last - len(jobs) + 1)
                    pipe.multi()
                    if idem:
                        pipe.set(idem, json.dumps([j.id for j in stored]), ex=7 * 86400)
                    self._write_new(pipe, stored, actor)
                    pipe.execute()
                    return stored
                except redis.WatchError:
                    continue

    def _write_new(self, pipe: Any, jobs: Sequence[Job], actor: str) -> None:
        now = time.time()
        for job in jobs:
            h = job_to_hash(job)
            pipe.hset(self.k.job(job.id), mapping=h)
            pipe.zadd(self.k.all_jobs, {job.id: job.id})
            pipe.zadd(self.k.pending, {job.id: job.id})
            pipe.zadd(self.k.by_name(job.spec.user, job.spec.display_name()), {job.id: job.id})
            if job.array_job_id is not None:
                pipe.zadd(self.k.array(job.array_job_id), {job.id: job.array_task_id or 0})
            ev = {"event": "submitted", "actor": actor, "to": job.state.value, "time": now}
            pipe.xadd(self.k.job_events(job.id), ev, maxlen=STREAM_MAXLEN, approximate=True)
            pipe.xadd(self.k.events, {"job": job.id, **ev}, maxlen=STREAM_MAXLEN, approximate=True)

    # --- read ------------------------------------------------------------------------------
    def get(self, job_id: int) -> Job:
        h = self.r.hgetall(self.k.job(job_id))
        if not h:
            raise NoSuchJob(job_id)
        return hash_to_job(job_id, h)

    def get_many(self, ids: Iterable[int]) -> list[Job]:
        ids = list(ids)
        with self.r.pipeline(transaction=False) as pipe:
            for i in ids:
                pipe.hgetall(self.k.job(i))
            rows = pipe.execute()
        return [hash_to_job(i, h) for i, h in zip(ids, rows) if h]

    def field(self, job_id: int, name: str) -> str | None:
        return self.r.hget(self.k.job(job_id), name)

    def pending_ids(self) -> list[int]:
        return [int(i) for i in self.r.zrange(self.k.pending, 0, -1)]

    def active_ids(self) -> list[int]:
        return [int(i) for i in self.r.zrange(self.k.active, 0, -1)]

    def all_ids(self, limit: int | None = None) -> list[int]:
        end = -1 if limit is None else limit - 1
        return [int(i) for i in self.r.zrevrange(self.k.all_jobs, 0, end)][::-1]

    def array_ids(self, array_job_id: int) -> list[int]:
        return [int(i) for i in self.r.zrange(self.k.array(array_job_id), 0, -1)]

    def ids_by_name(self, user: str, name: str) -> list[int]:
        return [int(i) for i in self.r.zrange(self.k.by_name(user, name), 0, -1)]

    def resolve(self, ref: str) -> list[int]:
        """Job ids named by ``ref``: ``12`` (a job, or a whole array), ``12_3`` (one array task)."""
        text = str(ref).strip()
        if "_" in text:
            head, _, task = text.partition("_")
            if not head.isdigit() or not task.isdigit():
                raise NoSuchJob(ref)
            ids = [j.id for j in self.get_many(self.array_ids(int(head))) if j.array_task_id == int(task)]
        elif text.isdigit():
            ids = self.array_ids(int(text)) or ([int(text)] if self.r.exists(self.k.job(int(text))) else [])
        else:
            raise NoSuchJob(ref)
        if not ids:
            raise NoSuchJob(ref)
        return ids

    def events(self, job_id: int | None = None, count: int = 1000) -> list[dict[str, str]]:
        key = self.k.events if job_id is None else self.k.job_events(job_id)
        return [{"id": eid, **fields} for eid, fields in self.r.xrange(key, count=count)]

    # --- state changes ---------------------------------------------------------------------
    def transition(self, job_id: int, new: JobState, *, fields: dict[str, Any] | None = None, actor: str = "",
                   reason: str = "", attempt: int | None = None, unless: str = "", bump_attempt: bool = False,
                   pipe: Any = None) -> Any:
        """Move a job to ``new`` if the transition table allows it from its current state.

        Returns True/False (or queues the call on ``pipe``, whose result is ``[1|0, old]``).
        """
        values = {k: encode(v) for k, v in (fields or {}).items()}
        if reason:
            values["reason"] = reason
        event = {"actor": actor or current_user(), "reason": reason, "time": time.time()}
        keys = [self.k.job(job_id), self.k.pending, self.k.active, self.k.job_events(job_id), self.k.events]
        args = [job_id, new.value, _allowed_from(new), json.dumps(values), json.dumps(event), STREAM_MAXLEN,
                "" if attempt is None else str(attempt), unless, "1" if bump_attempt else "0"]
        if pipe is not None:
            return self._transition(keys=keys, args=args, client=pipe)
        moved, old = self._transition(keys=keys, args=args)
        if moved:
            log.info("job %s: %s -> %s %s", job_id, old, new.value, reason)
        return bool(moved)

    def update_if(self, job_id: int, states: Iterable[JobState], fields: dict[str, Any], pipe: Any = None) -> Any:
        args = [" ".join(s.value for s in states), json.dumps({k: encode(v) for k, v in fields.items()})]
        return self._update_if(keys=[self.k.job(job_id)], args=args, client=pipe or self.r)

    def set_reasons(self, reasons: dict[int, str], explanations: dict[int, str] | None = None) -> None:
        """Refresh pending reasons (and why-not-running explanations) in one round trip, only
        while the jobs stay PENDING."""
        if not reasons:
            return
        explanations = explanations or {}
        with self.r.pipeline(transaction=False) as pipe:
            for job_id, reason in reasons.items():
                self.update_if(job_id, (JobState.PENDING,),
                               {"reason": reason, "explanation": explanations.get(job_id, "")}, pipe=pipe)
            pipe.execute()

    def cancel(self, job_id: int, actor: str = "") -> CancelOutcome:
        """Cancel a pending job at once; mark a placed one for its backend to stop."""
        if self.transition(job_id, JobState.CANCELLED, actor=actor, reason=Reason.CANCELLED_BY_USER,
                           fields={"end_time": utcnow()}, unless="dispatched"):
            return CancelOutcome(job_id, True, JobState.CANCELLED, None)
        job = self.get(job_id)
        if job.state.terminal:
            return CancelOutcome(job_id, False, job.state, None)
        self.update_if(job_id, (JobState.SCHEDULED, JobState.RUNNING, JobState.PREEMPTED), {"cancel_requested": "1"})
        return CancelOutcome(job_id, False, job.state, job.backend)

    def hold(self, job_id: int, hold: bool, actor: str = "") -> bool:
        job = self.get(job_id)
        spec = job.spec.model_copy(update={"hold": hold})
        reason = Reason.JOB_HELD_USER if hold else Reason.NONE
        return bool(self.update_if(job_id, (JobState.PENDING,),
                                   {"spec": spec.model_dump_json(exclude_defaults=True), "reason": reason}))

    def requeue(self, job_id: int, actor: str = "", reason: str = "Requeued", delay_seconds: float = 0) -> bool:
        """Back to PENDING for a new attempt (placement fields cleared)."""
        eligible = utcnow().timestamp() + delay_seconds
        fields = {"nodes": "", "gpu_ids": "", "backend_ref": "", "pool": "", "backend": "", "exit_code": "",
                  "signal": "", "start_time": "", "end_time": "", "scheduled_time": "", "cancel_requested": "", "preempt_requested": "",
                  "dispatched": "", "pid": "", "eligible_time": datetime.fromtimestamp(eligible, timezone.utc)
                  if delay_seconds else ""}
        return self.transition(job_id, JobState.PENDING, fields=fields, actor=actor, reason=reason)

    # --- dispatch bookkeeping --------------------------------------------------------------
    def claim_dispatch(self, job_id: int, attempt: int, worker: str) -> bool:
        """First delivery of a dispatch task wins; redeliveries see False and do nothing."""
        ok = self.r.set(self.k.dispatch_claim(job_id, attempt), worker, nx=True, ex=7 * 86400)
        if ok:
            self.update_if(job_id, (JobState.SCHEDULED,), {"dispatched": str(time.time())})
        return bool(ok)

    def dispatch_claimed(self, job_id: int, attempt: int) -> bool:
        return bool(self.r.exists(self.k.dispatch_claim(job_id, attempt)))

    def heartbeat(self, job_id: int, ttl: float) -> None:
        self.r.set(self.k.heartbeat(job_id), str(time.time()), px=int(ttl * 1000))

    def alive(self, ids: Sequence[int]) -> dict[int, bool]:
        with self.r.pipeline(transaction=False) as pipe:
            for i in ids:
                pipe.exists(self.k.heartbeat(i))
            return {i: bool(v) for i, v in zip(ids, pipe.execute())}

    def set_result(self, job_id: int, payload: bytes) -> None:
        self.r.set(self.k.result(job_id), payload.hex(), ex=7 * 86400)

    def result(self, job_id: int) -> bytes | None:
        v = self.r.get(self.k.result(job_id))
        return bytes.fromhex(v) if v else None

    # --- leadership ------------------------------------------------------------------------
    def acquire_lease(self, holder: str, seconds: float) -> bool:
        return bool(self._lease(keys=[self.k.scheduler_lease], args=[holder, int(seconds * 1000)]))

    def release_lease(self, holder: str) -> None:
        self._release(keys=[self.k.scheduler_lease], args=[holder])

    def lease_holder(self) -> str | None:
        return self.r.get(self.k.scheduler_lease)


def _assign_ids(jobs: Sequence[Job], first: int) -> list[Job]:
    """Give consecutive ids; array tasks carry a placeholder ``array_job_id`` (any value shared
    by the tasks of one array) that becomes the id of that array's first task."""
    out: list[Job] = []
    array_ids: dict[int | None, int] = {}
    for offset, job in enumerate(jobs):
        jid = first + offset
        update: dict[str, Any] = {"id": jid}
        if job.array_task_id is not None:
            update["array_job_id"] = array_ids.setdefault(job.array_job_id, jid)
        out.append(job.model_copy(update=update))
    return out

