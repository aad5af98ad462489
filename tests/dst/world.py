"""The simulated world of :mod:`tests.dst.schedule`: one clock, a store that goes away, a fake
backend that errs, and a message bus that drops, duplicates and delays.

Nothing here reads the machine's clock or starts a thread: every time the code under test reads
is :class:`SimClock`'s, and every fault is drawn from the schedule's one ``random.Random``.
"""

from __future__ import annotations

import random
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Iterator, Sequence

from crossdock.backends.fake import CAPABILITIES
from crossdock.backends.fake.backend import FakeBackend
from crossdock.backends.memory_store.store import MemoryStore
from crossdock.backends.redis_store.store import JobStore
from crossdock.queue.errors import StoreUnavailable
from crossdock.queue.models import Job
from crossdock.queue.ports import BackendUnavailable
from crossdock.queue.states import JobState, Reason

EPOCH = 1_800_000_000.0
"""Where every simulated clock starts (epoch seconds): the same times in every replay."""


class Crash(BaseException):
    """A process dies here (not an ``Exception``: nothing in the code under test catches it)."""


class SimClock:
    def __init__(self, start: float = EPOCH):
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class _Empty:
    """The records the sim's leader reads but nothing here keeps (services, live configs, descheduling)."""

    def destinations(self) -> dict:
        return {}

    def release(self, _spent: Any) -> None:
        return None

    def moved_attempt(self, _job_id: int) -> None:
        return None

    def in_force_version(self) -> int:
        return 0


class SimStore(MemoryStore):
    """MemoryStore with what the leader's cycle and the dispatch task read besides the roles it
    has (inventory, usage, nominations, reasons: kept or dropped), the follower's typed pass, and
    a record of every write a leader made while another held the lease."""

    def __init__(self, clock: SimClock):
        super().__init__(actor="sim", clock=clock, wall=clock)
        self.leaders: set[str] = set()
        """The holders of the leaders built so far (an actor in this set is a leader)."""
        self.stale_writes: list[tuple[int, str, str, float]] = []
        """(job id, writer, lease holder then, time) of each leader's transition without the lease."""
        self._inventory_kept: list | None = None
        self._usage: tuple[dict[str, float], float | None] = ({}, None)
        self._nominated: dict[int, str] = {}
        self.deschedule = self.live_config = self.services = _Empty()

    def transition(self, job_id: int, new: JobState, **kw: Any) -> Any:
        actor = kw.get("actor", "")
        if actor in self.leaders and self.lease_holder() not in (None, actor):
            self.stale_writes.append((job_id, actor, self.lease_holder() or "", self.clock()))
        return super().transition(job_id, new, **kw)

    # --- what the leader reads and writes besides the ports ---------------------------------
    def all_ids(self) -> list[int]:
        return sorted(self._jobs)

    def events(self, job_id: int) -> list[dict[str, str]]:
        return [dict(e) for e in self._job_events.get(job_id, [])]

    def queue_counts(self) -> tuple[int, int]:
        return len(self._pending), len(self._active)

    def save_inventory(self, nodes: Sequence[Any]) -> None:
        self._inventory_kept = list(nodes)

    def inventory(self) -> list | None:
        return self._inventory_kept

    def usage(self) -> tuple[dict[str, float], float | None]:
        return self._usage

    def save_usage(self, usage: dict[str, float], at: float) -> None:
        self._usage = (dict(usage), at)

    def array_ids(self, _array_job_id: int) -> list[int]:
        return []

    def ids_by_name(self, _user: str, _name: str) -> list[int]:
        return []

    def history_facts(self, _ids: Any) -> dict:
        return {}

    def nominations(self, among: Any) -> dict[int, str]:
        """Preemptor job id → the node being freed for it (the next cycles keep it for that job)."""
        wanted = set(among)
        return {k: v for k, v in self._nominated.items() if k in wanted}

    def update_nominations(self, done: Any, nominated: dict[int, str], pipe: Any = None) -> None:
        for job_id in done:
            self._nominated.pop(job_id, None)
        self._nominated.update(nominated)

    def save_expected_starts(self, *_args: Any, **_kw: Any) -> None:
        return None

    def set_reasons(self, reasons: dict[int, str], explanations: dict[int, str] | None = None) -> None:
        for job_id, reason in reasons.items():
            self.update_if(job_id, (JobState.PENDING,), {"reason": reason})

    def expire_finished(self, *_args: Any, **_kw: Any) -> int:
        return 0  # the final read judges every job: none expires

    def opened(self, ids: Any) -> list[tuple[Job, str]]:
        return [(j, "") for j in self.get_many(ids)]  # no seals kept: every spec opens

    def cancel(self, job_id: int, actor: str = "") -> JobState:
        """As ``JobStore.cancel``: a pending job at once, a placed one marked for its backend to stop."""
        if self.transition(job_id, JobState.CANCELLED, actor=actor, reason=Reason.CANCELLED_BY_USER,
                           fields={"end_time": self._now()}, unless="dispatched"):
            return JobState.CANCELLED
        job = self.get(job_id)
        if not job.state.terminal:
            self.update_if(job_id, (JobState.SCHEDULED, JobState.RUNNING, JobState.PREEMPTED),
                           {"cancel_requested": True})
        return job.state

    def record_statuses(self, changes: Sequence[Any], actor: str, lease: str | None = None) -> list[Any]:
        """The Redis store's pass (``JobStore.record_statuses``), its steps queued on this store's
        pipeline: the same guarded transitions and next steps, all at once."""
        return JobStore.record_statuses(_Piped(self), changes, actor, lease)


class _Piped:
    """``self`` for ``JobStore.record_statuses`` over a SimStore: its ``pipeline`` is the store's."""

    def __init__(self, store: SimStore):
        self._store = store
        self.r = self

    def pipeline(self, transaction: bool = False, lease: str | None = None) -> Any:
        return self._store.pipeline(transaction, lease)

    def _queue_status(self, change: Any, actor: str, pipe: Any) -> int | None:
        return JobStore._queue_status(self._store, change, actor, pipe)  # type: ignore[arg-type]


@dataclass
class Outage:
    """The store answers ``calls_left`` more calls, then none until ``until``."""

    calls_left: int
    until: float


class Flaky:
    """The store as the workers see it: every call raises StoreUnavailable during an outage (one
    may start in the middle of a step, after a drawn number of calls); a batch's ``execute`` is
    one call."""

    def __init__(self, store: SimStore, clock: SimClock):
        self._store, self._clock = store, clock
        self.outage: Outage | None = None

    def _gate(self, what: str) -> None:
        out = self.outage
        if out is None:
            return
        if self._clock() >= out.until:
            self.outage = None
            return
        if out.calls_left > 0:
            out.calls_left -= 1
            return
        raise StoreUnavailable(f"simulated outage ({what})")

    @contextmanager
    def pipeline(self, transaction: bool = False, lease: str | None = None) -> Iterator[Any]:
        self._gate("pipeline")
        with self._store.pipeline(transaction, lease) as batch:
            execute = batch.execute

            def gated() -> list[Any]:
                self._gate("execute")
                return execute()

            batch.execute = gated
            yield batch

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._store, name)
        if not callable(value) or name.startswith("_"):
            return value

        def call(*args: Any, **kw: Any) -> Any:
            if kw.get("pipe") is None:
                self._gate(name)
            return value(*args, **kw)

        return call


@dataclass
class Run:
    """One run of one attempt on the fake backend, as the checker's ``backend`` process sees it."""

    job: int
    attempt: int
    ref: str


class SimBackend(FakeBackend):
    """The fake backend on the sim's clock, with drawn errors: a call refused (``BackendUnavailable``),
    or a submit that took effect but whose answer was lost. Batches go out one by one (a batch
    dispatch submits from a thread pool)."""

    capabilities = replace(CAPABILITIES, batches=False)

    def __init__(self, config: Any, store: Any, clock: SimClock, rng: random.Random):
        super().__init__(config, store, clock=clock)
        self.rng = rng
        self.error_rate = 0.0
        """Each call's chance to fail while a backend fault lasts (0: none)."""
        self.error_until = 0.0
        self.crashed = False
        self.crash_at = ""
        """"submit": the next submit kills the worker calling it, before the backend sees it."""

    def _maybe_fail(self, call: str) -> None:
        if self.error_rate and self.clock() < self.error_until and self.rng.random() < self.error_rate:
            raise BackendUnavailable(f"simulated {call} error", retryable=True)

    def inventory(self) -> Any:
        self._maybe_fail("inventory")
        return super().inventory()

    def submit(self, job: Job, fresh: bool = False) -> str:
        if self.crash_at == "submit":
            self.crashed = True
            raise Crash()
        self._maybe_fail("submit")
        ref = super().submit(job, fresh)
        self._maybe_fail("submit answer")  # submitted, the answer lost
        return ref

    def status(self, jobs: Sequence[Job]) -> Any:
        self._maybe_fail("status")
        return super().status(jobs)

    def cancel(self, job: Job) -> None:
        self._maybe_fail("cancel")
        super().cancel(job)

    def preempt(self, job: Job, grace_seconds: float) -> None:
        self._maybe_fail("preempt")
        super().preempt(job, grace_seconds)

    def running(self) -> list[Run]:
        """What runs now (the clock's ends applied)."""
        with self._lock:
            self._settle()
            return [Run(o.job_id, o.attempt, o.ref) for o in self.jobs.values() if o.state is JobState.RUNNING]


@dataclass(order=True)
class Message:
    """A task sent to a queue: delivered when the clock reaches ``at``."""

    at: float
    seq: int
    name: str = field(compare=False)
    args: list = field(compare=False)
    queue: str = field(compare=False)
    task_id: str = field(compare=False)
    retries: int = field(default=0, compare=False)
    redelivered: bool = field(default=False, compare=False)


class Bus:
    """The broker: what ``send`` puts on a queue, each message dropped, duplicated or delayed as drawn."""

    def __init__(self, rng: random.Random, clock: SimClock, faults: Callable[[], bool]):
        self.rng, self.clock, self.faults = rng, clock, faults
        self.queue: list[Message] = []
        self.sent: list[tuple[str, list, str]] = []
        self.dropped = self.duplicated = 0
        self._seq = 0

    def _id(self) -> str:
        self._seq += 1
        return f"t{self._seq}"

    def send(self, name: str, args: list, queue: str) -> None:
        self.sent.append((name, list(args), queue))
        task_id = self._id()
        r = self.rng.random() if self.faults() else 1.0
        if r < 0.05:
            self.dropped += 1
            return
        delay = self.rng.uniform(0, 40) if r < 0.15 else 0.0
        self.put(Message(self.clock() + delay, self._seq, name, list(args), queue, task_id))
        if 0.15 <= r < 0.22:  # the broker delivers it twice (a new message, as a publish retried)
            self.duplicated += 1
            self.put(Message(self.clock() + self.rng.uniform(0, 20), self._seq, name, list(args), queue, self._id()))

    def put(self, message: Message) -> None:
        self._seq += 1
        self.queue.append(replace(message, seq=self._seq))

    def ready(self) -> list[Message]:
        return sorted(m for m in self.queue if m.at <= self.clock())

    def take(self, message: Message) -> None:
        self.queue.remove(message)
