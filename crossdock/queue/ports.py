"""The seams the core is written against: what a place jobs run must offer, and what it may.

Every backend implements :class:`Backend` and declares its :class:`Capabilities`, a plain value
that shared code reads instead of asking a backend its name. Optional behaviour that needs a
method is a small Protocol beside it (``SupportsArrays``, ``SweepsOrphans`` …), checked with
``isinstance``. The registry that maps a backend kind to its factory lives in
``crossdock.backends.registry``; nothing here imports a backend.

The store's ports, one small Protocol per role its callers play, are in
:mod:`crossdock.queue.jobstore` and named here too.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Collection, Iterable, Mapping, Protocol, Sequence, runtime_checkable

from crossdock.queue.errors import CrossdockError
from crossdock.queue.jobstore import (BackendStore, DispatchClaims, FollowerStore, Heartbeats, JobEvents,  # noqa: F401
                                      JobOutput, JobReads, JobResults, JobTransitions, RecordsStatuses,
                                      SchedulerLease, SealedReads, StopRequest, StopRequests)
from crossdock.queue.models import Job
from crossdock.queue.serving import ServiceMetrics, ServiceSpec
from crossdock.queue.snapshot import Allocation, Node
from crossdock.queue.states import JobState


class BackendError(CrossdockError):
    """Root of backend failures."""


class SubmitFailed(BackendError):
    """The backend refused the job; retrying the same submission will not help."""


class BackendUnavailable(BackendError):
    """The backend could not be reached; ``retryable`` says whether to try again later."""

    def __init__(self, message: str, retryable: bool = True):
        super().__init__(message)
        self.retryable = retryable


def settings_error(exc: Any, variables: Mapping[str, str]) -> BackendUnavailable:
    """A backend's settings that fail validation (a pydantic ``ValidationError``): every problem,
    each with its environment variable (``variables``: field → variable), value and message."""
    lines = [f"{variables.get(str(e['loc'][0]), e['loc'][0])}={e.get('input')!r}: {e['msg']}" for e in exc.errors()]
    return BackendUnavailable("bad backend settings: " + "; ".join(lines), retryable=False)


@dataclass(frozen=True)
class Capabilities:
    """What a backend can do, declared once per backend kind and read by shared code."""

    arrays: bool = False
    """Tasks of one array placed in one pool go out as one submission (``SupportsArrays``)."""
    batches: bool = False
    """Separate jobs for one pool go out several per dispatch task (cheap, parallel submits)."""
    reowns_claims: bool = False
    """``submit`` finds what an earlier delivery of the same attempt started (a tag, a name), so a
    dispatch task delivered again after its worker died may re-own its claims and submit again."""
    heartbeat: bool = False
    """Followed by a heartbeat its own watcher writes to the store, not by ``status``: a job whose
    heartbeat stops is lost."""
    backend_queue: bool = False
    """Jobs may wait inside the backend's own queue beyond what fits now (a pool's ``backend_queue``)."""
    logs: bool = False
    """Output is read through the backend (``ServesLogs``), not from the job's output file."""
    provisioners: tuple[str, ...] = ()
    """The names a pool's ``provisioner`` may take on this backend (``ProvisionsNodes``)."""
    fleets: bool = False
    """Scales the replicas of an elastic queue's ``fleet`` (``ScalesFleet``)."""
    estimates_start: bool = False
    """Tells when a job would start if sent now (``EstimatesStart``), for bursting between backends."""
    sizes_nodes: bool = False
    """Measures the CPUs and memory of the nodes a pool declares, so a declaration may say ``auto``."""
    partitions: bool = False
    """A pool is one of the backend's own partitions, which it must name (``partition:``)."""
    signals: bool = False
    """Delivers ``--signal`` (``JobSpec.kill_signal``) before the time limit."""
    evicts: bool = False
    """Stops a running job so that it is placed again elsewhere, honouring disruption budgets
    (``EvictsJobs``): the descheduler's way to move work."""
    services: bool = False
    """Runs the replicas of inference services (``RunsServices``): readiness, drain, a stable address."""
    routed: bool = False
    """Its service replicas listen on this machine and are reached through crossdock's router, which
    ``crossdock up`` runs while a pool has such a backend (the others' replicas have an address of
    their own: a Kubernetes Service)."""


@dataclass(frozen=True)
class Inventory:
    nodes: tuple[Node, ...]
    foreign: tuple[Allocation, ...] = ()
    """Capacity used by work crossdock did not submit."""


@dataclass(frozen=True)
class BackendStatus:
    """What a backend reports about one job it runs."""

    ref: str
    state: JobState
    reason: str = ""
    exit_code: int | None = None
    signal: int | None = None
    nodes: tuple[str, ...] = ()
    native_state: str = ""
    extra: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Orphan:
    """A backend object that belongs to no active attempt (left by a crash or a requeue)."""

    ref: str
    job_id: int
    attempt: int
    why: str


@runtime_checkable
class Backend(Protocol):
    kind: str
    capabilities: Capabilities

    def inventory(self) -> Inventory: ...

    def submit(self, job: Job, fresh: bool = False) -> str:
        """Start ``job`` (placed: ``job.nodes``, ``job.gpu_ids``); return the backend reference.

        Idempotent per (job id, attempt): a second call finds what the first one started.
        ``fresh`` says no earlier call can have started it, so a costly look may be skipped."""

    def cancel(self, job: Job) -> None: ...

    def preempt(self, job: Job, grace_seconds: int) -> None: ...

    def status(self, jobs: Sequence[Job]) -> dict[int, BackendStatus]:
        """One batched query for every given job; jobs the backend does not know are absent."""


@runtime_checkable
class SupportsArrays(Protocol):
    """A backend that takes tasks of one array as one submission (a Slurm array, an Indexed Job)."""

    def submit_array(self, tasks: Sequence[Job], throttle: int | None = None, fresh: bool = False) -> dict[int, str]:
        """Submit ``tasks`` (one array, one attempt) together, at most ``throttle`` running at
        once; return job id → backend reference of each task.

        Idempotent per group: a second call with the same tasks finds what the first one started.
        ``fresh`` says no earlier call can have started them, so a costly look may be skipped."""


@runtime_checkable
class SweepsOrphans(Protocol):
    """A backend whose objects can outlive their attempt (a crash between create and record)."""

    def delete_orphans(self, active: Iterable[Job]) -> list[Orphan]:
        """Delete what belongs to no job of ``active``'s attempts; return what was deleted."""


@runtime_checkable
class StopsLost(Protocol):
    """A backend that can stop what is left of a job whose watcher died (``heartbeat`` backends)."""

    def kill_orphan(self, job: Job) -> None: ...


@runtime_checkable
class WatchedOutsideStore(Protocol):
    """A ``heartbeat`` backend whose watcher also leaves traces outside the store (its process, a
    file beside the job): a watcher silent only because the store was down is told from a dead
    one, and the end a dead watcher could not record is not lost. Read before a job is lost."""

    def watcher_alive(self, job: Job) -> bool:
        """The watcher of ``job``'s attempt still runs (its heartbeat may have expired in an outage)."""

    def settle(self, job: Job) -> JobState | None:
        """Record the end ``job``'s dead watcher left behind; that state, or None when it left none."""


@dataclass(frozen=True)
class NodeGroup:
    """The nodes of one autoscaled pool, as its provisioner sees them."""

    pool: str
    ready: tuple[str, ...] = ()
    """Nodes that take work now."""
    starting: tuple[str, ...] = ()
    """Asked for and not ready yet (a NodeClaim launching, a Slurm node POWERING_UP)."""
    stopping: tuple[str, ...] = ()
    """Being removed (POWERING_DOWN, a Node being deleted)."""
    spare: int | None = None
    """How many more nodes could be added (Slurm: the partition's POWERED_DOWN nodes); None: any
    number up to the pool's ``max_nodes``."""


@runtime_checkable
class ProvisionsNodes(Protocol):
    """A backend that adds and removes the nodes of pools whose ``provisioner`` it offers."""

    def node_group(self, pool: str) -> NodeGroup: ...

    def add_nodes(self, pool: str, count: int) -> list[str]:
        """Ask for ``count`` more nodes (of the pool's ``node_template``); return their names.
        Idempotent per name: nodes asked for and not ready yet are ``starting``, not asked again."""

    def remove_nodes(self, pool: str, names: Sequence[str]) -> list[str]:
        """Remove these nodes (the caller has drained them); return those removed."""


@runtime_checkable
class ScalesFleet(Protocol):
    """A backend that runs an elastic queue's worker fleet (``Elastic.fleet``)."""

    def fleet_replicas(self, fleet: Any) -> int:
        """How many replicas the fleet has now."""

    def scale_fleet(self, fleet: Any, replicas: int, busy: Collection[str] = frozenset()) -> int:
        """Set the fleet's replicas; a scale-in stops only idle replicas, never one that runs a task
        (``busy``: the replicas the caller knows to be busy, by host name — a pod's name). Return
        the count reached: above ``replicas`` when fewer idle replicas than asked could go."""


@runtime_checkable
class EstimatesStart(Protocol):
    def estimate_start(self, job: Job, pool: str) -> float | None:
        """Seconds from now until ``job`` would start in ``pool`` if sent now; None: unknown."""


@runtime_checkable
class ServesLogs(Protocol):
    def logs(self, job: Job, *, tail_lines: int | None = None, worker: int = 0) -> str: ...


class Eviction(StrEnum):
    """What asking a backend to evict one job came to (``EvictsJobs.evict``)."""

    EVICTED = "evicted"
    """The job is being stopped (its grace period runs) and goes back to the queue."""
    REFUSED_BY_BUDGET = "refused_by_budget"
    """A disruption budget refused it (Kubernetes' 429 from a PodDisruptionBudget): nothing was
    stopped; try again in a later cycle, never at once."""
    GONE = "gone"
    """The job was no longer there to evict (finished, or lost): nothing to do."""


@runtime_checkable
class EvictsJobs(Protocol):
    """A backend that evicts running jobs for the descheduler (``Capabilities.evicts``)."""

    def evict(self, job: Job, grace_seconds: int) -> Eviction:
        """Stop ``job``'s attempt with ``grace_seconds`` between SIGTERM and SIGKILL so that it is
        requeued (the job's requeue policy and the backend's own budgets hold: Kubernetes' Eviction
        API, Slurm's requeue, the local requeue). Idempotent per attempt."""


@runtime_checkable
class ReportsDisruptionBudgets(Protocol):
    """A backend that knows disruption budgets of its own (Kubernetes' PodDisruptionBudgets)."""

    def disruption_budgets(self) -> list[Any]:
        """Budgets covering crossdock's jobs on this backend, each a
        ``crossdock.queue.deschedule.budgets.DisruptionBudget`` (not imported here: the
        descheduling policy sits above the ports, and the arrow must point down)."""


@runtime_checkable
class RunsServices(Protocol):
    """A backend that runs inference-service replicas (``Capabilities.services``): it gives a
    service one stable address (a Kubernetes Service; the local router needs nothing here) and takes
    a replica out of traffic before the controller stops it."""

    def ensure_service(self, spec: ServiceSpec) -> str | None:
        """Create or update what routes to the service's ready replicas. Idempotent. Returns the
        address clients reach it at (``host:port``), or None when another part routes (the router)."""

    def delete_service(self, name: str) -> None:
        """Remove what ``ensure_service`` made; nothing to remove is not an error."""

    def drain_replica(self, job: Job) -> None:
        """Stop sending new requests to this replica job (its in-flight ones finish). Idempotent."""


@runtime_checkable
class ReadsServiceMetrics(Protocol):
    """A source of a service's traffic: crossdock's router, or a Prometheus server's HTTP API."""

    def service_metrics(self, service: str) -> ServiceMetrics | None:
        """The latest sample for ``service``; None when the source has none (no traffic seen yet,
        or the source is away): the controller then keeps the replicas it has."""
