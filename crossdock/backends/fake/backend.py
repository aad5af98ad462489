"""An in-memory backend for tests: crossdock's own states stand in for native ones.

One :class:`FakeJob` per (job id, attempt), named ``fake:<id>:<attempt>``; a second submit of the
same attempt answers with that name and creates nothing. What happens to a job is up to the test::

    fake = FakeBackend(config, runtime.store)
    runtime.backends.use("fake", fake)
    ...                                  # a dispatch submits job 7
    fake.finish(7, exit_code=3)          # the follower then records FAILED, exit code 3

- A submitted job is RUNNING at once (like a pod on a kwok node), or waits (PENDING, which
  crossdock follows as SCHEDULED) until :meth:`start` when the backend has ``start_on_submit=False``
  or its array's throttle is reached.
- ``CROSSDOCK_SIMULATE_RUN_SECONDS`` / ``CROSSDOCK_SIMULATE_EXIT_CODE`` in the job's environment
  work as on the development Kubernetes plane's kwok nodes: the job ends by itself that many
  seconds after it started (on the backend's ``clock``) with that exit code (default 0); an exit
  code alone ends it at once; neither keeps it running until something stops it.
- :meth:`finish` ends a job with an exit code, :meth:`fail_node` ends every job on a node
  NODE_FAIL (and takes the node out of the inventory's schedulable ones until
  :meth:`restore_node`), :meth:`forget` makes the backend lose a job (``status`` no longer
  reports it: the follower marks it lost).
- ``cancel`` ends a job CANCELLED; ``preempt`` records the stop in the store
  (``request_preempt``, as the real backends do) and ends it PREEMPTED after the grace period.
- ``evict`` stops a job as ``preempt`` does and answers ``Eviction.EVICTED``; ``GONE`` for a job it
  no longer runs; ``REFUSED_BY_BUDGET`` (nothing stopped) while a budget in :attr:`budgets` that
  covers the job allows no more disruptions — which ``disruption_budgets`` also reports.
- ``inventory`` lists the nodes declared in the ``nodes:`` of the config's ``fake`` pools.

Safe to share between threads (a batch dispatch submits from several). Its memory is its
process's: a Celery worker elsewhere has a fake of its own, so run the tasks in the test's process
(``task.apply``) with the instance given to ``Backends.use``.
"""

from __future__ import annotations

import signal as signals
import threading
import time
from dataclasses import dataclass
from types import MappingProxyType
from typing import Callable, Sequence

from crossdock.backends.fake import CAPABILITIES
from crossdock.backends.fake.elastic import FakeFleets, FakeNodes
from crossdock.queue.config import ClusterConfig
from crossdock.queue.models import Job
from crossdock.queue.deschedule.budgets import DisruptionBudget
from crossdock.queue.deschedule.view import subject_of
from crossdock.queue.ports import BackendStatus, BackendStore, Eviction, Inventory
from crossdock.queue.snapshot import GpuDevice, Node
from crossdock.queue.states import JobState, Reason

RUN_SECONDS_ENV = "CROSSDOCK_SIMULATE_RUN_SECONDS"
EXIT_CODE_ENV = "CROSSDOCK_SIMULATE_EXIT_CODE"
_UNFINISHED = (JobState.PENDING, JobState.RUNNING)


@dataclass
class FakeJob:
    """One backend object: one attempt of one crossdock job."""

    ref: str
    job_id: int
    attempt: int
    nodes: tuple[str, ...]
    run_seconds: float | None = None
    exit_code_when_done: int | None = None
    group: str = ""
    """The array submission it belongs to ("" for a job submitted alone)."""
    state: JobState = JobState.PENDING
    reason: str = Reason.NONE
    exit_code: int | None = None
    signal: int | None = None
    ends_at: float | None = None
    ends_as: tuple[JobState, str, int | None, int | None] | None = None
    """(state, reason, exit code, signal) it takes at ``ends_at``."""

    def end(self, state: JobState, reason: str, exit_code: int | None = None, signal: int | None = None) -> None:
        self.state, self.reason, self.exit_code, self.signal = state, reason, exit_code, signal
        self.ends_at = self.ends_as = None


def declared_nodes(cfg: ClusterConfig | None, kind: str = "fake", down: frozenset[str] = frozenset()) -> tuple[Node, ...]:
    """The nodes declared in the ``nodes:`` lists of the config's pools of backend ``kind``."""
    out = []
    for pool_name, pool in (cfg.pools.items() if cfg is not None else ()):
        if pool.backend != kind:
            continue
        for d in pool.nodes:
            gpus = tuple(GpuDevice(f"{d.name}:{k}", k, d.gpu_model or pool.gpu.model or "GPU") for k in range(d.gpus))
            out.append(Node(d.name, pool_name, kind, d.cpus * 1000, d.memory_mib, gpus,
                            MappingProxyType(dict(d.labels)), gpu_sharing=pool.gpu.sharing,
                            schedulable=d.name not in down))
    return tuple(out)


class FakeBackend(FakeFleets, FakeNodes):
    """Also scales fleets and provisions pools' nodes in memory (``elastic.py``)."""

    kind = "fake"
    capabilities = CAPABILITIES

    def __init__(self, config: ClusterConfig | None = None, store: BackendStore | None = None, *,
                 start_on_submit: bool = True, clock: Callable[[], float] = time.monotonic,
                 node_start_seconds: float = 0.0):
        FakeFleets.__init__(self)
        FakeNodes.__init__(self, config, clock, self.kind, node_start_seconds)
        self.config, self.store = config, store
        self.start_on_submit = start_on_submit
        self.clock = clock
        self.jobs: dict[tuple[int, int], FakeJob] = {}
        """(job id, attempt) → its object, forgotten ones excepted."""
        self.created: list[str] = []
        """Every object ever created, in order (a second submit of an attempt adds nothing)."""
        self.throttles: dict[str, int] = {}
        """Array submission → at most this many of its tasks RUNNING at once."""
        self.down: set[str] = set()
        self.budgets: list[DisruptionBudget] = []
        """Disruption budgets this backend enforces and reports, as a PodDisruptionBudget would be."""
        self.evicted: list[int] = []
        """Job ids evicted, in order."""
        self._lock = threading.RLock()

    # --- the Backend protocol ---------------------------------------------------------------
    def inventory(self) -> Inventory:
        return Inventory(declared_nodes(self.config, self.kind, frozenset(self.down)) + self.provisioned_nodes())

    def submit(self, job: Job, fresh: bool = False) -> str:
        with self._lock:
            return self._submit(job, group="").ref

    def submit_array(self, tasks: Sequence[Job], throttle: int | None = None, fresh: bool = False) -> dict[int, str]:
        """The tasks as one submission: at most ``throttle`` (default: the spec's ``%max_running``)
        of them RUNNING at once, the others waiting until one ends."""
        if not tasks:
            return {}
        first = tasks[0]
        if throttle is None and first.spec.array is not None:
            throttle = first.spec.array.max_running
        group = f"fake:a{first.array_job_id}:{first.attempts}:{min(t.array_task_id or 0 for t in tasks)}"
        with self._lock:
            if throttle:
                self.throttles[group] = throttle
            refs = {t.id: self._submit(t, group).ref for t in tasks}
            self._settle()
            return refs

    def cancel(self, job: Job) -> None:
        with self._lock:
            self._settle()
            obj = self.jobs.get((job.id, job.attempts))
            if obj is not None and obj.state in _UNFINISHED:
                obj.end(JobState.CANCELLED, Reason.CANCELLED_BY_USER, signal=int(signals.SIGTERM))

    def preempt(self, job: Job, grace_seconds: float) -> None:
        if self.store is not None:
            self.store.request_preempt(job.id, grace_seconds)
        with self._lock:
            self._settle()
            obj = self.jobs.get((job.id, job.attempts))
            if obj is None or obj.state not in _UNFINISHED:
                return
            if obj.state is JobState.PENDING or grace_seconds <= 0:
                obj.end(JobState.PREEMPTED, Reason.PREEMPTED, signal=int(signals.SIGTERM))
            else:
                obj.ends_at = self.clock() + grace_seconds
                obj.ends_as = (JobState.PREEMPTED, Reason.PREEMPTED, None, int(signals.SIGTERM))

    def evict(self, job: Job, grace_seconds: int) -> Eviction:
        with self._lock:
            self._settle()
            obj = self.jobs.get((job.id, job.attempts))
            if obj is None or obj.state not in _UNFINISHED:
                return Eviction.GONE
            for b in self.budgets:
                covered = [subject_of(j) for j in self._known_jobs() if b.covers(subject_of(j))]
                if b.covers(subject_of(job)) and b.allowed(covered) <= 0:
                    return Eviction.REFUSED_BY_BUDGET
            self.evicted.append(job.id)
        self.preempt(job, grace_seconds)
        return Eviction.EVICTED

    def disruption_budgets(self) -> list[DisruptionBudget]:
        return list(self.budgets)

    def _known_jobs(self) -> list[Job]:
        """The store's records of the jobs this backend holds (a budget counts them as a PDB counts pods)."""
        if self.store is None:
            return []
        return self.store.get_many(sorted({i for i, _ in self.jobs}))

    def status(self, jobs: Sequence[Job]) -> dict[int, BackendStatus]:
        with self._lock:
            self._settle()
            out = {}
            for job in jobs:
                obj = self.jobs.get((job.id, job.attempts))
                if obj is not None:
                    out[job.id] = BackendStatus(obj.ref, obj.state, obj.reason, obj.exit_code, obj.signal,
                                                obj.nodes, native_state=obj.state.value)
            return out

    # --- what a test drives -----------------------------------------------------------------
    def get(self, job_id: int) -> FakeJob:
        """The object of the job's latest attempt."""
        with self._lock:
            self._settle()
            found = [o for (i, _a), o in self.jobs.items() if i == job_id]
            if not found:
                raise KeyError(f"the fake backend has no job {job_id}; submitted: {sorted({i for i, _ in self.jobs})}")
            return max(found, key=lambda o: o.attempt)

    def start(self, job_id: int) -> None:
        """Start a waiting job (its simulated run time counts from now)."""
        with self._lock:
            obj = self.get(job_id)
            if obj.state is not JobState.PENDING:
                raise ValueError(f"job {job_id} is {obj.state.value}; only a PENDING one can start")
            self._start(obj)
            self._settle()

    def finish(self, job_id: int, exit_code: int = 0, signal: int | None = None) -> None:
        """End a job now: COMPLETED with exit code 0, FAILED otherwise or when killed by ``signal``."""
        with self._lock:
            obj = self.get(job_id)
            if obj.state not in _UNFINISHED:
                raise ValueError(f"job {job_id} has ended already ({obj.state.value})")
            obj.end(*_outcome(exit_code, signal))
            self._settle()

    def fail_node(self, node: str) -> list[int]:
        """The node goes down: every unfinished job on it ends NODE_FAIL; returns their job ids."""
        with self._lock:
            self._settle()
            self.down.add(node)
            hit = [o for o in self.jobs.values() if node in o.nodes and o.state in _UNFINISHED]
            for obj in hit:
                obj.end(JobState.NODE_FAIL, Reason.NODE_LOST)
            self._settle()
            return [o.job_id for o in hit]

    def restore_node(self, node: str) -> None:
        with self._lock:
            self.down.discard(node)

    def forget(self, job_id: int) -> None:
        """Lose the job's latest attempt, as a backend that crashed or purged its record would."""
        with self._lock:
            obj = self.get(job_id)
            del self.jobs[(obj.job_id, obj.attempt)]

    # --- inside -----------------------------------------------------------------------------
    def _submit(self, job: Job, group: str) -> FakeJob:
        key = (job.id, job.attempts)
        if key in self.jobs:
            return self.jobs[key]
        env = job.spec.env
        obj = FakeJob(f"fake:{job.id}:{job.attempts}", job.id, job.attempts, tuple(job.nodes),
                      run_seconds=float(env[RUN_SECONDS_ENV]) if RUN_SECONDS_ENV in env else None,
                      exit_code_when_done=int(env[EXIT_CODE_ENV]) if EXIT_CODE_ENV in env else None, group=group)
        self.jobs[key] = obj
        self.created.append(obj.ref)
        if self.start_on_submit and not group:
            self._start(obj)
        return obj

    def _start(self, obj: FakeJob) -> None:
        obj.state, obj.reason = JobState.RUNNING, Reason.NONE
        if obj.run_seconds is not None or obj.exit_code_when_done is not None:
            obj.ends_at = self.clock() + (obj.run_seconds or 0)
            obj.ends_as = _outcome(obj.exit_code_when_done or 0, None)

    def _settle(self) -> None:
        """Apply what the clock says has happened: runs that ended, array tasks whose turn came."""
        while True:
            now = self.clock()
            for obj in self.jobs.values():
                if obj.ends_as is not None and obj.ends_at is not None and now >= obj.ends_at:
                    obj.end(*obj.ends_as)
            turns = self._turns()
            if not turns:
                return
            for obj in turns:
                self._start(obj)

    def _turns(self) -> list[FakeJob]:
        """Waiting array tasks that their array's throttle lets start now."""
        if not self.start_on_submit:
            return []
        groups: dict[str, list[FakeJob]] = {}
        for obj in self.jobs.values():
            if obj.group:
                groups.setdefault(obj.group, []).append(obj)
        out = []
        for group, members in groups.items():
            room = self.throttles.get(group, len(members)) - sum(o.state is JobState.RUNNING for o in members)
            waiting = sorted((o for o in members if o.state is JobState.PENDING), key=lambda o: o.job_id)
            out += waiting[:max(room, 0)]
        return out


def _outcome(exit_code: int, signal: int | None) -> tuple[JobState, str, int | None, int | None]:
    if exit_code == 0 and signal is None:
        return JobState.COMPLETED, Reason.NONE, 0, None
    return JobState.FAILED, Reason.NON_ZERO_EXIT, exit_code, signal
