"""MemoryStore: the job store's roles (:mod:`crossdock.queue.jobstore`) in one process's memory.

The twin of the Redis store for tests of a worker or a backend, held to the same behaviour by
``tests/contract/test_store_contract.py``: the same transition table and guards, exclusive dispatch
claims, stop requests, a lease, events with unique ordered ids. A pipeline queues calls and runs
them together under the store's lock (all of them, in order: what a MULTI does). Expiring things
(heartbeats, the lease, a dispatcher's liveness) expire on ``clock``, which a test may drive;
the times it writes (events, placement and end times, preemption deadlines) come from ``wall``
(epoch seconds), which a simulation drives too. It
keeps no seals (no ``SealedReads``), does not record the follower's typed passes (no
``RecordsStatuses``), and keeps no descheduler records (a preempted job requeues as Preempted),
no services records and no history.
"""

from __future__ import annotations

import threading
import time
import uuid
from contextlib import contextmanager
from datetime import datetime, timezone
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence

from crossdock.queue.bounds import JobCounts
from crossdock.queue.errors import LeaseLost, NoSuchJob
from crossdock.queue.jobstore import DISPATCHER_TTL_SECONDS, REQUEUE_CLEARED, StopRequest, assign_ids
from crossdock.queue.models import ATTEMPTS_KEPT, Attempt, Job
from crossdock.queue.states import TRANSITIONS, JobState, Reason

_PLACED = (JobState.SCHEDULED, JobState.RUNNING)


def _order(event_id: str) -> tuple[int, int]:
    ms, _, seq = event_id.partition("-")
    return int(ms or 0), int(seq or 0)


class Batch:
    """Calls queued by ``pipe=``; :meth:`execute` runs them at once and returns their results."""

    def __init__(self, store: "MemoryStore", lease: str | None = None):
        self._store, self._lease = store, lease
        self._calls: list[Callable[[], Any]] = []

    def queue(self, call: Callable[[], Any]) -> "Batch":
        self._calls.append(call)
        return self

    def __len__(self) -> int:
        """Calls queued (as a redis-py pipeline's length: a caller reads its results by position)."""
        return len(self._calls)

    def execute(self) -> list[Any]:
        with self._store._lock:
            calls, self._calls = self._calls, []
            if self._lease is not None:
                self._store._fence(self._lease)
            return [call() for call in calls]

    def reset(self) -> None:
        self._calls = []


class MemoryStore:
    def __init__(self, actor: str = "crossdock", clock: Callable[[], float] = time.monotonic,
                 wall: Callable[[], float] = time.time):
        self.actor, self.clock, self.wall = actor, clock, wall
        self._lock = threading.RLock()
        self._changed = threading.Condition(self._lock)
        self._jobs: dict[int, Job] = {}
        self._pending: set[int] = set()
        self._active: set[int] = set()
        self._last_id = 0
        self._identity = uuid.uuid4().hex[:12]
        self._tokens: dict[tuple[str, str], list[int]] = {}
        self._events: list[dict[str, str]] = []
        self._job_events: dict[int, list[dict[str, str]]] = {}
        self._last_event = (0, -1)
        self._claims: dict[tuple[int, int], str] = {}
        self._expiry: dict[tuple[str, Any], float] = {}
        """("dispatcher", worker), ("heartbeat", job id), ("lease", holder) -> when it expires (``clock``)."""
        self._lease: str | None = None
        self._results: dict[int, bytes] = {}
        self._checkpoints: dict[int, bytes] = {}
        self._parts: dict[str, dict[str, bytes]] = {}
        self._output: dict[int, list[str]] = {}

    @contextmanager
    def pipeline(self, transaction: bool = False, lease: str | None = None) -> Iterator[Batch]:
        if lease is not None:
            self._fence(lease)
        batch = Batch(self, lease)
        try:
            yield batch
        finally:
            batch.reset()

    def _run(self, pipe: Batch | None, call: Callable[[], Any]) -> Any:
        if pipe is not None:
            return pipe.queue(call)
        with self._lock:
            return call()

    def _now(self) -> datetime:
        return datetime.fromtimestamp(self.wall(), timezone.utc)

    def _live(self, key: tuple[str, Any]) -> bool:
        return self._expiry.get(key, float("-inf")) > self.clock()

    def installation(self) -> tuple[str, bool]:
        """As ``JobStore.installation``: this store's own identity; it never held an earlier release's jobs."""
        return self._identity, False

    # --- submit and read --------------------------------------------------------------------
    def submit(self, jobs: Sequence[Job], token: str | None = None, actor: str | None = None,
               admit: JobCounts | None = None) -> list[Job]:
        """Store new jobs (id 0) with consecutive ids, as ``JobStore.submit``; a token's repeat
        returns the jobs it first stored."""
        with self._lock:
            owners = sorted({j.spec.user for j in jobs})
            key = (",".join(owners), token or "")
            if token and key in self._tokens:
                return self.get_many(self._tokens[key])
            if admit is not None:
                admit.check({o: sum(1 for i in self._pending | self._active if self._jobs[i].spec.user == o)
                             for o in owners})
            stored = assign_ids(jobs, self._last_id + 1)
            self._last_id += len(stored)
            for job in stored:
                self._jobs[job.id] = job
                self._pending.add(job.id)
                self._note(job.id, {"event": "submitted", "actor": actor or self.actor, "to": job.state.value,
                                    "time": self.wall()})
            if token:
                self._tokens[key] = [j.id for j in stored]
            return stored

    def get(self, job_id: int) -> Job:
        with self._lock:
            if job_id not in self._jobs:
                raise NoSuchJob(job_id)
            return self._jobs[job_id]

    def get_many(self, ids: Iterable[int]) -> list[Job]:
        with self._lock:
            return [self._jobs[i] for i in ids if i in self._jobs]

    def pending_ids(self) -> list[int]:
        with self._lock:
            return sorted(self._pending)

    def active_ids(self) -> list[int]:
        with self._lock:
            return sorted(self._active)

    # --- state changes ----------------------------------------------------------------------
    def transition(self, job_id: int, new: JobState, *, fields: dict[str, Any] | None = None, actor: str = "",
                   reason: str = "", attempt: int | None = None, unless: str = "", bump_attempt: bool = False,
                   only_from: Iterable[JobState] | None = None, ends_attempt: bool = False,
                   ended_as: tuple[str, str] | None = None, pipe: Any = None) -> Any:
        allowed = {old for old, targets in TRANSITIONS.items() if new in targets}
        if only_from is not None:
            allowed &= set(only_from)

        def step() -> list[Any]:
            job = self._jobs.get(job_id)
            if job is None:
                return [0, "missing"]
            old = job.state
            if old not in allowed or (attempt is not None and job.attempts != attempt) or \
                    (unless and getattr(job, unless, None)):
                return [0, old.value]
            update = _cleared(fields or {})
            if reason:
                update["reason"] = reason
            if ends_attempt and job.attempts:
                update["past_attempts"] = [*job.past_attempts, _ended(job, reason, ended_as, self._now())][-ATTEMPTS_KEPT:]
            if bump_attempt:
                update["attempts"] = job.attempts + 1
            self._jobs[job_id] = job.model_copy(update={**update, "state": new})
            (self._pending.add if new is JobState.PENDING else self._pending.discard)(job_id)
            (self._active.add if new in _PLACED else self._active.discard)(job_id)
            self._note(job_id, {"from": old.value, "to": new.value, "actor": actor or self.actor, "reason": reason,
                                "time": self.wall()})
            return [1, old.value]

        if pipe is not None:
            return pipe.queue(step)
        with self._lock:
            return bool(step()[0])

    def update_if(self, job_id: int, states: Iterable[JobState], fields: dict[str, Any], pipe: Any = None) -> Any:
        wanted = set(states)

        def step() -> int:
            job = self._jobs.get(job_id)
            if job is None or job.state not in wanted:
                return 0
            self._jobs[job_id] = job.model_copy(update=_cleared(fields))
            return 1

        return self._run(pipe, step)

    def requeue(self, job_id: int, actor: str = "", reason: str = "Requeued", delay_seconds: float = 0, *,
                unless: str = "", attempt: int | None = None, only_from: Iterable[JobState] | None = None,
                pipe: Any = None) -> Any:
        eligible = datetime.fromtimestamp(self.wall() + delay_seconds, timezone.utc) if delay_seconds else None
        return self.transition(job_id, JobState.PENDING, fields={**dict.fromkeys(REQUEUE_CLEARED),
                                                                 "eligible_time": eligible},
                               actor=actor, reason=reason, unless=unless, attempt=attempt, only_from=only_from,
                               ends_attempt=True, pipe=pipe)

    def settle_preempted(self, job_id: int, requeue: bool, actor: str = "", reason: str = Reason.PREEMPTED, *,
                         attempt: int | None = None, cancelled: bool | None = None, pipe: Any = None) -> int:
        if cancelled is None:
            stop = self.stop_request(job_id)
            cancelled = stop is not None and stop.cancel
        with self.pipeline(transaction=True) as own:
            batch = own if pipe is None else pipe
            queued = 0
            if requeue and not cancelled:
                self.requeue(job_id, actor=actor, reason=Reason.PREEMPTED, unless="cancel_requested", attempt=attempt,
                             only_from=(JobState.PREEMPTED,), pipe=batch)
                queued += 1
            self.transition(job_id, JobState.CANCELLED, actor=actor,
                            reason=Reason.CANCELLED_BY_USER if cancelled else reason, fields={"end_time": self._now()},
                            attempt=attempt, only_from=(JobState.PREEMPTED,), pipe=batch)
            if pipe is None:
                own.execute()
        return queued + 1

    # --- dispatch claims --------------------------------------------------------------------
    def claim_dispatch(self, ids: Sequence[int], attempt: int, worker: str,
                       reown: bool = False) -> tuple[list[int], bool]:
        with self._lock:
            self.dispatching(worker)
            got = []
            for i in ids:
                got.append((i, attempt) not in self._claims)
                self._claims.setdefault((i, attempt), worker)
            mine = [i for i, new in zip(ids, got) if new or (reown and self._claims[(i, attempt)] == worker)]
            for i in mine:
                self.update_if(i, (JobState.SCHEDULED,), {"dispatched": self._now()})
            return mine, all(got)

    def release_claims(self, ids: Sequence[int], attempt: int) -> None:
        with self._lock:
            for i in ids:
                self._claims.pop((i, attempt), None)
                self.update_if(i, (JobState.SCHEDULED,), {"reason": Reason.DISPATCH_RETRY, "dispatched": None})

    def dispatch_claimed(self, job_id: int, attempt: int) -> bool:
        with self._lock:
            return (job_id, attempt) in self._claims

    def dispatcher_alive(self, job_id: int, attempt: int) -> bool:
        with self._lock:
            holder = self._claims.get((job_id, attempt))
            return holder is not None and self._live(("dispatcher", holder))

    def dispatching(self, worker: str, alive: bool = True) -> None:
        with self._lock:
            if alive:
                self._expiry[("dispatcher", worker)] = self.clock() + DISPATCHER_TTL_SECONDS
            else:
                self._expiry.pop(("dispatcher", worker), None)

    def set_backend_refs(self, refs: dict[int, str]) -> None:
        with self._lock:
            for job_id, ref in refs.items():
                self.update_if(job_id, _PLACED, {"backend_ref": ref})

    def retry_dispatch(self, job_id: int) -> bool:
        return bool(self.update_if(job_id, (JobState.SCHEDULED,), {"scheduled_time": self._now()}))

    # --- stop requests, heartbeats, the lease -----------------------------------------------
    def request_preempt(self, job_id: int, grace_seconds: float, pipe: Any = None) -> Any:
        deadline = datetime.fromtimestamp(self.wall() + grace_seconds, timezone.utc)
        return self.update_if(job_id, _PLACED, {"preempt_requested": True, "preempt_grace": grace_seconds,
                                                "preempt_deadline": deadline}, pipe=pipe)

    def stop_request(self, job_id: int) -> StopRequest | None:
        return self.stop_requests([job_id]).get(job_id)

    def stop_requests(self, ids: Sequence[int]) -> dict[int, StopRequest]:
        jobs = self.get_many(ids)
        return {j.id: StopRequest(j.cancel_requested, j.preempt_requested, j.preempt_grace)
                for j in jobs if j.cancel_requested or j.preempt_requested}

    def heartbeat(self, job_id: int, ttl: float) -> None:
        with self._lock:
            self._expiry[("heartbeat", job_id)] = self.clock() + ttl

    def alive(self, ids: Sequence[int]) -> dict[int, bool]:
        with self._lock:
            return {i: self._live(("heartbeat", i)) for i in ids}

    def acquire_lease(self, holder: str, seconds: float) -> bool:
        with self._lock:
            if self.lease_holder() not in (None, holder):
                return False
            self._lease = holder
            self._expiry[("lease", holder)] = self.clock() + seconds
            return True

    def release_lease(self, holder: str) -> None:
        with self._lock:
            if self._lease == holder:
                self._lease = None

    def _fence(self, lease: str) -> None:
        holder = self.lease_holder()
        if holder != lease:
            raise LeaseLost(f"{lease} does not hold the scheduler's lease ({holder or 'nobody'} does)")

    def lease_holder(self) -> str | None:
        with self._lock:
            return self._lease if self._lease is not None and self._live(("lease", self._lease)) else None

    # --- results, output, events ------------------------------------------------------------
    def set_result(self, job_id: int, payload: bytes) -> None:
        self._results[job_id] = bytes(payload)

    def result(self, job_id: int) -> bytes | None:
        return self._results.get(job_id)

    def set_checkpoint(self, job_id: int, sealed: bytes, ttl: int = 7 * 86400) -> None:
        self._checkpoints[job_id] = bytes(sealed)

    def checkpoint(self, job_id: int) -> bytes | None:
        return self._checkpoints.get(job_id)

    def put_call_parts(self, ref: str, parts: Mapping[str, bytes], ttl: int = 7 * 86400) -> None:
        with self._lock:
            self._parts.setdefault(ref, {}).update({k: bytes(v) for k, v in parts.items()})

    def call_parts(self, ref: str, *fields: str) -> list[bytes | None]:
        with self._lock:
            kept = self._parts.get(ref, {})
            return [kept.get(f) for f in fields]

    def append_output(self, job_id: int, chunks: Sequence[str], ttl: int = 7 * 86400) -> None:
        if chunks:
            with self._lock:
                self._output.setdefault(job_id, []).extend(chunks)

    def output(self, job_id: int, start: int = 0) -> list[str] | None:
        with self._lock:
            kept = self._output.get(job_id)
            return None if kept is None else kept[start:]

    def record_note(self, job_id: int, event: str, actor: str, **fields: str | int | float) -> None:
        with self._lock:
            self._note(job_id, {"event": event, "actor": actor, **fields, "time": self.wall()})

    def read_events(self, job_id: int | None = None, *, since: float | None = None, after: str | None = None,
                    count: int = 1000, block_ms: int | None = None) -> list[dict[str, str]]:
        deadline = time.monotonic() + (block_ms or 0) / 1000
        with self._changed:
            while True:
                events = self._events if job_id is None else self._job_events.get(job_id, [])
                if after is not None:
                    events = [e for e in events if _order(e["id"]) > _order(after)]
                elif since is not None:
                    events = [e for e in events if _order(e["id"])[0] >= since * 1000]
                else:
                    events = events[-count:]
                left = deadline - time.monotonic()
                if events or after is None or block_ms is None or left <= 0:
                    return [dict(e) for e in events[:count]]
                self._changed.wait(left)

    def _note(self, job_id: int, event: Mapping[str, Any]) -> None:
        """Append ``event`` to the job's events and the global stream, with the next id."""
        ms = int(self.wall() * 1000)
        last_ms, last_seq = self._last_event
        self._last_event = (last_ms, last_seq + 1) if ms <= last_ms else (ms, 0)
        event_id = f"{self._last_event[0]}-{self._last_event[1]}"
        values = {k: str(v) for k, v in event.items()}
        self._job_events.setdefault(job_id, []).append({**values, "id": event_id})
        self._events.append({"job": str(job_id), **values, "id": event_id})
        self._changed.notify_all()


def _cleared(fields: Mapping[str, Any]) -> dict[str, Any]:
    """``fields`` with None as the field's default, as the Redis store deletes a hash field."""
    return {name: Job.model_fields[name].get_default(call_default_factory=True) if value is None else value
            for name, value in fields.items()}


def _ended(job: Job, reason: str, ended_as: tuple[str, str] | None, now: datetime) -> Attempt:
    """The attempt a requeue ends, as it was (``JobStore``'s TRANSITION script keeps the same)."""
    state, why = ended_as or (job.state.value, reason)
    kept = {name: getattr(job, name) for name in Attempt.model_fields if name not in ("attempt", "state", "reason")}
    return Attempt(**{**kept, "attempt": job.attempts, "state": state, "reason": why,
                      "end_time": job.end_time or now})
