"""Builders for the autoscaler tests: a config with autoscaled pools, nodes, pending and running jobs."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

from crossdock.queue.config import ClusterConfig, parse_config
from crossdock.queue.models import GpuRequest, Job, JobSpec
from crossdock.queue.snapshot import Allocation, GpuDevice, Node
from crossdock.queue.states import JobState

NOW = datetime(2026, 1, 1, tzinfo=timezone.utc)
T0 = NOW.timestamp()
CPU_TEMPLATE = {"cpus": 8, "memory_mib": 32000}
GPU_TEMPLATE = {"cpus": 64, "memory_mib": 512000, "gpus": 8, "gpu_model": "A100"}


def config(pools: dict[str, dict] | None = None, queues: dict[str, dict] | None = None, **top: Any) -> ClusterConfig:
    """Pools ``cpu`` (kwok, CPU_TEMPLATE) and ``gpu`` (kwok, GPU_TEMPLATE), both 0–10 nodes; queues
    ``batch`` (preemptible, both pools), ``serve`` (not preemptible, both pools)."""
    data: dict[str, Any] = {
        "priority_classes": {"high": {"value": 1000}, "low": {"value": 100, "preemptible": True}},
        "pools": {"cpu": {"backend": "k8s", "provisioner": "kwok", "max_nodes": 10, "node_template": CPU_TEMPLATE},
                  "gpu": {"backend": "k8s", "provisioner": "kwok", "max_nodes": 10, "node_template": GPU_TEMPLATE,
                          "gpu": {"model": "A100"}}},
        "queues": {"batch": {"priority_class": "low", "pools": ["cpu", "gpu"]},
                   "serve": {"priority_class": "high", "pools": ["cpu", "gpu"]}},
        "scheduler": {"default_mem_per_cpu_mib": 0},
    }
    for name, overrides in (pools or {}).items():
        data["pools"][name] = {**data["pools"].get(name, {}), **overrides}
    for name, overrides in (queues or {}).items():
        data["queues"][name] = {**data["queues"].get(name, {}), **overrides}
    data.update(top)
    return parse_config(data)


def node(name: str, pool: str = "cpu", cpus: int = 8, mem: int = 32000, gpus: int = 0, model: str = "A100",
         labels: dict[str, str] | None = None) -> Node:
    devs = tuple(GpuDevice(f"{name}:{i}", i, model) for i in range(gpus))
    return Node(name, pool, "k8s", cpus * 1000, mem, devs, labels or {})


_CLASS = {"batch": ("low", 100, True), "serve": ("high", 1000, False)}


def job(job_id: int, cpus: int = 1, gpus: int = 0, model: str | None = None, queue: str = "batch", nodes: int = 1,
        state: JobState = JobState.PENDING, on: tuple[str, ...] = (), **spec: Any) -> Job:
    fields: dict[str, Any] = {"command": ["true"], "cpus_per_task": cpus, **spec}
    if gpus:
        fields["gpus"] = GpuRequest(count=gpus, type=model)
    if nodes > 1:
        fields.update(nodes=nodes, ntasks=nodes)
    pc, prio, preemptible = _CLASS[queue]
    return Job(id=job_id, spec=JobSpec(**fields), queue=queue, priority_class=pc, priority=prio,
               preemptible=preemptible, state=state, nodes=list(on), alloc_cpu_milli=cpus * 1000,
               submit_time=NOW - timedelta(seconds=600 - job_id % 600))


def running(job_id: int, on: str, cpus: int = 1, gpus: int = 0, queue: str = "batch") -> tuple[Job, Allocation]:
    """A running job and the allocation it holds on node ``on``."""
    j = job(job_id, cpus=cpus, gpus=gpus, queue=queue, state=JobState.RUNNING, on=(on,))
    _, prio, preemptible = _CLASS[queue]
    alloc = Allocation(job_id, on, cpus * 1000, 0, tuple(f"{on}:{i}" for i in range(gpus)), priority=prio,
                       preemptible=preemptible, queue=queue)
    return j, alloc
