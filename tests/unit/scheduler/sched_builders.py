"""Builders for scheduler tests: ``job(1).gpus(2, "A100").priority(1000).build()``."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

from crossdock.queue.config import ClusterConfig, parse_config
from crossdock.queue.models import GpuRequest, Job, JobSpec
from crossdock.queue.snapshot import Allocation, GpuDevice, Node

NOW = datetime(2026, 1, 1, tzinfo=timezone.utc)


def config(**overrides: Any) -> ClusterConfig:
    data: dict[str, Any] = {
        "priority_classes": {"high": {"value": 1000}, "mid": {"value": 500},
                             "low": {"value": 100, "preemptible": True, "grace_seconds": 45},
                             "never": {"value": 900, "preemption_policy": "Never"}},
        "pools": {"gpu": {"backend": "k8s"}, "share": {"backend": "k8s", "gpu": {"sharing": True}},
                  "cpu": {"backend": "slurm", "partition": "cpu"}},
        "queues": {"train": {"priority_class": "low", "pools": ["gpu", "share", "cpu"]},
                   "serve": {"priority_class": "high", "pools": ["gpu", "share", "cpu"]},
                   "batch": {"priority_class": "mid", "pools": ["gpu", "share", "cpu"]},
                   "meek": {"priority_class": "never", "pools": ["gpu", "share", "cpu"]}},
        "scheduler": {"default_mem_per_cpu_mib": 0},
    }
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(data.get(key), dict):
            data[key] = {**data[key], **value}
        else:
            data[key] = value
    return parse_config(data)


def node(name: str, pool: str = "gpu", cpus: int = 16, mem: int = 64000, gpus: int = 0, model: str = "A100",
         islands: int = 0, mig: tuple[str, ...] = (), labels: dict[str, str] | None = None,
         taints: tuple[str, ...] = (), schedulable: bool = True, sharing: bool = False,
         max_pods: int | None = None) -> Node:
    per = gpus // islands if islands else 0
    devs = tuple(GpuDevice(f"{name}-gpu{i}", i, model, island=(i // per if islands else None),
                           mig=mig if mig else ()) for i in range(gpus))
    return Node(name, pool, "slurm" if pool == "cpu" else "k8s", cpus * 1000, mem, devs, labels or {}, taints,
                sharing, schedulable, max_pods)


CLASS_OF = {"train": ("low", 100, True), "serve": ("high", 1000, False), "batch": ("mid", 500, False),
            "meek": ("never", 900, False)}


class JobBuilder:
    def __init__(self, job_id: int):
        self.id = job_id
        self.spec: dict[str, Any] = {"command": ["true"]}
        self.queue_name = "train"
        self.extra: dict[str, Any] = {}
        self.submitted = NOW - timedelta(minutes=60) + timedelta(seconds=job_id)

    def queue(self, name: str) -> "JobBuilder":
        self.queue_name = name
        return self

    def cpus(self, n: int) -> "JobBuilder":
        self.spec["cpus_per_task"] = n
        return self

    def mem(self, mib: int) -> "JobBuilder":
        self.spec["mem_per_node_mib"] = mib
        return self

    def gpus(self, n: int, model: str | None = None, **kw: Any) -> "JobBuilder":
        self.spec["gpus"] = GpuRequest(count=n, type=model, **kw)
        return self

    def nodes(self, n: int) -> "JobBuilder":
        self.spec["nodes"] = n
        self.spec["ntasks"] = n
        return self

    def limit(self, minutes: int = 0, seconds: int = 0) -> "JobBuilder":
        self.spec["time_limit_seconds"] = minutes * 60 + seconds
        return self

    def user(self, name: str) -> "JobBuilder":
        self.spec["user"] = name
        return self

    def set(self, **spec: Any) -> "JobBuilder":
        self.spec.update(spec)
        return self

    def array(self, array_job_id: int, task: int) -> "JobBuilder":
        self.extra.update(array_job_id=array_job_id, array_task_id=task)
        return self

    def at(self, submitted: datetime) -> "JobBuilder":
        self.submitted = submitted
        return self

    def build(self) -> Job:
        pc, prio, preemptible = CLASS_OF[self.queue_name]
        return Job(id=self.id, spec=JobSpec(**self.spec), queue=self.queue_name, priority_class=pc, priority=prio,
                   preemptible=preemptible, submit_time=self.submitted, **self.extra)


def job(job_id: int) -> JobBuilder:
    return JobBuilder(job_id)


def running(job_id: int, node_name: str, cpus: int = 1, gpus: tuple[str, ...] = (), queue: str = "train",
            priority: int = 100, preemptible: bool = True, started_min_ago: int = 10, limit: int | None = 60,
            mem: int = 0, limit_s: int | None = None, **kw: Any) -> Allocation:
    """A running job; ``limit`` in minutes, or ``limit_s`` in seconds (which wins)."""
    seconds = limit_s if limit_s is not None else (limit * 60 if limit else None)
    return Allocation(job_id, node_name, cpus * 1000, mem, gpus, priority=priority, preemptible=preemptible,
                      queue=queue, start_time=NOW - timedelta(minutes=started_min_ago), time_limit_seconds=seconds,
                      grace_seconds=45, **kw)
