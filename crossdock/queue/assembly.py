"""How a cycle's snapshot is put together from job records and backend inventories (pure).

The leader reads the store and the backends; everything it then decides about those records —
what each placed job holds on its nodes, which other jobs the pending ones depend on, how much
each queue and user used since the last cycle — is computed here, so that the simulator, the
benchmarks and tests build snapshots the same way the live scheduler does.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Mapping, Sequence

from crossdock.queue.config import ClusterConfig
from crossdock.queue.cycle import facts_of
from crossdock.queue.models import DependencyType, Job
from crossdock.queue.scheduler.fairshare import accrue, dominant_share
from crossdock.queue.scheduler.licenses import in_use
from crossdock.queue.snapshot import DELETION_CANDIDATE, Allocation, JobFacts, Node, Snapshot
from crossdock.queue.states import JobState


def allocations_of(job: Job, config: ClusterConfig) -> list[Allocation]:
    """What a placed job holds: one allocation per node, its GPUs on their node."""
    pc = config.priority_classes.get(job.priority_class)
    cpu = job.alloc_cpu_milli or job.spec.cpus_per_node() * 1000
    mem = job.alloc_mem_mib or job.spec.mem_per_node(0)
    by_node: dict[str, list[str]] = {}
    for g in job.gpu_ids:
        by_node.setdefault(g.rsplit(":", 1)[0], []).append(g)
    service = job.spec.service.name if job.spec.service is not None else None
    return [Allocation(job.id, node, cpu, mem, tuple(by_node.get(node, ())), priority=job.priority,
                       preemptible=job.preemptible and service is None, queue=job.queue, user=job.spec.user, start_time=job.start_time,
                       time_limit_seconds=job.spec.time_limit_seconds, grace_seconds=pc.grace_seconds if pc else 0,
                       group=job.array_job_id, terminating=job.preempt_requested,
                       service=service)
            for node in job.nodes]


@dataclass(frozen=True)
class Wanted:
    """Jobs the pending ones refer to: by id (dependencies, with every task of an array) and by
    (user, name) for singletons."""

    ids: frozenset[int] = frozenset()
    names: frozenset[tuple[str, str]] = frozenset()


def dependency_targets(pending: Sequence[Job]) -> Wanted:
    ids: set[int] = set()
    names: set[tuple[str, str]] = set()
    for job in pending:
        dep = job.spec.dependency
        if dep is None:
            continue
        for d in dep.deps:
            if d.type is DependencyType.SINGLETON:
                names.add((job.spec.user, job.spec.display_name()))
            elif d.job_id is not None:
                ids.add(d.job_id)
    return Wanted(frozenset(ids), frozenset(names))


def running_shares(nodes: Sequence[Node], active: Sequence[Job]) -> list[tuple[str, str, float]]:
    """(queue, user, dominant share of the cluster) of every running job."""
    capacity = (sum(n.cpu_milli for n in nodes) or 1, sum(n.memory_mib for n in nodes) or 1,
                sum(len(n.gpus) for n in nodes) or 1)
    return [(j.queue, j.spec.user, dominant_share(
        (j.alloc_cpu_milli or j.spec.cpus_per_node() * 1000) * len(j.nodes),
        j.alloc_mem_mib * len(j.nodes), len(j.gpu_ids), capacity))
        for j in active if j.state is JobState.RUNNING]


def accrue_usage(usage: Mapping[str, float], last: float | None, now: float, nodes: Sequence[Node],
                 active: Sequence[Job], config: ClusterConfig) -> dict[str, float]:
    """Decay fair-share usage and add each running job's dominant share for the time since the
    last accrual (Slurm's fair share with a half-life)."""
    half_life = config.scheduler.fairshare_half_life_minutes * 60
    elapsed = max(now - (now if last is None else last), 0.0)
    return accrue(dict(usage), running_shares(nodes, active), elapsed, half_life)


@dataclass(frozen=True)
class Records:
    """What the leader read for one cycle."""

    pending: Sequence[Job]
    active: Sequence[Job]
    nodes: Sequence[Node]
    foreign: Sequence[Allocation] = ()
    wanted: frozenset[int] = frozenset()
    """Every job the pending ones depend on (:func:`dependency_targets`, arrays and names resolved)."""
    others: Mapping[int, JobFacts] = field(default_factory=dict)
    """Facts of the ``wanted`` jobs that are neither pending nor active."""
    nominations: Mapping[int, str] = field(default_factory=dict)
    usage: Mapping[str, float] = field(default_factory=dict)
    destinations: Mapping[int, str] = field(default_factory=dict)
    """The descheduler's reserved destinations of moved jobs (job id -> node)."""
    soft_tainted: frozenset[str] = frozenset()
    """The autoscaler's deletion candidates: nodes that get its ``PreferNoSchedule`` taint."""


def build_snapshot(records: Records, config: ClusterConfig) -> Snapshot:
    """The immutable picture the cycle decides on."""
    allocations = list(records.foreign)
    running_per_array: dict[int, int] = {}
    backend_queued: dict[str, int] = {}
    for job in records.active:
        allocations.extend(allocations_of(job, config))
        if job.array_job_id is not None:
            running_per_array[job.array_job_id] = running_per_array.get(job.array_job_id, 0) + 1
        if job.state is JobState.SCHEDULED and not job.nodes and job.pool:
            backend_queued[job.pool] = backend_queued.get(job.pool, 0) + 1
    known = {j.id: j for j in [*records.pending, *records.active]}
    facts = dict(records.others)
    facts.update({i: facts_of(j) for i, j in known.items() if i in records.wanted})
    pending_ids = {j.id for j in records.pending}
    soft = records.soft_tainted
    nodes = tuple(replace(n, taints=(*n.taints, DELETION_CANDIDATE))
                  if n.name in soft and DELETION_CANDIDATE not in n.taints else n for n in records.nodes)
    return Snapshot(nodes=nodes, allocations=tuple(allocations), jobs=facts,
                    running_per_array=running_per_array, usage=dict(records.usage),
                    nominations={k: v for k, v in records.nominations.items() if k in pending_ids},
                    backend_queued=backend_queued,
                    licenses_in_use=in_use((j.spec.licenses for j in records.active), config.licenses)
                    if config.licenses else {},
                    destinations={k: v for k, v in records.destinations.items() if k in known})
