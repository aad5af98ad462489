"""The Slurm backend: inventory, idempotent dispatch, batched follow, cancel and preempt.

Every job crossdock submits carries ``crossdock:<job id>:<attempt>`` in its Slurm comment.
Before submitting, the backend looks for that tag, so a dispatch task that runs twice (a
Celery retry, a worker that died after sbatch returned) finds the job instead of submitting
it again. While slurmctld is unreachable, submission retries (looking for the tag again
before every try) for ``submit_retry_s``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Literal

from crossdock.backends.slurm.cli import CliDriver
from crossdock.backends.slurm.driver import SlurmDriver, SlurmJob, SlurmNode, SlurmPartition, SlurmUnavailable
from crossdock.backends.slurm.request import build_request, job_tag, parse_tag
from crossdock.backends.slurm.rest import RestDriver
from crossdock.backends.slurm.states import translate
from crossdock.queue.models import Job
from crossdock.queue.states import JobState

log = logging.getLogger(__name__)

ACTIVE_NODE_STATES = frozenset({"idle", "mixed", "allocated", "completing"})
UNSCHEDULABLE_FLAGS = frozenset({"drain", "draining", "drained", "down", "maintenance", "not_responding", "fail", "power_down"})
# Worst first: how an array whose tasks ended differently is summed up.
_ARRAY_OUTCOME = (JobState.NODE_FAIL, JobState.OUT_OF_MEMORY, JobState.TIMEOUT, JobState.FAILED,
                  JobState.CANCELLED, JobState.PREEMPTED)


@dataclass(frozen=True)
class JobStatus:
    """What Slurm says about one crossdock job (or one array task).

    ``state`` is None when Slurm no longer knows the reference (purged after MinJobAge and
    no accounting to ask): the reconciler decides what that means.
    """

    ref: str
    state: JobState | None
    reason: str
    exit_code: int | None = None
    signal: int | None = None
    slurm_state: str = ""
    nodes: tuple[str, ...] = ()
    restarts: int = 0
    tag: tuple[int, int] | None = None
    tasks: dict[int, "JobStatus"] = field(default_factory=dict)


@dataclass(frozen=True)
class NodeInventory:
    name: str
    partitions: tuple[str, ...]
    state: str
    schedulable: bool
    cpus: int
    cpus_alloc: int
    memory_mib: int
    memory_alloc_mib: int
    gpus: dict[str, int]
    gpus_alloc: dict[str, int]
    foreign_cpus: int = 0
    foreign_gpus: int = 0


@dataclass(frozen=True)
class Inventory:
    partitions: list[SlurmPartition]
    nodes: list[NodeInventory]
    foreign_jobs: list[SlurmJob]
    """Running jobs crossdock did not submit; their resources are taken."""


class SlurmBackend:
    name = "slurm"

    def __init__(
        self,
        driver: SlurmDriver,
        *,
        preempt_policy: Literal["requeue", "cancel"] = "requeue",
        submit_retry_s: float = 90.0,
        retry_interval_s: float = 1.0,
        parallelism: int = 4,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ):
        self.driver = driver
        self.preempt_policy = preempt_policy
        self.submit_retry_s = submit_retry_s
        self.retry_interval_s = retry_interval_s
        self.parallelism = parallelism
        self._clock, self._sleep = clock, sleep
        self._accounting: bool | None = None

    @classmethod
    def from_env(cls, env: Mapping[str, str], driver: str = "cli", **kwargs) -> "SlurmBackend":
        """``driver``: ``cli``, ``rest`` (JWT over TCP) or ``rest-unix`` (local auth)."""
        cli = CliDriver(env)
        if driver == "cli":
            return cls(cli, **kwargs)
        transport = "unix" if driver == "rest-unix" else "jwt"
        return cls(RestDriver.from_env(env, transport=transport, fallback=cli), **kwargs)

    # --- inventory --------------------------------------------------------------------------

    def inventory(self) -> Inventory:
        nodes, partitions, jobs = self.driver.nodes(), self.driver.partitions(), self.driver.jobs()
        foreign = [j for j in jobs if parse_tag(j.comment) is None and translate(j.state).state.active]
        cpus: dict[str, int] = {}
        gpus: dict[str, int] = {}
        for job in foreign:
            share = max(len(job.nodes), 1)
            for node in job.nodes:
                cpus[node] = cpus.get(node, 0) + job.cpus // share
                gpus[node] = gpus.get(node, 0) + sum(job.gpus.values()) // share
        return Inventory(
            partitions=partitions,
            nodes=[_node_inventory(n, cpus.get(n.name, 0), gpus.get(n.name, 0)) for n in nodes],
            foreign_jobs=foreign,
        )

    # --- dispatch ---------------------------------------------------------------------------

    def find(self, job: Job, jobs: Iterable[SlurmJob] | None = None) -> str | None:
        """The Slurm job id of ``job``'s current attempt if it was already submitted."""
        return self._tagged(self.driver.jobs() if jobs is None else jobs).get(job_tag(job.id, job.attempts))

    def submit(
        self,
        job: Job,
        *,
        partition: str | None = None,
        nodelist: list[str] | None = None,
        slurm_ids: Mapping[int, str] | None = None,
    ) -> str:
        """Submit ``job`` (idempotent per job id and attempt); returns its Slurm job id."""
        request = build_request(job, partition=partition, nodelist=nodelist, slurm_ids=slurm_ids)
        deadline = self._clock() + self.submit_retry_s
        while True:
            try:
                existing = self.find(job)
                if existing is not None:
                    log.info("job %s attempt %s already in Slurm as %s", job.id, job.attempts, existing)
                    return existing
                ref = str(self.driver.submit(request))
                log.info("job %s attempt %s submitted to Slurm as %s", job.id, job.attempts, ref)
                return ref
            except SlurmUnavailable as exc:
                if self._clock() >= deadline:
                    raise
                log.warning("Slurm unavailable, retrying job %s: %s", job.id, exc)
                self._sleep(self.retry_interval_s)

    def submit_many(self, jobs: list[Job], *, partition: str | None = None) -> list[str]:
        """Submit a batch: one lookup for the whole batch, then submissions in parallel."""
        known = self._tagged(self.driver.jobs())
        refs: list[str | None] = [known.get(job_tag(j.id, j.attempts)) for j in jobs]
        todo = [i for i, ref in enumerate(refs) if ref is None]
        requests = {i: build_request(jobs[i], partition=partition) for i in todo}
        with ThreadPoolExecutor(max_workers=self.parallelism) as pool:
            for i, job_id in zip(todo, pool.map(lambda i: self.driver.submit(requests[i]), todo)):
                refs[i] = str(job_id)
        return [str(r) for r in refs]

    @staticmethod
    def _tagged(jobs: Iterable[SlurmJob]) -> dict[str, str]:
        """crossdock tag → Slurm job id (the array job id for arrays)."""
        found: dict[str, str] = {}
        for j in jobs:
            if parse_tag(j.comment) is not None:
                found.setdefault(j.comment, str(j.array_job_id or j.job_id))
        return found

    # --- control ----------------------------------------------------------------------------

    def cancel(self, ref: str) -> None:
        self.driver.cancel(ref)

    def hold(self, ref: str) -> None:
        self.driver.hold(ref)

    def release(self, ref: str) -> None:
        self.driver.release(ref)

    def requeue(self, ref: str) -> None:
        self.driver.requeue(ref)

    def preempt(self, ref: str, grace_s: float = 0.0) -> None:
        """SIGTERM the job, give it ``grace_s`` to finish, then requeue (or cancel, per policy)."""
        if grace_s > 0:
            self.driver.signal(ref, "TERM")
            deadline = self._clock() + grace_s
            while self._clock() < deadline:
                current = self.status([ref]).get(ref)
                if current is None or current.state not in (JobState.RUNNING, JobState.SCHEDULED):
                    break
                self._sleep(min(0.5, max(deadline - self._clock(), 0)))
        if self.preempt_policy == "requeue":
            self.driver.requeue(ref)
        else:
            self.driver.cancel(ref)

    # --- follow -----------------------------------------------------------------------------

    def status(self, refs: Iterable[str]) -> dict[str, JobStatus]:
        """One batched query for every ref: a job id, an array task (``"12_3"``) or an array
        job id (summed over its tasks, which come in ``tasks``)."""
        wanted = list(refs)
        jobs = self.driver.jobs()
        by_ref: dict[str, JobStatus] = {}
        arrays: dict[str, dict[int, JobStatus]] = {}
        for j in jobs:
            for status in _statuses(j):
                by_ref[status.ref] = status
                if j.array_job_id is not None:
                    task = int(status.ref.split("_", 1)[1])
                    arrays.setdefault(str(j.array_job_id), {})[task] = status
        missing = [r for r in wanted if r not in arrays and r not in by_ref]
        if missing and self._has_accounting():
            for j in self.driver.history(missing):  # type: ignore[attr-defined]
                for status in _statuses(j):
                    by_ref.setdefault(status.ref, status)
        result: dict[str, JobStatus] = {}
        for ref in wanted:
            if ref in arrays:
                result[ref] = _sum_array(ref, arrays[ref])
            else:
                result[ref] = by_ref.get(ref) or JobStatus(ref, None, "NotFound")
        return result

    def _has_accounting(self) -> bool:
        if self._accounting is None:
            probe = getattr(self.driver, "accounting_enabled", None)
            self._accounting = bool(probe and probe())
        return self._accounting


def _statuses(j: SlurmJob) -> list[JobStatus]:
    translated = translate(j.state, j.reason)
    finished = translated.state.terminal or translated.state == JobState.PREEMPTED
    common = dict(
        state=translated.state,
        reason=translated.reason,
        exit_code=j.exit_code if finished else None,
        signal=j.signal if finished else None,
        slurm_state=j.state,
        nodes=j.nodes,
        restarts=j.restarts,
        tag=parse_tag(j.comment),
    )
    if j.array_pending_tasks:
        return [JobStatus(ref=f"{j.array_job_id}_{t}", **common) for t in j.array_pending_tasks]
    return [JobStatus(ref=j.ref, **common)]


def _sum_array(ref: str, tasks: dict[int, JobStatus]) -> JobStatus:
    states = {t.state for t in tasks.values()}
    if states & {JobState.RUNNING, JobState.SCHEDULED}:
        state = JobState.RUNNING
    elif JobState.PENDING in states:
        state = JobState.PENDING
    elif states == {JobState.COMPLETED}:
        state = JobState.COMPLETED
    else:
        state = next(s for s in _ARRAY_OUTCOME if s in states)
    reasons = [t.reason for t in tasks.values() if t.state == state]
    codes = [t.exit_code for t in tasks.values() if t.exit_code is not None]
    first = next(iter(tasks.values()))
    return JobStatus(
        ref=ref,
        state=state,
        reason=reasons[0] if reasons else "None",
        exit_code=max(codes) if state.terminal and codes else None,
        slurm_state=state.value,
        restarts=max(t.restarts for t in tasks.values()),
        tag=first.tag,
        tasks=dict(sorted(tasks.items())),
    )


def _node_inventory(n: SlurmNode, foreign_cpus: int, foreign_gpus: int) -> NodeInventory:
    base = n.state.rstrip("*~#!%$@^-")
    schedulable = base in ACTIVE_NODE_STATES and not (set(n.flags) & UNSCHEDULABLE_FLAGS)
    return NodeInventory(
        name=n.name,
        partitions=n.partitions,
        state=base,
        schedulable=schedulable,
        cpus=n.cpus,
        cpus_alloc=n.cpus_alloc,
        memory_mib=n.memory_mib,
        memory_alloc_mib=n.memory_alloc_mib,
        gpus=n.gpus,
        gpus_alloc=n.gpus_alloc,
        foreign_cpus=foreign_cpus,
        foreign_gpus=foreign_gpus,
    )
