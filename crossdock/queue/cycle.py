"""One scheduling cycle: the seam every scheduler plugs into.

``run_cycle(snapshot, pending, config, now)`` reads the snapshot, decides, and returns a
:class:`CycleResult`; it performs no I/O. The caller commits the decisions atomically and
dispatches them.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import Sequence

from crossdock.queue.config import ClusterConfig
from crossdock.queue.dependencies import DepStatus, evaluate
from crossdock.queue.models import Job
from crossdock.queue.snapshot import JobFacts, Node, Snapshot
from crossdock.queue.states import Reason


@dataclass(frozen=True, slots=True)
class Placement:
    """Run ``job_id`` on ``nodes`` (one entry per node) with these devices and amounts per node."""

    job_id: int
    pool: str
    backend: str
    nodes: tuple[str, ...]
    gpu_ids: tuple[str, ...] = ()
    cpu_milli: int = 0
    memory_mib: int = 0


@dataclass(frozen=True, slots=True)
class Preemption:
    victim_id: int
    preemptor_id: int
    grace_seconds: int
    requeue: bool = True


@dataclass
class CycleResult:
    admitted: list[Placement] = field(default_factory=list)
    preemptions: list[Preemption] = field(default_factory=list)
    cancelled: dict[int, str] = field(default_factory=dict)
    """Jobs to cancel, with the reason (e.g. DependencyNeverSatisfied)."""
    pending: dict[int, str] = field(default_factory=dict)
    """Every job left pending, with the reason."""
    explanations: dict[int, str] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)


def facts_of(job: Job) -> JobFacts:
    return JobFacts(id=job.id, state=job.state, exit_code=job.exit_code, name=job.spec.display_name(),
                    user=job.spec.user, array_job_id=job.array_job_id, array_task_id=job.array_task_id,
                    end_time=job.end_time, start_time=job.start_time)


def eligibility(job: Job, snapshot: Snapshot, now: datetime, running_per_array: dict[int, int]) -> str | None:
    """None when ``job`` may be placed now; else the pending reason (or DependencyNeverSatisfied)."""
    if job.spec.hold:
        return Reason.JOB_HELD_USER
    if job.eligible_time is not None and job.eligible_time > now:
        return Reason.BEGIN_TIME
    dep = evaluate(job.spec.dependency, facts_of(job), snapshot.jobs, now)
    if dep is DepStatus.NEVER:
        return Reason.DEPENDENCY_NEVER_SATISFIED
    if dep is DepStatus.WAITING:
        return Reason.DEPENDENCY
    arr = job.spec.array
    if job.array_job_id is not None and arr is not None and arr.max_running is not None:
        if running_per_array.get(job.array_job_id, 0) >= arr.max_running:
            return Reason.ARRAY_TASK_LIMIT
    return None


def order(pending: Sequence[Job]) -> list[Job]:
    """Priority class value first, then nice (lower first), then submit order."""
    return sorted(pending, key=lambda j: (-j.priority, j.spec.nice, j.id))


class _Free:
    """Free capacity per node, mutated as the cycle places jobs."""

    def __init__(self, snapshot: Snapshot):
        self.nodes = {n.name: n for n in snapshot.nodes}
        self.cpu = {n.name: n.cpu_milli for n in snapshot.nodes}
        self.mem = {n.name: n.memory_mib for n in snapshot.nodes}
        self.gpus = {n.name: [g for g in n.gpus] for n in snapshot.nodes}
        for a in snapshot.allocations:
            if a.node not in self.nodes:
                continue
            self.cpu[a.node] -= a.cpu_milli
            self.mem[a.node] -= a.memory_mib
            used = set(a.gpu_ids)
            self.gpus[a.node] = [g for g in self.gpus[a.node] if g.id not in used]

    def take(self, node: Node, cpu: int, mem: int, ngpu: int, models: list[str]) -> tuple[str, ...] | None:
        if not node.schedulable or self.cpu[node.name] < cpu or self.mem[node.name] < mem:
            return None
        wanted = {m.lower() for m in models}
        usable = [g for g in self.gpus[node.name] if not wanted or g.model.lower() in wanted]
        if len(usable) < ngpu:
            return None
        chosen = usable[:ngpu]
        self.cpu[node.name] -= cpu
        self.mem[node.name] -= mem
        ids = {g.id for g in chosen}
        self.gpus[node.name] = [g for g in self.gpus[node.name] if g.id not in ids]
        return tuple(g.id for g in chosen)

    def give_back(self, node: str, cpu: int, mem: int, gpu_ids: tuple[str, ...]) -> None:
        self.cpu[node] += cpu
        self.mem[node] += mem
        self.gpus[node].extend(g for g in self.nodes[node].gpus if g.id in set(gpu_ids))


def _place(job: Job, pools: Sequence[str], free: _Free, cfg: ClusterConfig) -> Placement | None:
    spec = job.spec
    ratio = cfg.queues[job.queue].cpu_request_ratio if job.queue in cfg.queues else 1.0
    cpu = max(1, int(spec.cpus_per_node() * 1000 * ratio))
    req = spec.gpu_request()
    models = req.allowed_models() if req else []
    ngpu = spec.gpus_per_node()
    for pool in pools:
        candidates = [n for n in free.nodes.values() if n.pool == pool
                      and (not spec.nodelist or n.name in spec.nodelist) and n.name not in spec.exclude]
        taken: list[tuple[str, tuple[str, ...], int]] = []
        for node in candidates:
            mem = spec.mem_per_node(cfg.scheduler.default_mem_per_cpu_mib * spec.cpus_per_node()) or node.memory_mib
            got = free.take(node, cpu, mem, ngpu, models)
            if got is not None:
                taken.append((node.name, got, mem))
                if len(taken) == spec.nodes:
                    break
        if len(taken) == spec.nodes:
            first = free.nodes[taken[0][0]]
            return Placement(job.id, pool, first.backend, tuple(t[0] for t in taken),
                             tuple(g for t in taken for g in t[1]), cpu, taken[0][2])
        for name, got, mem in taken:  # a gang is all or nothing
            free.give_back(name, cpu, mem, got)
    return None


def run_cycle(snapshot: Snapshot, pending: Sequence[Job], config: ClusterConfig, now: datetime) -> CycleResult:
    result = CycleResult()
    t0 = time.perf_counter()
    # 1. eligibility: holds, begin times, dependencies, array throttles
    running_per_array = dict(snapshot.running_per_array)
    eligible: list[Job] = []
    for job in order(pending):
        reason = eligibility(job, snapshot, now, running_per_array)
        if reason == Reason.DEPENDENCY_NEVER_SATISFIED:
            result.cancelled[job.id] = reason
        elif reason is not None:
            result.pending[job.id] = reason
        else:
            eligible.append(job)
            if job.array_job_id is not None:
                running_per_array[job.array_job_id] = running_per_array.get(job.array_job_id, 0) + 1
    t1 = time.perf_counter()
    # 2. place in order, first fit
    free = _Free(snapshot)
    blocked = False
    for job in eligible:
        pools = job.pools or (config.pools_of(job.queue) if job.queue in config.queues else [])
        placement = _place(job, pools, free, config)
        if placement is None:
            result.pending[job.id] = Reason.PRIORITY if blocked else Reason.RESOURCES
            blocked = True
            if job.array_job_id is not None:
                running_per_array[job.array_job_id] -= 1
        else:
            result.admitted.append(placement)
    t2 = time.perf_counter()
    result.timings = {"eligibility": t1 - t0, "placement": t2 - t1}
    return result
