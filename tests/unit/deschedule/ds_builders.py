"""Builders for descheduler tests: a GPU cluster, running and pending jobs, and the plan over them."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any, Mapping, Sequence

from crossdock.queue.assembly import Records, build_snapshot
from crossdock.queue.config import ClusterConfig, parse_config
from crossdock.queue.deschedule.migration import DeschedulePlan, MoveRecord
from crossdock.queue.deschedule.plan import plan
from crossdock.queue.models import GpuRequest, Job, JobSpec
from crossdock.queue.snapshot import GpuDevice, Node
from crossdock.queue.states import JobState

NOW = datetime(2026, 1, 1, tzinfo=timezone.utc)
CLASSES = {"low": (100, True), "mid": (500, True), "high": (1000, False), "serve": (2000, False),
           "pinned": (50, False)}


def config(descheduler: dict[str, Any] | None = None, **extra: Any) -> ClusterConfig:
    data: dict[str, Any] = {
        "priority_classes": {name: {"value": v, "preemptible": p} for name, (v, p) in CLASSES.items()},
        "pools": {"gpu": {"backend": "k8s"}, "cpu": {"backend": "k8s"}},
        "queues": {name: {"priority_class": name, "pools": ["gpu"]} for name in CLASSES},
        "scheduler": {"default_mem_per_cpu_mib": 0},
        "descheduler": {"enabled": True, **(descheduler or {})},
        **extra,
    }
    return parse_config(data)


def gpu_node(name: str, gpus: int = 8, pool: str = "gpu", cpus: int = 64, labels: dict[str, str] | None = None,
             islands: int = 0) -> Node:
    per = gpus // islands if islands else 0
    devs = tuple(GpuDevice(f"{name}:{i}", i, "A100", island=(i // per if islands else None)) for i in range(gpus))
    return Node(name, pool, "k8s", cpus * 1000, 512000, devs, labels or {})


def cluster(n: int = 8, gpus: int = 8) -> list[Node]:
    return [gpu_node(f"n{i}", gpus) for i in range(n)]


class Jobs:
    """Numbered jobs: ``run(queue, node, gpus)`` places one, ``wait(queue, gpus)`` queues one."""

    def __init__(self) -> None:
        self.next_id = 1
        self.used: dict[str, int] = {}
        self.pending: list[Job] = []
        self.active: list[Job] = []

    def _job(self, queue: str, gpus: int, **spec: Any) -> Job:
        prio, preemptible = CLASSES[queue]
        job_id, self.next_id = self.next_id, self.next_id + 1
        extra = {k: spec.pop(k) for k in ("array_job_id", "array_task_id") if k in spec}
        body = JobSpec(command=["true"], gpus=GpuRequest(count=gpus) if gpus else None, **spec)
        return Job(id=job_id, spec=body, queue=queue, priority_class=queue, priority=prio, preemptible=preemptible,
                   submit_time=NOW - timedelta(hours=1), attempts=1, **extra)

    def run(self, queue: str, node: str | Sequence[str], gpus: int = 1, minutes_ago: float = 30, **spec: Any) -> Job:
        nodes = [node] if isinstance(node, str) else list(node)
        if len(nodes) > 1:
            spec.setdefault("nodes", len(nodes))
            spec.setdefault("ntasks", len(nodes))
        job = self._job(queue, gpus, **spec)
        ids = []
        for n in nodes:
            first = self.used.get(n, 0)
            ids += [f"{n}:{k}" for k in range(first, first + gpus)]
            self.used[n] = first + gpus
        job.state, job.nodes, job.gpu_ids = JobState.RUNNING, nodes, ids
        job.start_time = NOW - timedelta(minutes=minutes_ago)
        job.alloc_cpu_milli = 1000
        self.active.append(job)
        return job

    def wait(self, queue: str, gpus: int, **spec: Any) -> Job:
        job = self._job(queue, gpus, **spec)
        job.attempts = 0
        self.pending.append(job)
        return job

    def plan(self, nodes: Sequence[Node], cfg: ClusterConfig, history: Mapping[int, MoveRecord] | None = None,
             now: datetime = NOW, **kw: Any) -> DeschedulePlan:
        snap = build_snapshot(Records(self.pending, self.active, nodes, nominations=kw.pop("nominations", {})), cfg)
        return plan(snap, self.pending, self.active, cfg, now, history, **kw)


def fragmented(jobs: Jobs, used: Sequence[int], queue: str = "low") -> None:
    """Fill node ``n<i>`` with ``used[i]`` single-GPU jobs of ``queue``."""
    for i, n in enumerate(used):
        for _ in range(n):
            jobs.run(queue, f"n{i}", 1)


def apply(jobs: Jobs, plan_: DeschedulePlan) -> dict[int, str]:
    """Carry a plan out as the live plane would: every moved job back to PENDING (a new attempt);
    returns the reserved destinations (job id -> node)."""
    by_id = {j.id: j for j in jobs.active}
    dest = {}
    for m in plan_.migrations:
        job = by_id[m.job_id]
        jobs.active.remove(job)
        for n in job.nodes:
            jobs.used[n] = jobs.used.get(n, 0) - len([g for g in job.gpu_ids if g.startswith(n + ":")])
        job.state, job.nodes, job.gpu_ids, job.start_time = JobState.PENDING, [], [], None
        jobs.pending.append(job)
        if m.to_nodes:
            dest[m.job_id] = m.to_nodes[0]
    return dest


def admit(jobs: Jobs, result: Any, now: datetime = NOW) -> None:
    """Start what a cycle admitted."""
    by_id = {j.id: j for j in jobs.pending}
    for p in result.admitted:
        job = by_id[p.job_id]
        jobs.pending.remove(job)
        job.state, job.nodes, job.gpu_ids, job.start_time = JobState.RUNNING, list(p.nodes), list(p.gpu_ids), now
        job.attempts += 1
        job.alloc_cpu_milli = p.cpu_milli
        for n in p.nodes:
            jobs.used[n] = jobs.used.get(n, 0) + len([g for g in p.gpu_ids if g.startswith(n + ":")])
        jobs.active.append(job)
