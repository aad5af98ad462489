"""The store's ports: what workers and backends ask of the job store, one small Protocol per role.

The Redis store (``crossdock.backends.redis_store.JobStore``) implements every one, the in-memory
one (``crossdock.backends.memory_store``) those a test of a worker or a backend needs; a caller is
typed with the roles it uses (``BackendContext.store`` is a :class:`BackendStore`). Every method
that moves or marks a job takes an optional ``pipe`` (from :meth:`JobTransitions.pipeline`) so that
several steps cost one round trip. A store that does not answer raises
:class:`~crossdock.queue.errors.StoreUnavailable`; ``tests/contract/test_store_contract.py`` holds
every implementation to the same behaviour.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Iterable, Protocol, Sequence, runtime_checkable

from crossdock.queue.models import Job
from crossdock.queue.states import JobState


DISPATCHER_TTL_SECONDS = 15.0
"""How long a dispatch task's liveness lasts (``DispatchClaims.dispatching``); a running task
refreshes it every third of this."""

REQUEUE_CLEARED = ("nodes", "gpu_ids", "backend_ref", "pool", "backend", "exit_code", "signal", "start_time",
                   "end_time", "scheduled_time", "cancel_requested", "preempt_requested", "preempt_grace",
                   "preempt_deadline", "dispatched", "pid")
"""The job fields a requeue clears: placement, outcome and stop requests of the attempt it ends."""


def assign_ids(jobs: Sequence[Job], first: int) -> list[Job]:
    """Give consecutive ids from ``first``; array tasks carry a placeholder ``array_job_id`` (any
    value shared by the tasks of one array) that becomes the id of that array's first task."""
    out: list[Job] = []
    array_ids: dict[int | None, int] = {}
    for offset, job in enumerate(jobs):
        jid = first + offset
        update: dict[str, Any] = {"id": jid}
        if job.array_task_id is not None:
            update["array_job_id"] = array_ids.setdefault(job.array_job_id, jid)
        out.append(job.model_copy(update=update))
    return out


@dataclass(frozen=True)
class StopRequest:
    """Why a placed job is to stop: a user's cancel, or a preemption with its grace period."""

    cancel: bool
    preempt: bool
    grace_seconds: float | None = None


@runtime_checkable
class JobReads(Protocol):
    """Jobs by id, and the indexes of those waiting and those placed."""

    def get(self, job_id: int) -> Job:
        """The job; ``NoSuchJob`` when the store has none of that id."""

    def get_many(self, ids: Iterable[int]) -> list[Job]:
        """The jobs of ``ids`` that exist, in the order asked (one round trip)."""

    def pending_ids(self) -> list[int]: ...

    def active_ids(self) -> list[int]:
        """Jobs SCHEDULED or RUNNING."""


@runtime_checkable
class SealedReads(Protocol):
    """What a job runs, read with its spec's seal checked in the same read."""

    def opened(self, ids: Iterable[int]) -> list[tuple[Job, str]]:
        """Each job with why it must not run ("" when its seal verifies)."""

    def array_tasks(self, ids: Sequence[int]) -> tuple[list[Job], str]:
        """Tasks of one array as copies of its first SCHEDULED one, with that one's refusal."""


@runtime_checkable
class JobTransitions(Protocol):
    """State changes, each refused unless ``queue.states.TRANSITIONS`` allows it from the job's
    state now (and from ``only_from``, and for ``attempt``): a replayed step moves nothing."""

    def pipeline(self, transaction: bool = False, lease: str | None = None) -> AbstractContextManager[Any]:
        """A batch of store calls sent in one round trip (``transaction``: all or nothing). With
        ``lease``, a transaction lands only while that holder holds the scheduler's lease, checked
        in the transaction itself (a fencing check): :class:`LeaseLost` otherwise, nothing done."""

    def transition(self, job_id: int, new: JobState, *, fields: dict[str, Any] | None = None, actor: str = "",
                   reason: str = "", attempt: int | None = None, unless: str = "", bump_attempt: bool = False,
                   only_from: Iterable[JobState] | None = None, ends_attempt: bool = False,
                   ended_as: tuple[str, str] | None = None, pipe: Any = None) -> Any:
        """True when the job moved to ``new`` (queued on ``pipe``: its result is ``[moved, old]``).
        ``unless`` names a field that must be unset; ``ends_attempt`` keeps the run it ends."""

    def update_if(self, job_id: int, states: Iterable[JobState], fields: dict[str, Any], pipe: Any = None) -> Any:
        """Set fields only while the job is in one of ``states`` (True when it was)."""

    def requeue(self, job_id: int, actor: str = "", reason: str = "Requeued", delay_seconds: float = 0, *,
                unless: str = "", attempt: int | None = None, only_from: Iterable[JobState] | None = None,
                pipe: Any = None) -> Any:
        """Back to PENDING for a new attempt, placement and stop requests cleared."""

    def settle_preempted(self, job_id: int, requeue: bool, actor: str = "", reason: str = "Preempted", *,
                         attempt: int | None = None, cancelled: bool | None = None, pipe: Any = None) -> int:
        """A PREEMPTED job's next step: PENDING again (``requeue``) or CANCELLED, a user's cancel
        winning; returns the commands queued on ``pipe``."""


@runtime_checkable
class DispatchClaims(Protocol):
    """Who sends an attempt to its backend: the first delivery of a dispatch task claims it, a
    duplicate gets nothing, and a claim whose task died is told from one still at work."""

    def claim_dispatch(self, ids: Sequence[int], attempt: int, worker: str,
                       reown: bool = False) -> tuple[list[int], bool]:
        """The ids this ``worker`` owns now, and whether every one was claimed just now (``reown``:
        the same task delivered again keeps its claims)."""

    def release_claims(self, ids: Sequence[int], attempt: int) -> None:
        """Free the claims so that a retry may submit."""

    def dispatch_claimed(self, job_id: int, attempt: int) -> bool: ...

    def dispatcher_alive(self, job_id: int, attempt: int) -> bool:
        """The task that claimed it still refreshes its liveness (False when nobody claimed it)."""

    def dispatching(self, worker: str, alive: bool = True) -> None:
        """Refresh (or drop) the liveness of dispatch task ``worker``."""

    def set_backend_refs(self, refs: dict[int, str]) -> None:
        """Each submitted job's backend reference, while it is placed."""

    def retry_dispatch(self, job_id: int) -> bool:
        """Restart the resend clock of a SCHEDULED job being sent again."""


@runtime_checkable
class StopRequests(Protocol):
    """A placed job's pending cancel or preemption, which its backend carries out."""

    def request_preempt(self, job_id: int, grace_seconds: float, pipe: Any = None) -> Any:
        """Mark the job preempted from now, what still runs after ``grace_seconds`` stopped; True
        when it was placed."""

    def stop_request(self, job_id: int) -> StopRequest | None: ...

    def stop_requests(self, ids: Sequence[int]) -> dict[int, StopRequest]:
        """The requests standing on ``ids``; jobs with none are absent."""


@runtime_checkable
class Heartbeats(Protocol):
    """A watcher's proof of life for its job, expiring unless refreshed."""

    def heartbeat(self, job_id: int, ttl: float) -> None: ...

    def alive(self, ids: Sequence[int]) -> dict[int, bool]: ...


@runtime_checkable
class SchedulerLease(Protocol):
    """The one leader: a lease that its holder renews and that expires by itself."""

    def acquire_lease(self, holder: str, seconds: float) -> bool:
        """Take or renew the lease for ``seconds``; False while another holds it."""

    def release_lease(self, holder: str) -> None:
        """Give it up, if ``holder`` holds it."""

    def lease_holder(self) -> str | None: ...


@runtime_checkable
class JobResults(Protocol):
    """A Python job's sealed parts, return value and checkpoint (bytes the store keeps as given)."""

    def set_result(self, job_id: int, payload: bytes) -> None: ...

    def result(self, job_id: int) -> bytes | None: ...

    def set_checkpoint(self, job_id: int, sealed: bytes, ttl: int = 7 * 86400) -> None: ...

    def checkpoint(self, job_id: int) -> bytes | None: ...

    def call_parts(self, ref: str, *fields: str) -> list[bytes | None]:
        """Fields of one ``map``'s sealed parts (``fn``, a task id), None where absent."""


@runtime_checkable
class JobOutput(Protocol):
    """What a Python job printed, kept in chunks in the order appended."""

    def append_output(self, job_id: int, chunks: Sequence[str], ttl: int = 7 * 86400) -> None: ...

    def output(self, job_id: int, start: int = 0) -> list[str] | None:
        """Chunks from ``start`` on; None when none was ever kept."""


@runtime_checkable
class JobEvents(Protocol):
    """Events, per job and in one global stream, oldest first, each with a unique ordered ``id``."""

    def read_events(self, job_id: int | None = None, *, since: float | None = None, after: str | None = None,
                    count: int = 1000, block_ms: int | None = None) -> list[dict[str, str]]:
        """After the event ``after``, else from ``since`` (epoch seconds), else the last ``count``."""

    def record_note(self, job_id: int, event: str, actor: str, **fields: str | int | float) -> None:
        """Note ``event`` by ``actor`` for the job, with no state change."""


@runtime_checkable
class RecordsStatuses(Protocol):
    """A backend's status pass, recorded whole or not at all."""

    def record_statuses(self, changes: Sequence[Any], actor: str, lease: str | None = None) -> list[Any]:
        """Record the follower's planned changes (``crossdock.queue.reconcile``'s ``Settle`` and
        ``Update``, not imported here: reconcile sits above the ports) in one step, each guarded by
        the job's state and attempt; one result per change, saying whether it moved. ``lease``: as
        :meth:`JobTransitions.pipeline`'s."""


@runtime_checkable
class Installation(Protocol):
    """Which store this is, for what a backend leaves behind in a system that outlives a store."""

    def installation(self) -> tuple[str, bool]:
        """The store's identity (made once) and whether it also answers for jobs a backend tagged
        before stores had one (true only for a store whose first jobs an earlier release wrote)."""


@runtime_checkable
class BackendStore(JobReads, JobTransitions, StopRequests, Heartbeats, JobResults, JobOutput, Installation, Protocol):
    """What a backend is handed (``BackendContext.store``): the roles its adapters play."""

    @property
    def services(self) -> Any:
        """The inference services' records (replica endpoints, draining); not a port yet."""


@runtime_checkable
class FollowerStore(JobReads, JobTransitions, DispatchClaims, StopRequests, Heartbeats, RecordsStatuses, Protocol):
    """What the follower reads and moves to reconcile placed jobs with their backends."""

    @property
    def services(self) -> Any:
        """The inference services' records (replica endpoints, from the backends' statuses)."""
