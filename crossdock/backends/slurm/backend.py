"""The Slurm backend: inventory, idempotent dispatch, batched follow, cancel and preempt.

Every job crossdock submits carries ``crossdock:<job id>:<attempt>@<installation>`` in its Slurm
comment (:class:`Tags`).
Before submitting, the backend looks for that tag, so a dispatch task that runs twice (a
Celery retry, a worker that died after sbatch returned) finds the job instead of submitting
it again. While slurmctld is unreachable, submission retries (looking for the tag again
before every try) for ``submit_retry_s``, then raises :class:`SlurmUnavailable` (retryable).

Placement: a job's pool names its partition (``pools.<name>.partition``), the nodes the
scheduler chose become ``--nodelist``. A crossdock array task dispatched alone is a plain
Slurm job that carries its task's environment; :meth:`SlurmBackend.submit_array` sends
many tasks of one array as one Slurm array (``--array=ids%throttle``).

Preemption: SIGTERM at once; the store records the deadline, and the status pass after it
stops what still runs: ``scancel`` (policy ``cancel``, the default) or ``scontrol requeue``
(policy ``requeue``: Slurm's own requeue, then crossdock cancels the requeued Slurm job so it
cannot restart on the GPU that was freed). Either way the follower ends the attempt PREEMPTED
however the job exited, and crossdock requeues the job as a new attempt. Eviction (the
descheduler's, ``evict``) is the same path with Slurm's requeue: ``scontrol requeue`` at once
without grace, else SIGTERM now and, after the grace, the preemption policy's stop. Jobs Slurm itself
preempts for a higher partition tier (no crossdock preemption) come back as PENDING with
``restarts`` counted in ``extra``.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any, Literal

from crossdock.queue.ports import BackendStatus, Capabilities, Eviction, Inventory, StopRequests
from crossdock.backends.slurm.cli import CliDriver
from crossdock.backends.slurm.estimate import StartEstimates
from crossdock.backends.slurm.power import (
    POWER_LABEL,
    POWERED_DOWN,
    PROVISIONER,
    UNSCHEDULABLE_FLAGS,
    PowerSave,
    power_state,
    resume_failed,
)
from crossdock.backends.slurm.driver import (
    SlurmDriver,
    SlurmError,
    SlurmJob,
    SlurmNode,
    SlurmPartition,
    SlurmUnavailable,
    SubmitRejected,
    SubmitRequest,
)
from crossdock.backends.slurm.request import (
    array_file_patterns,
    Tags,
    build_request,
    groupable,
    job_tag,
)
from crossdock.backends.slurm.launch import LAUNCH_LOST, LaunchWatch, grace_s as launch_grace_s
from crossdock.backends.slurm.rest import RestDriver
from crossdock.backends.slurm.states import format_array_tasks, translate
from crossdock.queue.config import ClusterConfig
from crossdock.queue.models import Job
from crossdock.queue.snapshot import Allocation, GpuDevice, Node
from crossdock.queue.states import JobState, Reason

log = logging.getLogger(__name__)

ACTIVE_NODE_STATES = frozenset({"idle", "mixed", "allocated", "completing"})
GPU_TYPES_REFRESH_SECONDS = 60.0
RESUME_FAILED = "ResumeFailed"
"""The reason of an attempt stranded on a node that did not come up (``_strand_checks``)."""
# Worst first: how an array whose tasks ended differently is summed up.
_ARRAY_OUTCOME = (JobState.NODE_FAIL, JobState.OUT_OF_MEMORY, JobState.TIMEOUT, JobState.FAILED,
                  JobState.CANCELLED, JobState.PREEMPTED)


@dataclass(frozen=True)
class JobStatus:
    """What Slurm says about one Slurm job id or array task (``"12"``, ``"12_3"``).

    ``state`` is None when Slurm no longer knows the reference (purged after MinJobAge and
    no accounting to ask). An array job id sums up its tasks, which come in ``tasks``.
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
class ClusterView:
    """Slurm's own picture: partitions, nodes (with partitions and GPU types), foreign jobs."""

    partitions: list[SlurmPartition]
    nodes: list[SlurmNode]
    foreign_jobs: list[SlurmJob]
    """Jobs holding resources that crossdock did not submit."""


class SlurmBackend(PowerSave, StartEstimates):
    kind = "slurm"
    capabilities = Capabilities(arrays=True, batches=True, reowns_claims=True, backend_queue=True, partitions=True,
                                provisioners=(PROVISIONER,), estimates_start=True, signals=True, evicts=True)

    def __init__(
        self,
        driver: SlurmDriver,
        *,
        config: ClusterConfig | None = None,
        store: StopRequests | None = None,
        preempt_policy: Literal["requeue", "cancel"] = "cancel",
        submit_retry_s: float = 90.0,
        retry_interval_s: float = 1.0,
        parallelism: int = 4,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        prefix: str | None = None,
        installation: Callable[[], tuple[str, bool]] | None = None,
    ):
        self.driver = driver
        # the tags' installation prefix, fixed here: a process holding two installations' backends
        # (or whose environment changes later) still tags and finds each one's own jobs
        self.prefix = os.environ.get("CROSSDOCK_PREFIX", "cd") if prefix is None else prefix
        self._installation, self._tags = installation, None
        """The store's identity and whether it knows legacy tags (:class:`Tags`), asked once, when
        first needed (a backend is built before the store may answer)."""
        self.config = config
        self.store = store
        self.preempt_policy = preempt_policy
        self.submit_retry_s = submit_retry_s
        self.retry_interval_s = retry_interval_s
        self.parallelism = parallelism
        self._clock, self._sleep = clock, sleep
        self._launches: LaunchWatch | None = None
        """Made at the first status pass that can read how long Slurm lets a launch take."""
        self._accounting: bool | None = None
        self._gpu_types: dict[str, dict[str, str]] = {}
        """Node → crossdock's GPU model name (upper-cased) → the GRES type as the node spells it."""
        self._gpu_types_at = float("-inf")
        self._estimates, self._estimate_window, self._power = {}, [float("-inf"), 0], {}

    @classmethod
    def from_env(cls, env: Mapping[str, str], driver: str = "cli", **kwargs: Any) -> "SlurmBackend":
        """``driver``: ``cli``, ``rest`` (JWT over TCP) or ``rest-unix`` (local auth). The REST
        drivers fall back to the CLI for what v0.0.38 lacks (requeue, hold, release, sstat)."""
        cli = CliDriver(env)
        if driver == "cli":
            return cls(cli, **kwargs)
        transport = "unix" if driver == "rest-unix" else "jwt"
        return cls(RestDriver.from_env(env, transport=transport, fallback=cli), **kwargs)

    @property
    def tags(self) -> Tags:
        if self._tags is None:
            ident, legacy = self._installation() if self._installation is not None else ("", True)
            self._tags = Tags(self.prefix, ident, legacy)
        return self._tags

    # --- pools ------------------------------------------------------------------------------

    def _slurm_pools(self) -> dict[str, str]:
        """Configured slurm pool → partition, in config order."""
        if self.config is None:
            return {}
        return {name: p.partition for name, p in self.config.pools.items() if p.backend == "slurm" and p.partition}

    def partition_of(self, job: Job) -> str | None:
        pools = self._slurm_pools()
        if job.pool and job.pool in pools:
            return pools[job.pool]
        return job.spec.partition

    # --- inventory --------------------------------------------------------------------------

    def cluster(self) -> ClusterView:
        nodes, partitions, jobs = self.driver.nodes(), self.driver.partitions(), self.driver.jobs()
        foreign = [j for j in jobs if self.tags.key(j.comment) is None and translate(j.state).state.active]
        return ClusterView(partitions, nodes, foreign)

    def inventory(self) -> Inventory:
        """Nodes of the configured slurm pools (every node, pooled by its first partition, when
        there is no config) and the capacity foreign jobs hold on them."""
        view = self.cluster()
        self._gpu_types_at = self._clock()
        pools = self._slurm_pools()
        members = {p.name: set(p.nodes) for p in view.partitions}
        nodes: list[Node] = []
        for n in view.nodes:
            if pools:
                pool = next((name for name, part in pools.items() if n.name in members.get(part, ())), None)
            else:
                pool = n.partitions[0] if n.partitions else None
            if pool is not None:
                nodes.append(self._node(n, pool))
        known = {n.name: n for n in nodes}
        return Inventory(tuple(nodes), tuple(_foreign_allocations(view.foreign_jobs, known)))

    def _node(self, n: SlurmNode, pool: str) -> Node:
        pool_cfg = self.config.pools.get(pool) if self.config is not None else None
        gpus: list[GpuDevice] = []
        types = self._gpu_types[n.name] = {}
        for kind, count in sorted(n.gpus.items()):
            model = (pool_cfg.gpu.model if pool_cfg and pool_cfg.gpu.model else kind.upper()) or "GPU"
            if kind:
                types.setdefault(model.upper(), kind)
            gpus += [GpuDevice(f"{n.name}:{len(gpus) + i}", len(gpus) + i, model) for i in range(count)]
        base = n.state.rstrip("*~#!%$@^-")
        power = self._power[n.name] = power_state(n)
        schedulable = base in ACTIVE_NODE_STATES and not (set(n.flags) & UNSCHEDULABLE_FLAGS)
        if power == POWERED_DOWN and self._powered_by_crossdock(pool_cfg):
            schedulable = False  # spare: the autoscaler powers it up (see crossdock.backends.slurm.power)
        return Node(
            name=n.name, pool=pool, backend=self.kind, cpu_milli=n.cpus * 1000, memory_mib=n.memory_mib,
            gpus=tuple(gpus), labels=MappingProxyType({"slurm.partitions": ",".join(n.partitions), POWER_LABEL: power}),
            gpu_sharing=False, schedulable=schedulable,
        )

    def _powered_by_crossdock(self, pool_cfg: Any) -> bool:
        """A ``power_save`` pool's powered-down nodes wait for the autoscaler; any other pool's are
        powered up by Slurm when a job is placed there."""
        enabled = self.config is not None and self.config.autoscaler.enabled
        return enabled and pool_cfg is not None and pool_cfg.provisioner == PROVISIONER

    def gpu_types(self, job: Job) -> dict[str, str]:
        """crossdock's GPU model name (upper-cased) → the GRES type Slurm knows, on the job's
        nodes first, then anywhere: ``--gres=gpu:A100:1`` must reach sbatch as the node's
        ``a100``. Learnt from the inventory, looked up again (at most once a minute) for a
        model it does not know yet."""
        req = job.spec.gpu_request()
        wanted = {m.upper() for m in req.allowed_models()} if req is not None else set()
        if not wanted:
            return {}

        def known() -> dict[str, str]:
            found: dict[str, str] = {}
            for name in [*job.nodes, *self._gpu_types]:
                for model, kind in self._gpu_types.get(name, {}).items():
                    found.setdefault(model, kind)
            return found

        found = known()
        if not wanted <= set(found) and self._clock() - self._gpu_types_at > GPU_TYPES_REFRESH_SECONDS:
            try:
                self.inventory()
            except SlurmError as exc:  # unknown, the type goes as given and sbatch says what is wrong
                self._gpu_types_at = self._clock()
                log.warning("GPU types of Slurm's nodes unavailable: %s", exc)
            found = known()
        return found

    # --- dispatch ---------------------------------------------------------------------------

    def own_jobs(self) -> list[SlurmJob]:
        """The Slurm jobs this installation submitted (its tag in the comment), for follow and
        the idempotency lookup; a driver without ``own_jobs`` lists everything."""
        prefix = job_tag(0, 0, self.prefix).rsplit(":", 2)[0] + ":"
        own = getattr(self.driver, "own_jobs", None)
        listed = own(prefix) if own is not None else [j for j in self.driver.jobs() if j.comment.startswith(prefix)]
        return [j for j in listed if self.tags.key(j.comment) is not None]

    def find(self, job: Job, jobs: Iterable[SlurmJob] | None = None) -> str | None:
        """The Slurm job id of ``job``'s current attempt if it was already submitted."""
        return self._tagged(self.own_jobs() if jobs is None else jobs).get(self.tags.job(job.id, job.attempts))

    def submit(
        self,
        job: Job,
        fresh: bool = False,
        *,
        partition: str | None = None,
        nodelist: list[str] | None = None,
        slurm_ids: Mapping[int, str] | None = None,
    ) -> str:
        """Submit ``job`` (idempotent per job id and attempt); returns its Slurm job id.

        Placement: ``partition`` or the job's pool's partition or ``--partition``; ``nodelist``
        or the nodes the scheduler chose (``job.nodes``) or ``--nodelist``. ``slurm_ids``
        (crossdock id → Slurm id) makes Slurm enforce the spec's dependencies. ``fresh``: the
        caller knows this attempt was never submitted (skips the look for its tag)."""
        request = build_request(
            job,
            partition=partition or self.partition_of(job),
            nodelist=nodelist if nodelist is not None else (job.nodes or None),
            slurm_ids=slurm_ids,
            gpu_types=self.gpu_types(job),
            tags=self.tags,
        )
        return self._submit_once(self.tags.job(job.id, job.attempts), request, lookup=not fresh)

    def submit_array(self, tasks: Sequence[Job], throttle: int | None = None, fresh: bool = False) -> dict[int, str]:
        """Tasks of one crossdock array (same attempt) as one Slurm array; returns crossdock job
        id → ``"<slurm id>_<task>"``. Idempotent per group: a replay finds the array by its tag.

        ``throttle`` (default: the spec's ``%max_running``) becomes ``--array=…%throttle``.
        ``fresh``: the caller has just claimed every task for the first time, so nothing can
        carry the group's tag yet and the look for it (a listing of every job) is skipped.
        The tasks see Slurm's own ``SLURM_ARRAY_JOB_ID`` and crossdock's in ``CROSSDOCK_ARRAY_JOB_ID``.
        Placement is the pool's partition (and the spec's own ``--nodelist``): crossdock's
        per-task node choice is not passed, since ``--nodelist`` on an array binds every task
        to all of the listed nodes; Slurm places each task within the partition."""
        if not tasks:
            return {}
        first = tasks[0]
        if first.array_job_id is None or any(
            t.array_job_id != first.array_job_id or t.attempts != first.attempts or t.array_task_id is None
            for t in tasks
        ):
            raise SubmitRejected("submit_array: give tasks of one array with the same attempt")
        ids = sorted(t.array_task_id for t in tasks)  # type: ignore[misc]
        if throttle is None:
            throttle = first.spec.array.max_running if first.spec.array is not None else None
        throttle = throttle if throttle and throttle < len(ids) else None
        if not groupable(first.spec):
            return self._submit_tasks(tasks, throttle, fresh)
        whole = first.model_copy(update={"id": first.array_job_id, "array_job_id": None, "array_task_id": None,
                                         "nodes": [], "gpu_ids": []})
        request = build_request(whole, partition=self.partition_of(first), gpu_types=self.gpu_types(whole),
                                tags=self.tags)
        # File names carry crossdock's array id, as when its tasks are dispatched one by one.
        stdout, stderr = array_file_patterns(first.spec, first.array_job_id)
        env = {k: v for k, v in request.env.items() if k != "CROSSDOCK_JOB_ID"}  # one task's id: not the group's
        env["CROSSDOCK_ARRAY_JOB_ID"] = str(first.array_job_id)
        tag = self.tags.group(first.array_job_id, first.attempts,
                              None if first.spec.array is None or ids[0] == min(first.spec.array.task_ids) else ids[0])
        request = replace(
            request,
            env=env,
            comment=self.tags.written(tag),
            array=format_array_tasks(ids, throttle),
            stdout=stdout,
            stderr=stderr,
        )
        slurm_id = self._submit_once(tag, request, lookup=not fresh)
        return {t.id: f"{slurm_id}_{t.array_task_id}" for t in tasks}

    def _submit_tasks(self, tasks: Sequence[Job], throttle: int | None, fresh: bool) -> dict[int, str]:
        """Tasks of one array as one Slurm job each, for file names that name each task's own
        crossdock id (``%j``), which one Slurm array cannot; ``throttle`` is kept by chaining:
        the n-th task waits (``afterany``) for the one ``throttle`` places before it."""
        ordered = sorted(tasks, key=lambda t: t.array_task_id or 0)
        refs: dict[int, str] = {}
        for n, task in enumerate(ordered):
            request = build_request(task, partition=self.partition_of(task), gpu_types=self.gpu_types(task),
                                    tags=self.tags)
            if throttle and n >= throttle:
                request = replace(request, dependency=f"afterany:{refs[ordered[n - throttle].id]}")
            refs[task.id] = self._submit_once(self.tags.job(task.id, task.attempts), request, lookup=not fresh)
        return refs

    def _submit_once(self, tag: str, request: SubmitRequest, lookup: bool = True) -> str:
        """Submit unless a job with ``tag`` exists. ``lookup=False`` skips that look on the first
        try only (the caller knows nothing was submitted under the tag); a retry always looks."""
        # Hand-written rather than tenacity: the deadline is on the backend's own clock (``clock=``,
        # which the tests drive with ``sleep=``; tenacity's stop_after_delay reads time.monotonic),
        # and a retry differs from the first try (it looks for the tag again).
        deadline = self._clock() + self.submit_retry_s
        while True:
            try:
                existing = self._tagged(self.own_jobs()).get(tag) if lookup else None
                lookup = True
                if existing is not None:
                    log.info("%s already in Slurm as %s", tag, existing)
                    return existing
                ref = str(self.driver.submit(request))
                log.info("%s submitted to Slurm as %s", tag, ref)
                return ref
            except SlurmUnavailable as exc:
                if self._clock() >= deadline:
                    raise
                log.warning("Slurm unavailable, retrying %s: %s", tag, exc)
                self._sleep(self.retry_interval_s)

    def submit_many(self, jobs: list[Job], *, partition: str | None = None) -> list[str]:
        """Submit a batch: one lookup for the whole batch, then submissions in parallel."""
        known = self._tagged(self.own_jobs())
        refs: list[str | None] = [known.get(self.tags.job(j.id, j.attempts)) for j in jobs]
        todo = [i for i, ref in enumerate(refs) if ref is None]
        requests = {i: build_request(jobs[i], partition=partition or self.partition_of(jobs[i]),
                                     gpu_types=self.gpu_types(jobs[i]), tags=self.tags) for i in todo}
        with ThreadPoolExecutor(max_workers=self.parallelism) as pool:
            for i, job_id in zip(todo, pool.map(lambda i: self.driver.submit(requests[i]), todo)):
                refs[i] = str(job_id)
        return [str(r) for r in refs]

    def _groups(self, jobs: Iterable[SlurmJob]) -> dict[tuple[int, int], list[str]]:
        """(crossdock array id, attempt) → the Slurm array ids of its groups."""
        found: dict[tuple[int, int], list[str]] = {}
        for j in jobs:
            tag = self.tags.parse(j.comment)
            if tag is not None and j.array_job_id is not None:
                ids = found.setdefault(tag, [])
                if str(j.array_job_id) not in ids:
                    ids.append(str(j.array_job_id))
        return found

    def _tagged(self, jobs: Iterable[SlurmJob]) -> dict[str, str]:
        """crossdock tag → Slurm job id (the array job id for arrays)."""
        found: dict[str, str] = {}
        for j in jobs:
            if (key := self.tags.key(j.comment)) is not None:
                found.setdefault(key, str(j.array_job_id or j.job_id))
        return found

    # --- control ----------------------------------------------------------------------------

    def _ref(self, job: Job | str) -> str | None:
        if isinstance(job, str):
            return job
        if job.backend_ref:
            return job.backend_ref
        if job.array_job_id is not None and job.array_task_id is not None:
            records = self.own_jobs()
            ref = _task_ref(job, self._groups(records), self._status_refs)
            if ref is not None:
                return ref
            return self.find(job, records)
        return self.find(job)

    def cancel(self, job: Job | str) -> None:
        ref = self._ref(job)
        if ref is not None:
            self.driver.cancel(ref)

    def hold(self, job: Job | str) -> None:
        if (ref := self._ref(job)) is not None:
            self.driver.hold(ref)

    def release(self, job: Job | str) -> None:
        if (ref := self._ref(job)) is not None:
            self.driver.release(ref)

    def requeue(self, job: Job | str) -> None:
        if (ref := self._ref(job)) is not None:
            self.driver.requeue(ref)

    def preempt(self, job: Job | str, grace_seconds: float = 0) -> None:
        """SIGTERM the job and return: the grace period is a state, not a wait. The store records
        its deadline (``request_preempt``); the status pass after it calls :meth:`stop_preempted`
        on what still runs. Without grace the job is stopped at once."""
        ref = self._ref(job)
        if ref is None:
            return
        if grace_seconds <= 0:
            self.stop_preempted(ref)
            return
        try:
            self.driver.signal(ref, "TERM")
        except SlurmUnavailable:
            raise
        except SlurmError as exc:  # not started yet, or ended: the deadline the leader recorded still holds
            log.warning("SIGTERM to Slurm job %s failed: %s", ref, exc)
            return
        if self.store is not None and isinstance(job, Job):
            self.store.request_preempt(job.id, grace_seconds)  # the grace counts from the signal

    def evict(self, job: Job, grace_seconds: int) -> Eviction:
        """Move ``job`` off its nodes for the descheduler: a preemption whose stop is Slurm's requeue.
        Without grace ``scontrol requeue`` at once; with grace SIGTERM now and the stop after it
        (``stop_preempted``). The store marks the attempt preempted, so the status pass cancels the
        job Slurm requeued (it must not start again where it was) and crossdock requeues it as a
        new attempt for the place the descheduler reserved. Slurm has no disruption budgets of its
        own: crossdock's (``descheduler.budgets``) are checked before this is called."""
        ref = self._ref(job)
        # Only a running job moves; and Slurm would requeue a finished batch job too (it runs again).
        if ref is None or self.status_refs([ref])[ref].state is not JobState.RUNNING:
            return Eviction.GONE
        try:
            if grace_seconds <= 0:
                self.driver.requeue(ref)
            else:
                self.driver.signal(ref, "TERM")
        except SlurmUnavailable:
            raise
        except SlurmError as exc:  # ended (or never started) meanwhile: nothing runs to move
            log.info("job %s: evicting Slurm job %s found nothing running: %s", job.id, ref, exc)
            return Eviction.GONE
        if self.store is not None:
            self.store.request_preempt(job.id, grace_seconds)
        log.info("job %s: evicted Slurm job %s (%s)", job.id, ref,
                 "requeued" if grace_seconds <= 0 else f"SIGTERM, {grace_seconds}s grace")
        return Eviction.EVICTED

    def stop_preempted(self, job: Job | str, requeued: bool = False) -> None:
        """The end of a preemption's grace period: ``scancel`` (policy ``cancel``) or ``scontrol
        requeue`` (policy ``requeue``). ``requeued``: Slurm already requeued this attempt once,
        so it is cancelled rather than requeued again."""
        ref = self._ref(job)
        if ref is None:
            return
        if self.preempt_policy == "requeue" and not requeued:
            self.driver.requeue(ref)
        else:
            self.driver.cancel(ref)

    def _settle_preemptions(self, job: Job, st: "JobStatus") -> JobState | None:
        """What a preempted attempt has become in Slurm, acting where crossdock must: after the
        grace period the job is stopped; an attempt Slurm requeued (``requeue`` policy) is
        cancelled there, so that Slurm cannot start it again on the GPU crossdock freed, and is
        reported PREEMPTED (crossdock requeues the job as a new attempt). None: no change."""
        if not job.preempt_requested or st.state is None:
            return None
        due = job.preempt_deadline is not None and job.preempt_deadline.timestamp() <= time.time()
        try:
            if st.state is JobState.PENDING:
                self.driver.cancel(st.ref)
                return JobState.PREEMPTED
            if due and st.state.active:
                self.stop_preempted(st.ref, requeued=st.restarts > 0)
        except SlurmError as exc:  # it may have ended meanwhile; the next pass looks again
            log.warning("job %s: stopping preempted Slurm job %s failed: %s", job.id, st.ref, exc)
        return None

    # --- follow -----------------------------------------------------------------------------

    def status(self, jobs: Sequence[Job]) -> dict[int, BackendStatus]:
        """One batched query for every job; jobs Slurm does not know are absent."""
        records = self.own_jobs()
        tagged = self._tagged(records)
        groups: dict[tuple[int, int], list[str]] | None = None
        refs: dict[int, str] = {}
        for job in jobs:
            ref = job.backend_ref or None
            if ref is None and job.array_job_id is not None and job.array_task_id is not None:
                # Not yet told its Slurm id (a dispatch that died before saving it): find the
                # Slurm array of its group that holds its task id.
                groups = self._groups(records) if groups is None else groups
                ref = _task_ref(job, groups, lambda refs: self._status_refs(refs, records))
            if ref is None:
                ref = tagged.get(self.tags.job(job.id, job.attempts))
            if ref is not None:
                refs[job.id] = ref
        found = self._status_refs(list(refs.values()), records)
        out: dict[int, BackendStatus] = {}
        gone: list[Job] = []
        for job in jobs:
            st = found.get(refs.get(job.id, ""))
            if st is None or st.state is None:
                gone.append(job)
                continue
            if st.tag is not None and st.tag[1] != job.attempts:
                continue  # a backend_ref left from an earlier attempt: this attempt is not in Slurm
            state, reason = st.state, st.reason
            if self._settle_preemptions(job, st) is JobState.PREEMPTED:
                state, reason = JobState.PREEMPTED, Reason.PREEMPTED
            out[job.id] = BackendStatus(
                ref=st.ref, state=state, reason=reason, exit_code=st.exit_code, signal=st.signal, nodes=st.nodes,
                native_state=st.slurm_state, extra={"restarts": str(st.restarts)},
            )
        out.update(self._vanished(gone, refs))
        self._strand_checks(jobs, out)
        self._launch_checks(jobs, out)
        return out

    def _strand_checks(self, jobs: Sequence[Job], out: dict[int, BackendStatus]) -> None:
        """Attempts that can never start where crossdock put them: pinned (``--nodelist``) to a node
        whose resume failed (DOWN after ``ResumeTimeout``), where Slurm would keep them pending for
        ever — requeued there by Slurm, or placed there from an inventory that did not show the
        failure yet (``ReqNodeNotAvail``). Each is cancelled in Slurm (it is pending: nothing of it
        runs) and reported NODE_FAIL, which the follower requeues as a new attempt that the
        scheduler places elsewhere. One node listing, only when such a job exists."""
        waiting = [j for j in jobs if j.nodes and j.id in out and out[j.id].state is JobState.PENDING
                   and (int(out[j.id].extra.get("restarts", "0")) > 0 or out[j.id].reason.startswith("ReqNodeNotAvail"))]
        if not waiting:
            return
        failed = resume_failed(self.driver.nodes())
        for job in waiting:
            st, lost = out[job.id], sorted(set(job.nodes) & failed)
            if not lost:
                continue
            try:
                self.driver.cancel(st.ref)
            except SlurmError as exc:  # the next pass looks again
                log.warning("job %s: cancelling Slurm job %s stranded on %s failed: %s", job.id, st.ref, lost, exc)
                continue
            log.warning("job %s: Slurm job %s waits for %s, which failed to resume; cancelled, crossdock requeues it",
                        job.id, st.ref, ",".join(lost))
            out[job.id] = replace(st, state=JobState.NODE_FAIL, reason=RESUME_FAILED)

    def _launch_checks(self, jobs: Sequence[Job], out: dict[int, BackendStatus]) -> None:
        """Attempts Slurm reports running whose batch script never reached their node (a launch
        lost across a slurmctld restart, :mod:`.launch`): each is cancelled in Slurm (nothing of it
        runs; the node is freed) and reported NODE_FAIL, which the follower requeues as a new attempt."""
        running = {(j.id, j.attempts): out[j.id].ref for j in jobs
                   if j.id in out and out[j.id].state is JobState.RUNNING}
        if self._launches is None:
            if not running:
                return
            try:
                self._launches = LaunchWatch(self._batch_launched, self._clock,
                                             launch_grace_s(self.driver.launch_timeout_s()))
            except SlurmError as exc:  # no check until it can be read: a grace too short would cancel jobs that run
                log.warning("Slurm's launch timeouts unreadable (%s): launches not checked this pass", exc)
                return
        for job_id, _ in self._launches.lost(running):
            st = out[job_id]
            try:
                self.driver.cancel(st.ref)
            except SlurmError as exc:  # the next pass looks again
                log.warning("job %s: cancelling Slurm job %s, whose launch was lost, failed: %s", job_id, st.ref, exc)
                continue
            log.warning("job %s: Slurm job %s runs on %s, which never got its batch script (a launch lost when"
                        " slurmctld restarted); cancelled, crossdock requeues it", job_id, st.ref, ",".join(st.nodes))
            out[job_id] = replace(st, state=JobState.NODE_FAIL, reason=LAUNCH_LOST)

    def _batch_launched(self, ref: str) -> bool | None:
        try:
            return self.driver.batch_launched(ref)
        except SlurmError:  # no way to ask (slurmrestd without the CLI beside it), or no answer
            return None

    def _vanished(self, jobs: list[Job], refs: Mapping[int, str]) -> dict[int, BackendStatus]:
        """Jobs Slurm no longer knows that crossdock asked to stop: a pending array task that is
        cancelled leaves no record at all in Slurm 22.05 (a pending plain job leaves a CANCELLED one)."""
        if not jobs or self.store is None:
            return {}
        stops = self.store.stop_requests([j.id for j in jobs])
        out: dict[int, BackendStatus] = {}
        for job in jobs:
            ref = refs.get(job.id) or job.backend_ref or ""
            stop = stops.get(job.id)
            if stop is None:
                continue
            if stop.cancel:
                out[job.id] = BackendStatus(ref, JobState.CANCELLED, Reason.CANCELLED_BY_USER, native_state="gone")
            elif stop.preempt:
                out[job.id] = BackendStatus(ref, JobState.PREEMPTED, Reason.PREEMPTED, native_state="gone")
        return out

    def status_refs(self, refs: Iterable[str]) -> dict[str, JobStatus]:
        """Like :meth:`status` for Slurm references: a job id, an array task (``"12_3"``) or an
        array job id (summed over its tasks)."""
        return self._status_refs(list(refs), self.driver.jobs())

    def _status_refs(self, wanted: list[str], records: list[SlurmJob]) -> dict[str, JobStatus]:
        by_ref: dict[str, JobStatus] = {}
        arrays: dict[str, dict[int, JobStatus]] = {}
        for j in records:
            for status in _statuses(j, self.tags):
                by_ref[status.ref] = status
                # A meta record with no task left to name (slurmrestd shows one for a throttled
                # array whose pending tasks were cancelled) stands for no task.
                if j.array_job_id is not None and "_" in status.ref:
                    task = int(status.ref.split("_", 1)[1])
                    arrays.setdefault(str(j.array_job_id), {})[task] = status
        missing = [r for r in wanted if r not in arrays and r not in by_ref]
        if missing and self._has_accounting():
            for j in self.driver.history(missing):  # type: ignore[attr-defined]
                for status in _statuses(j, self.tags):
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


def _task_ref(job: Job, groups: Mapping[tuple[int, int], list[str]],
              lookup: Callable[[list[str]], dict[str, JobStatus]]) -> str | None:
    """``"<slurm array>_<task>"`` of an array task from its group's Slurm array, if Slurm knows it."""
    candidates = [f"{a}_{job.array_task_id}" for a in groups.get((job.array_job_id, job.attempts), ())]  # type: ignore[arg-type]
    if not candidates:
        return None
    found = lookup(candidates)
    return next((r for r in candidates if found[r].state is not None), None)


def _statuses(j: SlurmJob, tags: Tags) -> list[JobStatus]:
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
        tag=tags.parse(j.comment),
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


def _foreign_allocations(jobs: list[SlurmJob], nodes: Mapping[str, Node]) -> list[Allocation]:
    """Capacity held by jobs crossdock did not submit. Without ``scontrol -d`` Slurm does not
    say which GPU a job holds, so foreign jobs are given devices from the top of each node
    (crossdock packs from the bottom)."""
    taken: dict[str, int] = {}
    out: list[Allocation] = []
    for job in jobs:
        share = max(len(job.nodes), 1)
        for name in job.nodes:
            node = nodes.get(name)
            if node is None:
                continue
            count = sum(job.gpus.values()) // share
            used = taken.get(name, 0)
            devices = [g.id for g in node.gpus][::-1][used:used + count]
            taken[name] = used + count
            out.append(Allocation(
                job_id=None, node=name, cpu_milli=job.cpus * 1000 // share, memory_mib=job.memory_mib // share,
                gpu_ids=tuple(devices),
                queue=f"slurm:{job.partition}", user=job.user,
            ))
    return out
