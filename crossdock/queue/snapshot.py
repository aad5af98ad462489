"""The immutable picture a scheduling cycle decides on: nodes, what runs on them, and the
facts pending jobs depend on (dependency targets, array throttles, names for singletons)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from types import MappingProxyType
from typing import Mapping

from crossdock.queue.states import JobState


SOFT_EFFECT = "PreferNoSchedule"
"""The taint effect placement honours as a preference only (the TaintToleration score)."""
DELETION_CANDIDATE = f"crossdock.io/deletion-candidate:{SOFT_EFFECT}"
"""The autoscaler's soft taint on the nodes it would like to retire (cluster-autoscaler's
``DeletionCandidateOfClusterAutoscaler``); the cycle takes them last (the TaintToleration score).
When each became one is in the autoscaler's state, not in the taint, so that tainted nodes in one
state still score once."""


def soft_taints(taints: tuple[str, ...]) -> tuple[str, ...]:
    """The ``key[=value]:PreferNoSchedule`` taints among ``taints``."""
    return tuple(t for t in taints if t.rpartition(":")[2] == SOFT_EFFECT)


@dataclass(frozen=True, slots=True)
class GpuDevice:
    """One physical GPU. ``island`` groups GPUs joined by NVLink; ``mig`` lists its MIG slices."""

    id: str
    index: int
    model: str
    memory_mib: int = 0
    island: int | None = None
    mig: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Node:
    name: str
    pool: str
    backend: str
    cpu_milli: int
    memory_mib: int
    gpus: tuple[GpuDevice, ...] = ()
    labels: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    taints: tuple[str, ...] = ()
    gpu_sharing: bool = False
    schedulable: bool = True
    max_pods: int | None = None
    """How many jobs' workers (crossdock's and foreign) the node takes, e.g. Kubernetes'
    ``allocatable.pods``; None: no limit."""


@dataclass(frozen=True, slots=True)
class Allocation:
    """Capacity held on one node by a placed job (crossdock's or a foreign one)."""

    job_id: int | None
    node: str
    cpu_milli: int
    memory_mib: int
    gpu_ids: tuple[str, ...] = ()
    gpu_share: Mapping[str, float] = field(default_factory=lambda: MappingProxyType({}))
    priority: int = 0
    preemptible: bool = False
    queue: str = ""
    user: str = ""
    start_time: datetime | None = None
    time_limit_seconds: int | None = None
    grace_seconds: int = 0
    group: int | None = None
    """The array job id for array tasks (anti-affinity keeps one task of a group per node)."""
    terminating: bool = False
    """Being preempted: still holds its capacity until it is gone."""
    service: str | None = None
    """The inference service this allocation is a replica of: spread from its siblings, never a victim."""


@dataclass(frozen=True, slots=True)
class JobFacts:
    """What a dependency or throttle needs to know about another job."""

    id: int
    state: JobState
    exit_code: int | None = None
    name: str = ""
    user: str = ""
    array_job_id: int | None = None
    array_task_id: int | None = None
    end_time: datetime | None = None
    start_time: datetime | None = None


@dataclass(frozen=True)
class Snapshot:
    nodes: tuple[Node, ...]
    allocations: tuple[Allocation, ...] = ()
    jobs: Mapping[int, JobFacts] = field(default_factory=lambda: MappingProxyType({}))
    """Facts about jobs that pending jobs reference (dependencies, arrays, singletons)."""
    running_per_array: Mapping[int, int] = field(default_factory=lambda: MappingProxyType({}))
    usage: Mapping[str, float] = field(default_factory=lambda: MappingProxyType({}))
    """Decayed fair-share usage per ``queue`` and per ``queue/user`` key."""
    nominations: Mapping[int, str] = field(default_factory=lambda: MappingProxyType({}))
    """Pending preemptor job id -> node whose capacity is being freed for it (from earlier cycles)."""
    backend_queued: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))
    """Pool -> jobs handed to its backend's own queue that have no node yet (``backend_queue``)."""
    destinations: Mapping[int, str] = field(default_factory=lambda: MappingProxyType({}))
    """Job moved by the descheduler (still stopping, or pending again) -> the node reserved for it:
    its capacity is held there and the job tries that node first (``deschedule.defrag``)."""
    licenses_in_use: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))
    """Counted license -> how many the active jobs hold (``scheduler.licenses``)."""
    start_estimates: Mapping[int, Mapping[str, float]] = field(default_factory=lambda: MappingProxyType({}))
    """Pending job -> pool -> seconds until it would start there if sent now, for jobs of queues
    that burst between backends (:mod:`crossdock.queue.bursting`); absent: not estimated."""
