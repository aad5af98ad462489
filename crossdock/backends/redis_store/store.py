"""JobStore: submit, read, transition and follow jobs in Redis; nothing else touches Redis.

It implements every role of :mod:`crossdock.queue.jobstore` (``JobReads``, ``JobTransitions``,
``DispatchClaims``…), which is what workers and backends are typed against.

Every mutating step is atomic (a Lua script or MULTI/EXEC) and can join a caller's pipeline
(``pipe=``, from :meth:`JobStore.pipeline`) so that one scheduling decision costs one round
trip. The key layout lives in :mod:`keys`, the record formats in :mod:`codec`.
"""

from __future__ import annotations

import base64
import json
import logging
import secrets
import time
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence

import redis

from crossdock.backends.redis_store import connect, scripts
from crossdock.backends.redis_store.access import AccessRecords
from crossdock.backends.redis_store.autoscale import AutoscaleRecords
from crossdock.backends.redis_store.codec import (ATTEMPT_FIELDS, STORE_FORMAT, encode, encode_fields,
                                                  facts_from_record, hash_to_job, history_record, job_to_hash,
                                                  nodes_from_json, nodes_to_json)
from crossdock.backends.redis_store.descheduler import DeschedulerRecords
from crossdock.backends.redis_store.job_events import FIRST, event_json, in_order, queue_job_event
from crossdock.backends.redis_store.keys import Keys
from crossdock.backends.redis_store.liveconfig import ConfigRecords
from crossdock.backends.redis_store.sealing import ENV, SpecSeals
from crossdock.backends.redis_store.services import ServiceStore
from crossdock.backends.redis_store.timing import RoundTrip, timed_client
from crossdock.backends.redis_store import durability
from crossdock.backends.redis_store.unavailable import answering
from crossdock.queue.bounds import JobCounts
from crossdock.queue.errors import InvalidArgument, LeaseLost, NoSuchJob, StoreUnavailable
from crossdock.queue.jobstore import DISPATCHER_TTL_SECONDS, REQUEUE_CLEARED, StopRequest, assign_ids
from crossdock.queue.models import ATTEMPTS_KEPT, REQUEUED, Job
from crossdock.queue.reconcile import Preempted, Requeue, Settle, Update
from crossdock.queue.snapshot import JobFacts, Node
from crossdock.queue.states import TRANSITIONS, JobState, Reason

log = logging.getLogger(__name__)

STREAM_MAXLEN = 10_000
CLAIM_TTL_SECONDS = 7 * 86400
IDEMPOTENCY_TTL_S = 7 * 86400
_PLACED = (JobState.SCHEDULED, JobState.RUNNING)

def probe(url: str, timeout: float = 1.0) -> str | None:
    """None when the Redis at ``url`` answers within ``timeout`` s, else why not (one try, no retries:
    redis-py's default retries take ~5 s to say that a socket is missing)."""
    client = connect.client(url, socket_timeout=timeout, socket_connect_timeout=timeout, retries=0)
    try:
        client.ping()
        return None
    except (StoreUnavailable, OSError) as exc:  # MasterNotFoundError is a ConnectionError
        cause = exc.__cause__ or exc
        return f"{type(cause).__name__}: {cause}"
    finally:
        client.close()


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


def _allowed_from(new: JobState) -> str:
    return " ".join(old for old, targets in TRANSITIONS.items() if new in targets)


@dataclass(frozen=True)
class CancelOutcome:
    job_id: int
    cancelled_now: bool
    """True when the job was pending and is CANCELLED already; False when a backend must act."""
    state: JobState
    backend: str | None


@dataclass(frozen=True)
class Recorded:
    """What one change of :meth:`JobStore.record_statuses` did."""

    job_id: int
    state: JobState | None
    """The state the change moves the job to; None for an :class:`Update` (fields only)."""
    moved: bool
    """The job was where the change expects it (its state, its attempt): it moved, or a field was set."""
    was: str = ""
    """The state it was in (a transition's)."""


def _installation_record(legacy: bool) -> str:
    return json.dumps({"id": secrets.token_hex(6), "legacy": legacy})


class JobStore:
    def __init__(self, client: redis.Redis, prefix: str = "cd", actor: str = "crossdock",
                 seals: SpecSeals | None = None):
        self.r = answering(client)
        """Raises ``StoreUnavailable`` for a Redis that is away (:mod:`.unavailable`)."""
        self.k = Keys(prefix)
        self.actor = actor
        """Who this process acts as in events when a call names nobody."""
        self.seals = seals
        """Seals specs and encrypts environments at submit, opens them on read (:mod:`.sealing`);
        without it specs are stored as they are and :meth:`opened` refuses every one."""
        self._transition = self.r.register_script(scripts.TRANSITION)
        self._update_if = self.r.register_script(scripts.UPDATE_IF)
        self._lease = self.r.register_script(scripts.LEASE)
        self._release = self.r.register_script(scripts.RELEASE)
        self._archive = self.r.register_script(scripts.ARCHIVE)
        self._submit_script = self.r.register_script(scripts.SUBMIT)
        self.autoscale = AutoscaleRecords(self.r, self.k, STREAM_MAXLEN)
        """The autoscaler's state, last decisions and change events."""
        self.deschedule = DeschedulerRecords(self.r, self.k, STREAM_MAXLEN)
        """The descheduler's moves, reserved destinations and last plan."""
        self.services = ServiceStore(self.r, self.k, STREAM_MAXLEN, actor)
        """Inference services: records, replica jobs, endpoints, traffic samples, events."""
        self.access = AccessRecords(self.r, self.k, STREAM_MAXLEN)
        """The REST API's tokens and refusals."""
        self.live_config = ConfigRecords(self.r, self.k, STREAM_MAXLEN)
        """The admin config stored for the leader and the one in force, with their events."""

    @classmethod
    def from_url(cls, url: str, prefix: str = "cd", actor: str = "crossdock",
                 on_round_trip: RoundTrip | None = None, seals: SpecSeals | None = None,
                 timeout: float | None = None, retries: int | None = None) -> "JobStore":
        """``url``: a Redis server, or a master through Sentinel (:mod:`.connect`);
        ``on_round_trip``: called after every Redis round trip (command, seconds, succeeded);
        ``timeout``: seconds to connect and for each reply (None: wait as long as the OS does);
        ``retries``: immediate retries of a failed command (:func:`.connect.client`)."""
        options: dict[str, Any] = {"decode_responses": True, "retries": retries}
        if timeout is not None:
            options.update(socket_timeout=timeout, socket_connect_timeout=timeout)
        if on_round_trip is None:
            return cls(connect.client(url, **options), prefix, actor, seals)
        return cls(timed_client(url, on_round_trip, **options), prefix, actor, seals)

    def installation(self) -> tuple[str, bool]:
        """This store's identity, made once (random), and whether it also answers for jobs tagged
        before stores had one: true for a store whose first jobs an earlier release wrote (an
        upgrade), false for one that starts with it (its first submission makes it). A backend
        puts the identity in the tags of what it submits, so a store started afresh never takes
        an earlier store's jobs, still known to the backend, for its own."""
        raw = self.r.get(self.k.installation)
        if raw is None:  # none yet: a store that already holds jobs had them from an earlier release
            legacy = bool(self.r.exists(self.k.job_counter))
            self.r.set(self.k.installation, _installation_record(legacy), nx=True)
            raw = self.r.get(self.k.installation)
        record = json.loads(raw)
        return record["id"], record["legacy"]

    def durable_writes(self) -> dict[str, Any] | None:
        """``crossdock health``'s line for durable writes (:mod:`.durability`); None when the URL
        asks for none."""
        wanted = getattr(self.r, "durability", None)
        return None if wanted is None else durability.health(self.r, wanted)

    @contextmanager
    def pipeline(self, transaction: bool = False, lease: str | None = None) -> Iterator[Any]:
        """A pipeline for several store calls in one round trip (``transaction``: MULTI/EXEC).
        ``lease``: the lease key is WATCHed and read before MULTI, so the EXEC lands only if that
        holder held the lease throughout (a paused leader's late commit raises :class:`LeaseLost`)."""
        with self.r.pipeline(transaction=transaction or lease is not None) as pipe:
            if lease is None:
                yield pipe
                return
            pipe.watch(self.k.scheduler_lease)
            holder = pipe.get(self.k.scheduler_lease)
            if holder != lease:
                raise LeaseLost(f"{lease} does not hold the scheduler's lease ({holder or 'nobody'} does)")
            pipe.multi()
            try:
                yield pipe
            except redis.WatchError:
                raise LeaseLost(f"the scheduler's lease changed hands during {lease}'s transaction") from None

    # --- submit ----------------------------------------------------------------------------
    def submit(self, jobs: Sequence[Job], token: str | None = None, actor: str | None = None,
               admit: JobCounts | None = None) -> list[Job]:
        """Store new jobs atomically and give them ids. ``jobs`` carry id 0 (assigned here).

        An array is passed as its task jobs; they get consecutive ids and the first id is the
        array job id. With ``token``, a repeated submission returns the jobs first created; the
        token is the owners' own (another user's same token is another submission). ``admit``
        (``max_submit_jobs``) counts each owner's jobs pending or running in the step that stores
        the jobs, and refuses before anything is stored. One script stores it all, so concurrent
        submissions of one owner queue in Redis instead of retrying on each other's writes. A
        store that does not answer raises :class:`StoreUnavailable`; whether the jobs were stored
        is then unknown, and a retry with the same token settles it.
        """
        actor = actor or self.actor
        owners = sorted({j.spec.user for j in jobs})
        idem = self.k.idempotency(",".join(owners), token) if token else None
        try:
            return self._submit(jobs, owners, idem, token, actor, admit)
        except StoreUnavailable as exc:
            raise type(exc)(f"{exc} (a submission retried with the same idempotency token is stored once)"
                            ) from exc.__cause__

    def _submit(self, jobs: Sequence[Job], owners: Sequence[str], idem: str | None, token: str | None, actor: str,
                admit: JobCounts | None) -> list[Job]:
        if idem and (first := self.r.get(idem)) is not None:  # a replay reserves no ids (the script checks again)
            return self._replayed(self._replay(idem, first), token or "")
        last = self.r.incrby(self.k.job_counter, len(jobs))
        stored = assign_ids(jobs, last - len(jobs) + 1)
        ids = json.dumps([j.id for j in stored])
        fresh = last == len(jobs)  # the store's first jobs: its format and identity are this release's
        keys = [idem or self.k.store_format, self.k.store_format, self.k.pending, self.k.active, self.k.all_jobs,
                self.k.events, self.k.installation, *(self.k.user_jobs(o) for o in owners)]
        args: list[Any] = [1 if idem else 0, IDEMPOTENCY_TTL_S, ids, STORE_FORMAT if fresh else "",
                           STREAM_MAXLEN, "" if admit is None else admit.most, len(owners),
                           _installation_record(legacy=False) if fresh else "",
                           *(admit.adding.get(o, 0) if admit else 0 for o in owners)]
        self._new_jobs(stored, actor, {o: i + 1 for i, o in enumerate(owners)}, keys, args)
        answer = self._submit_script(keys=keys, args=args)
        if int(answer[0]) == 0:
            return self._replayed(json.loads(answer[1]), token or "")
        if int(answer[0]) == 2:
            assert admit is not None
            admit.check(dict(zip(owners, (int(n) for n in answer[1:]))))
            raise AssertionError("the submit script refused a submission within the job limit")
        return stored

    def _replay(self, idem: str, first: str) -> list[int]:
        # a write (the token's lease renewed): under durable writes its WAIT also covers the
        # first submission, which may not have reached a replica yet
        self.r.expire(idem, IDEMPOTENCY_TTL_S)
        return json.loads(first)

    def _replayed(self, ids: list[int], token: str) -> list[Job]:
        """The jobs a token first stored; refused once they left the hot keys (archived)."""
        jobs = self.get_many(ids)
        if len(jobs) < len(ids):
            shown = ", ".join(str(i) for i in ids[:5]) + (", …" if len(ids) > 5 else "")
            raise InvalidArgument(f"idempotency token {token[:80]!r}: the jobs it stored ({shown}) have finished and"
                                  " moved to history (crossdock history); use a new token")
        return jobs

    def _new_jobs(self, jobs: Sequence[Job], actor: str, owner_no: Mapping[str, int], keys: list[str],
                  args: list[Any]) -> None:
        """Each job's keys and arguments for the submit script (:data:`scripts.SUBMIT`)."""
        now = time.time()
        for job in jobs:
            ev = {"event": "submitted", "actor": actor, "to": job.state.value, "time": now}
            sealed = self.seals.fields(job) if self.seals is not None else {}
            fields = {**job_to_hash(job, sealed.get("spec")), **sealed, FIRST: event_json(ev, now)}
            array = job.array_job_id is not None
            keys += [self.k.job(job.id), self.k.by_name(job.spec.user, job.spec.display_name()),
                     self.k.array(job.array_job_id) if array else self.k.job(job.id)]
            args += [job.id, owner_no[job.spec.user], (job.array_task_id or 0) if array else "",
                     2 * len(fields), *(x for kv in fields.items() for x in kv),
                     2 * len(ev), *(x for kv in ev.items() for x in kv)]

    # --- read ------------------------------------------------------------------------------
    def get(self, job_id: int) -> Job:
        h = self.r.hgetall(self.k.job(job_id))
        if not h:
            raise NoSuchJob(job_id)
        return self._job(job_id, h)

    def get_many(self, ids: Iterable[int]) -> list[Job]:
        return [job for job, _h in self._read(ids)]

    def opened(self, ids: Iterable[int]) -> list[tuple[Job, str]]:
        """The jobs to run, each with why it must not run ("" when its spec's seal verifies): what
        a backend is handed is what was checked, from one read."""
        return [(job, self.seals.refusal(job.id, h, job.spec.user) if self.seals is not None
                 else f"job {job.id}: this process has no keys to check its spec's seal; refusing to run it")
                for job, h in self._read(ids)]

    def _read(self, ids: Iterable[int]) -> list[tuple[Job, dict[str, str]]]:
        ids = list(ids)
        with self.r.pipeline(transaction=False) as pipe:
            for i in ids:
                pipe.hgetall(self.k.job(i))
            rows = pipe.execute()
        return [(self._job(i, h), h) for i, h in zip(ids, rows) if h]

    def _job(self, job_id: int, h: dict[str, str]) -> Job:
        if self.seals is None or not h.get(ENV):
            return hash_to_job(job_id, h)
        return hash_to_job(job_id, h, self.seals.spec(h["spec"], job_id, h[ENV]))

    def array_tasks(self, ids: Sequence[int]) -> tuple[list[Job], str]:
        """Tasks of one array: the first SCHEDULED one read whole, the others as copies of it
        with their own id, task id, state and attempt (one group is one submission of one spec:
        a Slurm array has one script). Avoids parsing one spec per task of a 1,000-task array.
        With them, why they must not run ("" when the first one's seal verifies: :meth:`opened`)."""
        fields = ("state", "attempts", "array_job_id", "array_task_id")
        with self.r.pipeline(transaction=False) as pipe:
            for i in ids:
                pipe.hmget(self.k.job(i), *fields)
            rows = pipe.execute()
        found = [(i, row) for i, row in zip(ids, rows) if row[0]]
        lead_id = next((i for i, row in found if row[0] == JobState.SCHEDULED.value), None)
        if lead_id is None:
            return [], ""
        opened = self.opened([lead_id])
        if not opened:
            return [], ""
        [(lead, refusal)] = opened
        return [lead.model_copy(update={"id": i, "state": JobState(st), "attempts": int(att or 0),
                                        "array_job_id": int(arr) if arr else None,
                                        "array_task_id": int(task) if task else None})
                for i, (st, att, arr, task) in found], refusal

    def pending_ids(self) -> list[int]:
        return [int(i) for i in self.r.zrange(self.k.pending, 0, -1)]

    def pending_count(self) -> int:
        return int(self.r.zcard(self.k.pending))

    def queue_counts(self) -> tuple[int, int]:
        """(pending, active) in one round trip: the leader's idle loop watches both."""
        with self.r.pipeline(transaction=False) as pipe:
            pipe.zcard(self.k.pending)
            pipe.zcard(self.k.active)
            pending, active = pipe.execute()
        return int(pending), int(active)

    def active_ids(self) -> list[int]:
        return [int(i) for i in self.r.zrange(self.k.active, 0, -1)]

    def unfinished_count(self) -> int:
        """Jobs pending, scheduled or running."""
        with self.r.pipeline(transaction=False) as pipe:
            pipe.zcard(self.k.pending)
            pipe.zcard(self.k.active)
            return sum(int(n) for n in pipe.execute())

    def backlog(self) -> dict[str, int]:
        """Jobs pending, scheduled or running, per queue: what a queue's replicas have to work
        through (autoscaling's metric, counted as ``keda.backlog`` counts it: held jobs need no
        replica). One round trip for the ids, one for their queues and reasons."""
        with self.r.pipeline(transaction=False) as pipe:
            pipe.zrange(self.k.pending, 0, -1)
            pipe.zrange(self.k.active, 0, -1)
            pending, active = pipe.execute()
        with self.r.pipeline(transaction=False) as pipe:
            for i in (*pending, *active):
                pipe.hmget(self.k.job(int(i)), "queue", "state", "reason")
            rows = pipe.execute()
        held = {Reason.JOB_HELD_USER.value, Reason.JOB_HELD_ADMIN.value}
        counts: dict[str, int] = {}
        for queue, state, reason in rows:
            if queue is None:  # a job removed between the two round trips
                continue
            if state == JobState.PENDING.value and reason in held:
                continue
            counts[queue] = counts.get(queue, 0) + 1
        return counts

    def all_ids(self, limit: int | None = None) -> list[int]:
        end = -1 if limit is None else limit - 1
        return [int(i) for i in self.r.zrevrange(self.k.all_jobs, 0, end)][::-1]

    def ids_after(self, after: int, count: int) -> list[int]:
        """Up to ``count`` stored job ids above ``after``, ascending: a listing of every job pages
        through the index with it instead of reading it whole (or capping it). Paged by id (the
        score), so jobs expiring meanwhile shift nothing."""
        return [int(i) for i in self.r.zrangebyscore(self.k.all_jobs, f"({after}", "+inf", start=0, num=count)]

    def array_ids(self, array_job_id: int) -> list[int]:
        return [int(i) for i in self.r.zrange(self.k.array(array_job_id), 0, -1)]

    def ids_by_name(self, user: str, name: str) -> list[int]:
        return [int(i) for i in self.r.zrange(self.k.by_name(user, name), 0, -1)]

    def resolve(self, ref: str) -> list[int]:
        """Job ids named by ``ref``: ``12`` (a job, or a whole array), ``12_3`` (one array task)."""
        text = str(ref).strip()

        def number(t: str) -> bool:  # ASCII only: '١٢'.isdigit() is True, and int() reads it as 12
            return t.isascii() and t.isdigit() and len(t) <= 18

        if "_" in text:
            head, _, task = text.partition("_")
            if not number(head) or not number(task):
                raise NoSuchJob(ref)
            ids = [j.id for j in self.get_many(self.array_ids(int(head))) if j.array_task_id == int(task)]
        elif number(text):
            ids = self.array_ids(int(text)) or ([int(text)] if self.r.exists(self.k.job(int(text))) else [])
        else:
            raise NoSuchJob(ref)
        if not ids:
            raise NoSuchJob(ref)
        return ids

    def events(self, job_id: int | None = None, count: int = 1000) -> list[dict[str, str]]:
        """The oldest ``count`` events, of one job or of all; each with its ``id`` (``<ms>-<n>``)."""
        key = self.k.events if job_id is None else self.k.job_events(job_id)
        if job_id is not None and self.r.type(key) != "stream":  # a job's events are a list of JSON
            return self._job_list(job_id)[:count]
        return [{"id": eid, **fields} for eid, fields in self.r.xrange(key, count=count)]

    def read_events(self, job_id: int | None = None, *, since: float | None = None, after: str | None = None,
                    count: int = 1000, block_ms: int | None = None) -> list[dict[str, str]]:
        """Events of the global stream (``job_id`` None) or of one job, oldest first, each with its
        stream ``id``: after the event ``after`` (exclusive), else from ``since`` (epoch seconds),
        else the last ``count``. ``block_ms`` (with ``after``): wait that long for a first new one."""
        key = self.k.events if job_id is None else self.k.job_events(job_id)
        if job_id is not None and self.r.type(key) != "stream":
            return self._read_job_list(job_id, since=since, after=after, count=count, block_ms=block_ms)
        if after is not None and block_ms is not None:
            got = self.r.xread({key: after}, count=count, block=block_ms)
            rows = got[0][1] if got else []
        elif after is not None:
            rows = self.r.xrange(key, min=f"({after}", count=count)
        elif since is not None:
            rows = self.r.xrange(key, min=f"{max(int(since * 1000), 0)}-0", count=count)
        else:
            rows = list(reversed(self.r.xrevrange(key, count=count)))
        return [{"id": eid, **fields} for eid, fields in rows]

    def _job_list(self, job_id: int) -> list[dict[str, str]]:
        with self.r.pipeline(transaction=False) as pipe:
            pipe.hget(self.k.job(job_id), FIRST)
            pipe.lrange(self.k.job_events(job_id), 0, -1)
            first, rest = pipe.execute()
        return in_order(first, rest)

    def _read_job_list(self, job_id: int, *, since: float | None, after: str | None, count: int,
                       block_ms: int | None) -> list[dict[str, str]]:
        """``read_events`` over a job's list: ordered by position (ids of one millisecond repeat in
        lists stored before ids counted on); ``block_ms`` polls, since a job's events are few and far between."""
        deadline = time.monotonic() + (block_ms or 0) / 1000
        while True:
            events = self._job_list(job_id)
            if after is not None:
                seen = [i for i, e in enumerate(events) if e.get("id") == after]
                events = events[seen[-1] + 1:] if seen else [e for e in events if _id(e) > _id({"id": after})]
            elif since is not None:
                events = [e for e in events if _ms(e) >= since * 1000]
            else:
                events = events[-count:]
            if events or after is None or block_ms is None or time.monotonic() >= deadline:
                return events[:count]
            time.sleep(min(0.2, max(deadline - time.monotonic(), 0)))

    # --- state changes ---------------------------------------------------------------------
    def transition(self, job_id: int, new: JobState, *, fields: dict[str, Any] | None = None, actor: str = "",
                   reason: str = "", attempt: int | None = None, unless: str = "", bump_attempt: bool = False,
                   only_from: Iterable[JobState] | None = None, ends_attempt: bool = False,
                   ended_as: tuple[str, str] | None = None, pipe: Any = None) -> Any:
        """Move a job to ``new`` if the transition table allows it from its current state (and,
        with ``only_from``, only from one of those states). With ``ends_attempt`` (a requeue), the
        run it ends is kept in the job's ``past_attempts`` first, in the same step: it ended in the
        old state, for this transition's reason, unless ``ended_as`` (state, reason) says otherwise.

        Returns True/False (or queues the call on ``pipe``, whose result is ``[1|0, old]``).
        """
        allowed = _allowed_from(new)
        if only_from is not None:
            narrowed = {s.value for s in only_from}
            allowed = " ".join(s for s in allowed.split() if s in narrowed)
        values = encode_fields(fields or {})
        if reason:
            values["reason"] = reason
        event = {"actor": actor or self.actor, "reason": reason, "time": time.time()}
        keys = [self.k.job(job_id), self.k.pending, self.k.active, self.k.job_events(job_id), self.k.events,
                self.k.finished]
        args = [job_id, new.value, allowed, json.dumps(values), json.dumps(event), STREAM_MAXLEN,
                "" if attempt is None else str(attempt), unless, "1" if bump_attempt else "0",
                "1" if new.terminal else "0", event["time"], _ended(ends_attempt, ended_as), ATTEMPTS_KEPT,
                " ".join(ATTEMPT_FIELDS)]
        if pipe is not None:
            return self._transition(keys=keys, args=args, client=pipe)
        moved, old = self._transition(keys=keys, args=args)
        if moved:
            log.info("job %s: %s -> %s %s", job_id, old, new.value, reason)
        return bool(moved)

    def update_if(self, job_id: int, states: Iterable[JobState], fields: dict[str, Any], pipe: Any = None) -> Any:
        """Set job fields only while the job is in one of ``states`` (True when it was)."""
        args = [" ".join(s.value for s in states), json.dumps(encode_fields(fields))]
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

    def set_backend_refs(self, refs: dict[int, str]) -> None:
        """Record each submitted job's backend reference (one round trip)."""
        with self.r.pipeline(transaction=False) as pipe:
            for job_id, ref in refs.items():
                self.update_if(job_id, _PLACED, {"backend_ref": ref}, pipe=pipe)
            pipe.execute()

    def cancel(self, job_id: int, actor: str = "") -> CancelOutcome:
        """Cancel a pending job at once; mark a placed one for its backend to stop."""
        if self.transition(job_id, JobState.CANCELLED, actor=actor, reason=Reason.CANCELLED_BY_USER,
                           fields={"end_time": utcnow()}, unless="dispatched"):
            return CancelOutcome(job_id, True, JobState.CANCELLED, None)
        job = self.get(job_id)
        if job.state.terminal:
            return CancelOutcome(job_id, False, job.state, None)
        self.update_if(job_id, (*_PLACED, JobState.PREEMPTED), {"cancel_requested": True})
        return CancelOutcome(job_id, False, job.state, job.backend)

    def request_preempt(self, job_id: int, grace_seconds: float, pipe: Any = None) -> Any:
        """Mark a placed job as being preempted: its capacity counts as terminating from now on,
        and what still runs ``grace_seconds`` from now is stopped (``preempt_deadline``). The
        backend calls it again when it signals the job, so the grace is counted from the signal."""
        deadline = datetime.fromtimestamp(time.time() + grace_seconds, timezone.utc)
        return self.update_if(job_id, _PLACED, {"preempt_requested": True, "preempt_grace": grace_seconds,
                                                "preempt_deadline": deadline}, pipe=pipe)

    def settle_preempted(self, job_id: int, requeue: bool, actor: str = "", reason: str = Reason.PREEMPTED, *,
                         attempt: int | None = None, cancelled: bool | None = None, pipe: Any = None) -> int:
        """Move a PREEMPTED job on, the one place every backend's preemption ends: back to PENDING
        for a new attempt when its spec allows ``requeue``, else CANCELLED with the preemption's
        reason; a user's cancel (``cancelled``, read here when not given) wins: CANCELLED,
        CancelledByUser. Two guarded steps, of which at most one moves the job, so that they can
        be queued on ``pipe`` behind the PREEMPTED transition (one MULTI: no end without its next
        step) and replayed. Returns how many commands it queued (it runs them when ``pipe`` is None)."""
        if cancelled is None:
            stop = self.stop_request(job_id)
            cancelled = stop is not None and stop.cancel
        own = pipe is None
        client = self.r.pipeline(transaction=True) if own else pipe
        queued = 0
        if requeue and not cancelled:
            # an attempt the descheduler evicted goes back as Migrated (its event says from where and why)
            moved = attempt is not None and self.deschedule.moved_attempt(job_id) == attempt
            self.requeue(job_id, actor=actor, reason=Reason.MIGRATED if moved else Reason.PREEMPTED,
                         unless="cancel_requested", attempt=attempt, only_from=(JobState.PREEMPTED,), pipe=client)
            queued += 1
        why = Reason.CANCELLED_BY_USER if cancelled else reason
        self.transition(job_id, JobState.CANCELLED, actor=actor, reason=why, fields={"end_time": utcnow()},
                        attempt=attempt, only_from=(JobState.PREEMPTED,), pipe=client)
        if own:
            client.execute()
            client.reset()
        return queued + 1

    def record_statuses(self, changes: Sequence[Settle | Update], actor: str,
                        lease: str | None = None) -> list[Recorded]:
        """Record what a backend's status pass reported (the follower's plan, ``crossdock.queue.
        reconcile``) in one MULTI, each state change with its next step: a pass cut short by a
        store outage lands whole or not at all, so no end lands without its requeue. Every step is
        guarded by the job's state and attempt (a replay moves nothing). One result per change."""
        if not changes:
            return []
        spans: list[tuple[int, int, int | None]] = []  # each change's commands, and its transition's
        with self.pipeline(transaction=True, lease=lease) as pipe:
            for change in changes:
                start = len(pipe)
                moved_at = self._queue_status(change, actor, pipe)
                spans.append((start, len(pipe), moved_at))
            results = pipe.execute()
        out = []
        for change, (start, end, moved_at) in zip(changes, spans):
            if moved_at is None:
                out.append(Recorded(change.job.id, None, any(results[start:end])))
            else:
                moved, was = results[moved_at]
                out.append(Recorded(change.job.id, change.state, bool(moved), was or ""))
        return out

    def _queue_status(self, change: Settle | Update, actor: str, pipe: Any) -> int | None:
        """Queue one change on ``pipe``; the position of its transition's result (None: an update)."""
        job = change.job
        if change.ref:  # the dispatch's record of it was lost (a store outage)
            self.update_if(job.id, _PLACED, {"backend_ref": change.ref}, pipe=pipe)
        if isinstance(change, Update):
            if change.reason:
                self.update_if(job.id, (JobState.SCHEDULED,), {"reason": change.reason}, pipe=pipe)
            return None
        fields: dict[str, Any] = {"exit_code": change.exit_code, "nodes": list(change.nodes)}
        if change.signal is not None:
            fields["signal"] = change.signal
        if change.started is not None:
            fields["start_time"] = change.started
        if change.ended is not None:
            fields["end_time"] = change.ended
        moved_at = len(pipe)
        self.transition(job.id, change.state, fields=fields, reason=change.reason, actor=actor, attempt=job.attempts,
                        ends_attempt=change.again, ended_as=(REQUEUED, "Requeued") if change.again else None,
                        pipe=pipe)
        if isinstance(change.then, Preempted):
            self.settle_preempted(job.id, change.then.requeue, actor=actor, reason=change.reason,
                                  attempt=job.attempts, cancelled=change.then.cancelled, pipe=pipe)
        elif isinstance(change.then, Requeue):
            self.requeue(job.id, actor=actor, reason=change.then.reason, attempt=job.attempts,
                         unless="cancel_requested", only_from=(JobState.NODE_FAIL,), pipe=pipe)
        return moved_at

    def stop_requests(self, ids: Sequence[int]) -> dict[int, StopRequest]:
        """The cancel or preempt requests standing on these jobs (jobs with none are absent)."""
        with self.r.pipeline(transaction=False) as pipe:
            for i in ids:
                pipe.hmget(self.k.job(i), "cancel_requested", "preempt_requested", "preempt_grace")
            rows = pipe.execute()
        return {i: StopRequest(cancel == "1", preempt == "1", float(grace) if grace else None)
                for i, (cancel, preempt, grace) in zip(ids, rows) if cancel == "1" or preempt == "1"}

    def stop_request(self, job_id: int) -> StopRequest | None:
        return self.stop_requests([job_id]).get(job_id)

    def retry_dispatch(self, job_id: int) -> bool:
        """Restart the resend clock of a SCHEDULED job whose dispatch is being sent again."""
        return bool(self.update_if(job_id, (JobState.SCHEDULED,), {"scheduled_time": utcnow()}))

    def hold(self, job_id: int, hold: bool, actor: str = "") -> bool:
        """Set or clear a PENDING job's hold flag."""
        return self.amend(job_id, {"hold": True if hold else None},
                          reason=Reason.JOB_HELD_USER if hold else Reason.NONE)

    def amend(self, job_id: int, changes: dict[str, Any], reason: str | None = None, actor: str = "",
              note: str = "") -> bool:
        """Change fields of a PENDING job's spec (``None`` removes one: its default), and its
        reason when given; False when the job is not PENDING. Only those fields change: the rest
        of the spec stays byte for byte as stored (it is never rebuilt from a model a caller
        could hand in). With ``note``, the change is noted in the job's events as ``actor``'s."""
        key = self.k.job(job_id)
        with self.r.pipeline() as pipe:
            while True:
                try:
                    pipe.watch(key)
                    state, raw = pipe.hmget(key, "state", "spec")
                    if state != JobState.PENDING.value or raw is None:
                        return False
                    spec = json.loads(raw)
                    for name, value in changes.items():
                        if value is None:
                            spec.pop(name, None)
                        else:
                            spec[name] = value
                    mapping = {"spec": json.dumps(spec, separators=(",", ":"), ensure_ascii=False)}
                    if reason is not None:
                        mapping["reason"] = reason
                    pipe.multi()
                    pipe.hset(key, mapping=mapping)
                    pipe.execute()
                    break
                except redis.WatchError:
                    continue
        if note:
            self.record_note(job_id, "updated", actor, action=note)
        return True

    def record_refusal(self, job_id: int, actor: str, action: str) -> None:
        """Note in the job's events (and the global stream) that ``actor`` was refused ``action``."""
        self.record_note(job_id, "refused", actor, action=action)

    def record_note(self, job_id: int, event: str, actor: str, **fields: str | int | float) -> None:
        """Note ``event`` by ``actor`` in the job's events and the global stream, with no state
        change (a refusal; a preemption asked for, naming its preemptor)."""
        now = time.time()
        ev = {"event": event, "actor": actor, **fields, "time": now}
        with self.r.pipeline(transaction=False) as pipe:
            queue_job_event(self.r, pipe, self.k, job_id, ev, STREAM_MAXLEN, now=now)
            pipe.xadd(self.k.events, {"job": job_id, **ev}, maxlen=STREAM_MAXLEN, approximate=True)
            pipe.execute()

    def requeue(self, job_id: int, actor: str = "", reason: str = "Requeued", delay_seconds: float = 0, *,
                unless: str = "", attempt: int | None = None, only_from: Iterable[JobState] | None = None,
                pipe: Any = None) -> Any:
        """Back to PENDING for a new attempt (placement and stop fields cleared). ``unless`` names a
        field that must be unset (a user's cancel); ``attempt`` and ``only_from`` make a follow-up
        requeue safe to queue behind the transition it follows (in one MULTI) and to replay: it
        moves nothing once the job has moved on."""
        eligible = datetime.fromtimestamp(utcnow().timestamp() + delay_seconds, timezone.utc) if delay_seconds else None
        fields = {**dict.fromkeys(REQUEUE_CLEARED), "eligible_time": eligible}
        return self.transition(job_id, JobState.PENDING, fields=fields,
                               actor=actor, reason=reason, unless=unless, attempt=attempt, only_from=only_from,
                               ends_attempt=True, pipe=pipe)

    # --- dispatch bookkeeping --------------------------------------------------------------
    def claim_dispatch(self, ids: Sequence[int], attempt: int, worker: str,
                       reown: bool = False) -> tuple[list[int], bool]:
        """The ids whose dispatch of ``attempt`` this worker owns, and whether every one was claimed
        just now. The first delivery of a dispatch wins; a later one (a resend, a duplicate) gets
        nothing — unless ``reown``: the very same task (same ``worker`` id) delivered again after
        its worker died keeps its claims, for backends whose submit finds what it already started.
        Three round trips for any number of jobs."""
        keys = [self.k.dispatch_claim(i, attempt) for i in ids]
        with self.r.pipeline(transaction=False) as pipe:
            pipe.set(self.k.dispatcher(worker), "1", px=int(DISPATCHER_TTL_SECONDS * 1000))
            for key in keys:
                pipe.set(key, worker, nx=True, ex=CLAIM_TTL_SECONDS)
            got = pipe.execute()[1:]
        with self.r.pipeline(transaction=False) as pipe:
            for key in keys:
                pipe.get(key)
            holders = pipe.execute()
        mine = [i for i, new, holder in zip(ids, got, holders) if new or (reown and holder == worker)]
        now = utcnow()
        with self.r.pipeline(transaction=False) as pipe:
            for i in mine:
                self.update_if(i, (JobState.SCHEDULED,), {"dispatched": now}, pipe=pipe)
            pipe.execute()
        return mine, all(got)

    def release_claims(self, ids: Sequence[int], attempt: int) -> None:
        """Free the claims so a retry may submit (the backend's own idempotency covers a
        submission that did reach it before the error)."""
        with self.r.pipeline(transaction=False) as pipe:
            for i in ids:
                pipe.delete(self.k.dispatch_claim(i, attempt))
                self.update_if(i, (JobState.SCHEDULED,), {"reason": Reason.DISPATCH_RETRY, "dispatched": None},
                               pipe=pipe)
            pipe.execute()

    def dispatch_claimed(self, job_id: int, attempt: int) -> bool:
        return bool(self.r.exists(self.k.dispatch_claim(job_id, attempt)))

    def dispatcher_alive(self, job_id: int, attempt: int) -> bool:
        """Whether the task that claimed this dispatch still refreshes its liveness (False when
        nobody claimed it)."""
        holder = self.r.get(self.k.dispatch_claim(job_id, attempt))
        return bool(holder) and bool(self.r.exists(self.k.dispatcher(holder)))

    def dispatching(self, worker: str, alive: bool = True) -> None:
        """Refresh (or, with ``alive=False``, drop) the liveness of dispatch task ``worker``."""
        if alive:
            self.r.set(self.k.dispatcher(worker), "1", px=int(DISPATCHER_TTL_SECONDS * 1000))
        else:
            self.r.delete(self.k.dispatcher(worker))

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

    def append_output(self, job_id: int, chunks: Sequence[str], ttl: int = 7 * 86400) -> None:
        """Append what a Python job printed (one round trip)."""
        if not chunks:
            return
        key = self.k.output(job_id)
        with self.r.pipeline(transaction=True) as pipe:
            pipe.rpush(key, *chunks)
            pipe.expire(key, ttl)
            pipe.execute()

    def output(self, job_id: int, start: int = 0) -> list[str] | None:
        """A Python job's kept output from chunk ``start`` on; None when none was ever kept."""
        key = self.k.output(job_id)
        with self.r.pipeline(transaction=False) as pipe:
            pipe.exists(key)
            pipe.lrange(key, start, -1)
            kept, chunks = pipe.execute()
        return chunks if kept else None

    def set_checkpoint(self, job_id: int, sealed: bytes, ttl: int = 7 * 86400) -> None:
        self.r.set(self.k.checkpoint(job_id), sealed.hex(), ex=ttl)

    def checkpoint(self, job_id: int) -> bytes | None:
        v = self.r.get(self.k.checkpoint(job_id))
        return bytes.fromhex(v) if v else None

    def put_call_parts(self, ref: str, parts: Mapping[str, bytes], ttl: int = 7 * 86400) -> None:
        """Store one ``map``'s sealed parts (``fn``, and one field per task id)."""
        key = self.k.call_parts(ref)
        with self.r.pipeline(transaction=True) as pipe:
            pipe.hset(key, mapping={k: base64.b64encode(v).decode() for k, v in parts.items()})
            pipe.expire(key, ttl)
            pipe.execute()

    def call_parts(self, ref: str, *fields: str) -> list[bytes | None]:
        values = self.r.hmget(self.k.call_parts(ref), list(fields))
        return [base64.b64decode(v) if v else None for v in values]

    def call_parts_size(self, ref: str) -> tuple[int, int]:
        """(fields, bytes) of one ``map``'s parts as Redis holds them (``MEMORY USAGE``), for measurements."""
        key = self.k.call_parts(ref)
        return int(self.r.hlen(key)), int(self.r.memory_usage(key, samples=0) or 0)

    def used_memory(self) -> int:
        """Bytes the Redis server holds (``INFO memory``'s ``used_memory``), for measurements."""
        return int(self.r.info("memory")["used_memory"])

    # --- the scheduler's own records -------------------------------------------------------
    def nominations(self, among: Iterable[int]) -> dict[int, str]:
        """Preemptor job id → the node being freed for it, for the jobs ``among``."""
        wanted = set(among)
        return {int(k): v for k, v in self.r.hgetall(self.k.nominations).items() if int(k) in wanted}

    def update_nominations(self, done: Iterable[int], nominated: dict[int, str], pipe: Any = None) -> None:
        done = list(done)
        client = pipe or self.r
        if done:
            client.hdel(self.k.nominations, *done)
        if nominated:
            client.hset(self.k.nominations, mapping={str(k): v for k, v in nominated.items()})

    def save_expected_starts(self, starts: dict[int, tuple[datetime, Sequence[str]]], pipe: Any = None) -> None:
        """The last cycle's reservations, replacing the previous ones: job id -> (start, nodes)."""
        client = pipe if pipe is not None else self.r
        client.delete(self.k.expected_starts)
        if starts:
            client.hset(self.k.expected_starts, mapping={str(k): f"{t.timestamp()}|{','.join(nodes)}"
                                                         for k, (t, nodes) in starts.items()})

    def expected_starts(self, among: Iterable[int]) -> dict[int, tuple[datetime, list[str]]]:
        """When and where the scheduler last planned to start these pending jobs (backfill's reservations)."""
        ids = [int(i) for i in among]
        if not ids:
            return {}
        out = {}
        for i, raw in zip(ids, self.r.hmget(self.k.expected_starts, ids)):
            if raw:
                at, _, nodes = raw.partition("|")
                out[i] = (datetime.fromtimestamp(float(at), timezone.utc), [n for n in nodes.split(",") if n])
        return out

    def usage(self) -> tuple[dict[str, float], float | None]:
        """Decayed fair-share usage per queue and queue/user, and when it was last accrued."""
        raw = self.r.hgetall(self.k.usage)
        at = raw.pop("_at", None)
        return {k: float(v) for k, v in raw.items()}, float(at) if at is not None else None

    def save_usage(self, usage: dict[str, float], at: float) -> None:
        self.r.hset(self.k.usage, mapping={**usage, "_at": at})

    def save_inventory(self, nodes: Sequence[Node]) -> None:
        self.r.set(self.k.inventory, nodes_to_json(nodes))

    def inventory(self) -> list[Node] | None:
        """Nodes as the scheduler last saw them; None before it ever ran."""
        raw = self.r.get(self.k.inventory)
        return None if raw is None else nodes_from_json(raw)

    # --- retention -------------------------------------------------------------------------
    def expire_finished(self, min_age_seconds: float, history_seconds: float, batch: int = 500) -> int:
        """Move jobs finished more than ``min_age_seconds`` ago (Slurm's MinJobAge) out of the hot
        keys into compact history records, and drop history older than ``history_seconds``.
        Returns how many jobs moved. Each move is atomic and re-checks that the job is still the
        same finished attempt, so a job requeued meanwhile stays."""
        now = time.time()
        moved = 0
        while True:
            ids = [int(i) for i in self.r.zrangebyscore(self.k.finished, "-inf", now - min_age_seconds,
                                                         start=0, num=batch)]
            if not ids:
                break
            jobs = {j.id: j for j in self.get_many(ids)}
            with self.r.pipeline(transaction=False) as pipe:
                for i in ids:
                    job = jobs.get(i)
                    if job is None or not job.state.terminal:  # gone, or requeued since: not ours to move
                        pipe.zrem(self.k.finished, i)
                        continue
                    array = self.k.array(job.array_job_id) if job.array_job_id is not None else self.k.array(-1)
                    self._archive(keys=[self.k.job(i), self.k.job_events(i), self.k.all_jobs,
                                        self.k.by_name(job.spec.user, job.spec.display_name()), array,
                                        self.k.history, self.k.history_by_end, self.k.finished,
                                        self.k.user_jobs(job.spec.user)],
                                  args=[i, job.state.value, job.attempts, json.dumps(history_record(job)),
                                        (job.end_time.timestamp() if job.end_time else now)], client=pipe)
                moved += sum(1 for r in pipe.execute() if r == 1)
        old = self.r.zrangebyscore(self.k.history_by_end, "-inf", now - history_seconds)
        for start in range(0, len(old), 1000):
            with self.r.pipeline(transaction=True) as pipe:
                pipe.hdel(self.k.history, *old[start:start + 1000])
                pipe.zrem(self.k.history_by_end, *old[start:start + 1000])
                pipe.execute()
        return moved

    def history(self, since: float | None = None, until: float | None = None,
                limit: int | None = None) -> list[dict[str, Any]]:
        """Expired jobs' records, by end time (epoch seconds, inclusive bounds)."""
        ids = self.r.zrangebyscore(self.k.history_by_end, "-inf" if since is None else since,
                                   "+inf" if until is None else until, start=0 if limit else None,
                                   num=limit if limit else None)
        return [json.loads(v) for v in self.r.hmget(self.k.history, ids) if v] if ids else []

    def history_facts(self, ids: Iterable[int]) -> dict[int, JobFacts]:
        """Dependency facts of jobs that expired from the hot keys."""
        ids = list(ids)
        if not ids:
            return {}
        return {i: facts_from_record(json.loads(v)) for i, v in zip(ids, self.r.hmget(self.k.history, ids)) if v}

    # --- leadership ------------------------------------------------------------------------
    def acquire_lease(self, holder: str, seconds: float) -> bool:
        return bool(self._lease(keys=[self.k.scheduler_lease], args=[holder, int(seconds * 1000)]))

    def release_lease(self, holder: str) -> None:
        self._release(keys=[self.k.scheduler_lease], args=[holder])

    def ping(self) -> None:
        """Whether the store answers: ``StoreUnavailable`` when it does not."""
        self.r.ping()

    def lease_holder(self) -> str | None:
        return self.r.get(self.k.scheduler_lease)


def _ended(ends_attempt: bool, ended_as: tuple[str, str] | None) -> str:
    """The TRANSITION script's account of the run a requeue ends ("" when it ends none)."""
    if not ends_attempt:
        return ""
    over = {"state": ended_as[0], "reason": ended_as[1]} if ended_as else {}
    return json.dumps({"end_time": encode(utcnow()), **over})


def _id(event: dict[str, str]) -> tuple[int, int]:
    """An event id (``<ms>-<n>``) as numbers, in its order."""
    ms, _, n = str(event.get("id", "0")).partition("-")
    return int(ms or 0), int(n or 0)


def _ms(event: dict[str, str]) -> int:
    """The milliseconds of an event id (``<ms>-<n>``)."""
    return _id(event)[0]
