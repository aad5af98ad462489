"""What a scheduling cycle decides. Plain data; the caller commits and dispatches it.

These names are re-exported by :mod:`crossdock.queue.cycle`, which the workers import.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime


@dataclass(frozen=True, slots=True)
class Placement:
    """Run ``job_id`` on ``nodes`` (one entry per node) with these devices and amounts per node.

    ``gpu_ids`` lists every device (or MIG slice) over all nodes; ``gpus_per_node`` splits it
    by node, in the order of ``nodes``. ``gpu_share`` is the fraction of one GPU for a
    GPU-sharing job (its device is in ``gpu_ids``).
    """

    job_id: int
    pool: str
    backend: str
    nodes: tuple[str, ...]
    gpu_ids: tuple[str, ...] = ()
    cpu_milli: int = 0
    memory_mib: int = 0
    gpus_per_node: tuple[tuple[str, ...], ...] = ()
    gpu_share: float | None = None


@dataclass(frozen=True, slots=True)
class Preemption:
    victim_id: int
    preemptor_id: int
    grace_seconds: int
    requeue: bool = True


@dataclass(frozen=True, slots=True)
class Reservation:
    """The blocked job with the highest priority starts on ``nodes`` at ``start`` at the latest."""

    job_id: int
    start: datetime
    nodes: tuple[str, ...]


@dataclass
class CycleResult:
    admitted: list[Placement] = field(default_factory=list)
    preemptions: list[Preemption] = field(default_factory=list)
    cancelled: dict[int, str] = field(default_factory=dict)
    """Jobs to cancel, with the reason (e.g. DependencyNeverSatisfied)."""
    pending: dict[int, str] = field(default_factory=dict)
    """Every job left pending, with the reason."""
    explanations: dict[int, str] = field(default_factory=dict)
    """Why a pending job is not running, as kube-scheduler says it ("0/5000 nodes are available: …")."""
    timings: dict[str, float] = field(default_factory=dict)
    reservations: list[Reservation] = field(default_factory=list)
    nominations: dict[int, str] = field(default_factory=dict)
    """Preemptor job id -> the node whose capacity is being freed for it."""
