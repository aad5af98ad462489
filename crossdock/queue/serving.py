"""What an inference service is: its spec, its states, its replicas' endpoints and its traffic.

A service is a record of its own beside the batch jobs; its replicas are ordinary jobs whose
``JobSpec.service`` is a :class:`~crossdock.queue.models.ServiceReplica`. These are the data
types; the controller that decides what happens to them is :mod:`crossdock.queue.services`.

This module is a leaf of the core (it imports only ``models``, ``errors`` and pydantic) so that
the config schema and the ports may name these types while the controller, which uses the HPA
arithmetic of ``autoscale`` (itself built on the config), sits above them without an import cycle.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Mapping

from pydantic import BaseModel, ConfigDict, Field, model_validator

from crossdock.queue.errors import CrossdockError
from crossdock.queue.models import (MAX_ARG_BYTES, MAX_CPUS_PER_TASK, MAX_GPUS, MAX_MEM_MIB, MAX_NAME_BYTES,
                                    MAX_PATH_BYTES, ServiceReplica)

__all__ = ["Endpoint", "IllegalServiceTransition", "ServiceMetrics", "ServiceRecord", "ServiceReplica",
           "ServiceSpec", "ServiceState", "ServiceStatus", "SERVICE_NAME", "service_transition"]

SERVICE_NAME = re.compile(r"^[a-z]([-a-z0-9]{0,38}[a-z0-9])?$")
"""A DNS-1035 label of at most 40 characters: a Kubernetes Service name with room for suffixes."""
MAX_REPLICAS = 1000
YEAR_SECONDS = 365 * 86400


class ServiceState(StrEnum):
    """Where a service is in its life. Its replicas keep the batch job states (a RUNNING replica is
    up); readiness is its endpoint's, not a job state."""

    DEPLOYING = "DEPLOYING"
    """Stored; fewer replicas are ready than it wants, and it has not been available yet."""
    AVAILABLE = "AVAILABLE"
    """As many replicas ready as desired, all of the current spec."""
    DEGRADED = "DEGRADED"
    """Was available (or replicas keep failing); fewer replicas ready than desired."""
    UPDATING = "UPDATING"
    """A rolling update is replacing replicas of an older spec, one at a time (surge 1)."""
    DELETING = "DELETING"
    """Deletion asked for: every replica drains, then stops; then the record goes."""
    DELETED = "DELETED"
    """Every replica stopped; the record is removed (the last status its event shows)."""


SERVICE_TRANSITIONS: dict[ServiceState, frozenset[ServiceState]] = {
    ServiceState.DEPLOYING: frozenset({ServiceState.AVAILABLE, ServiceState.DEGRADED, ServiceState.UPDATING,
                                       ServiceState.DELETING}),
    ServiceState.AVAILABLE: frozenset({ServiceState.DEGRADED, ServiceState.UPDATING, ServiceState.DELETING}),
    ServiceState.DEGRADED: frozenset({ServiceState.AVAILABLE, ServiceState.UPDATING, ServiceState.DELETING}),
    ServiceState.UPDATING: frozenset({ServiceState.AVAILABLE, ServiceState.DEGRADED, ServiceState.DELETING}),
    ServiceState.DELETING: frozenset({ServiceState.DELETED}),
    ServiceState.DELETED: frozenset(),
}


class IllegalServiceTransition(CrossdockError):
    def __init__(self, service: str, old: ServiceState, new: ServiceState):
        allowed = ", ".join(sorted(SERVICE_TRANSITIONS[old])) or "none"
        super().__init__(f"service {service!r}: cannot go from {old} to {new}; from {old} it may go to {allowed}")


def service_transition(service: str, old: ServiceState, new: ServiceState) -> ServiceState:
    """``new`` if the move is legal (staying is), else :class:`IllegalServiceTransition`."""
    if new is not old and new not in SERVICE_TRANSITIONS[old]:
        raise IllegalServiceTransition(service, old, new)
    return new


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class ServiceSpec(_Model):
    """What a team asked for: what to run, where, how many and by which traffic target.

    Replicas are ``min_replicas``..``max_replicas``; with a target (``target_qps`` per replica,
    ``p95_ms``) the count follows the traffic with the HPA's arithmetic, without one it stays at
    ``min_replicas``. ``pools`` are tried in order: a replica starts on the first and is widened
    to the next after ``fallback_after_seconds`` of pending; None: the queue's pools, in order.
    """

    name: str = Field(min_length=1, max_length=40)
    user: str = Field("", max_length=MAX_NAME_BYTES)
    """The owner: only they (or an admin) change or delete it. Set by the face from the caller."""
    command: list[str] | None = None
    image: str | None = Field(None, min_length=1, max_length=MAX_PATH_BYTES)
    env: dict[str, str] = Field(default_factory=dict)
    workdir: str | None = Field(None, min_length=1, max_length=MAX_PATH_BYTES)
    port: int = Field(8000, ge=1, le=65535)
    """The port the server listens on in its container; the local backend hands each replica a free
    loopback port in ``PORT`` instead."""
    ready_path: str = Field("/healthz", min_length=1, max_length=MAX_PATH_BYTES)
    """HTTP path that answers 2xx once a replica takes traffic (the readiness probe)."""
    min_replicas: int = Field(1, ge=0, le=MAX_REPLICAS)
    max_replicas: int = Field(1, ge=1, le=MAX_REPLICAS)
    target_qps: float | None = Field(None, gt=0, le=1e9)
    """Requests per second one replica should serve (the HPA's AverageValue target)."""
    p95_ms: float | None = Field(None, gt=0, le=3_600_000)
    """Latency objective: the 95th percentile in milliseconds (the HPA's Value target)."""
    cpus: int = Field(1, ge=1, le=MAX_CPUS_PER_TASK)
    mem_mib: int | None = Field(None, ge=1, le=MAX_MEM_MIB)
    gpus: int = Field(0, ge=0, le=MAX_GPUS)
    gpu_type: str | None = Field(None, min_length=1, max_length=MAX_NAME_BYTES)
    queue: str | None = Field(None, min_length=1, max_length=MAX_NAME_BYTES)
    pools: list[str] | None = Field(None, min_length=1)
    fallback_after_seconds: float = Field(30, ge=0, le=YEAR_SECONDS)
    scale_up_stabilization_seconds: float = Field(0, ge=0, le=3600)
    scale_down_stabilization_seconds: float = Field(300, ge=0, le=3600)
    """HPA's ``behavior.scaleDown.stabilizationWindowSeconds``: replicas go down only once every
    recommendation of this window asks for fewer."""
    drain_timeout_seconds: float = Field(30, ge=0, le=86400)
    """How long a draining replica may take to finish its requests before it is stopped anyway."""

    @model_validator(mode="after")
    def _check(self) -> "ServiceSpec":
        if not SERVICE_NAME.match(self.name):
            raise ValueError(f"name: {self.name!r} is not a service name; use lowercase letters, digits and '-',"
                             " starting with a letter, at most 40 characters (e.g. 'chat-l4')")
        if self.command is None and self.image is None:
            raise ValueError("command, image: give a command to run (local) or an image (Kubernetes), or both")
        if self.command is not None:
            if not self.command:
                raise ValueError("command: empty; give the server's argv, e.g. ['python', 'server.py']")
            for i, arg in enumerate(self.command):
                if "\0" in arg or len(arg.encode("utf-8", "surrogatepass")) > MAX_ARG_BYTES:
                    raise ValueError(f"command[{i}]: contains a NUL or is longer than {MAX_ARG_BYTES} bytes; shorten it")
        if not self.ready_path.startswith("/"):
            raise ValueError(f"ready_path: {self.ready_path!r} must start with '/', e.g. '/healthz'")
        if self.min_replicas > self.max_replicas:
            raise ValueError(f"min_replicas, max_replicas: {self.min_replicas} is above {self.max_replicas};"
                             " give MIN <= MAX (--replicas MIN:MAX)")
        if self.pools is not None and len(set(self.pools)) != len(self.pools):
            raise ValueError(f"pools: {self.pools} names a pool twice; list each pool once, preferred first")
        if self.gpu_type is not None and self.gpus == 0:
            raise ValueError(f"gpu_type: {self.gpu_type!r} given with gpus 0; ask for gpus >= 1 or drop the type")
        return self

    def autoscaled(self) -> bool:
        return self.target_qps is not None or self.p95_ms is not None

    def same_workload(self, other: "ServiceSpec") -> bool:
        """Whether replicas of ``other`` run what this spec says: only the replica bounds, the
        targets, the windows and the owner may differ without a rolling update."""
        scaling = {"user", "min_replicas", "max_replicas", "target_qps", "p95_ms", "fallback_after_seconds",
                   "scale_up_stabilization_seconds", "scale_down_stabilization_seconds", "drain_timeout_seconds"}
        return self.model_dump(exclude=scaling) == other.model_dump(exclude=scaling)


class ServiceStatus(_Model):
    """What the controller's last pass found and decided, with the scaler's memory for the next."""

    state: ServiceState = ServiceState.DEPLOYING
    desired: int = 0
    """Replicas wanted now (the override, else the HPA's normalized recommendation)."""
    recommended: int = 0
    """What the metrics alone asked for (before stabilization and min/max)."""
    replicas: int = 0
    """Replica jobs alive (pending or placed, not draining)."""
    ready: int = 0
    message: str = ""
    """Why ``desired`` is what it is, and what the pass did, in words."""
    updated_at: float = 0
    next_replica: int = 0
    """The ordinal the next replica gets (ordinals are never reused)."""
    recommendations: list[tuple[float, int]] = Field(default_factory=list)
    """(time, recommended) of earlier passes within the stabilization windows (HPA's memory)."""
    scale_events: list[tuple[float, int]] = Field(default_factory=list)
    """(time, change) of the scale steps, in the HPA's slots (``hpa.record_scale_event``)."""
    pending_since: dict[int, float] = Field(default_factory=dict)
    """Replica job id → when the controller first saw it pending (its fallback clock)."""
    failures: list[float] = Field(default_factory=list)
    """When replicas of ``failures_generation`` ended on their own (crashed, lost) lately: a crash
    loop holds new replicas."""
    failures_generation: int = 0
    """The generation ``failures`` count: an update that rolls the replicas starts the count afresh."""
    cpu_used: float | None = None
    """CPUs one replica was measured to use (the most over its replicas), where a backend reports it."""


@dataclass(frozen=True)
class ServiceRecord:
    """A service as the store holds it."""

    spec: ServiceSpec
    generation: int
    """Bumped by every change of the spec that needs new replicas (``same_workload``)."""
    status: ServiceStatus
    override: int | None = None
    """Replicas set by ``crossdock services scale NAME N``; wins over the autoscaler until cleared."""
    deleting: bool = False
    address: str | None = None
    """Where clients reach it (``host:port`` of crossdock's router, or a Kubernetes Service)."""
    created: float = 0


@dataclass(frozen=True)
class Endpoint:
    """One replica attempt as traffic sees it: where it listens and whether it takes requests."""

    job_id: int
    attempt: int
    replica: int
    host: str
    port: int
    ready: bool = False
    draining: bool = False
    """Left the router/Service: it gets no new requests."""
    drained: bool = False
    """Draining and its in-flight requests are done: it may stop."""
    draining_since: float | None = None
    service: str = ""


@dataclass(frozen=True)
class ServiceMetrics:
    """One traffic sample of a service over the last ``window_seconds``, taken ``at`` (epoch s)."""

    qps: float
    """Requests per second, every replica together."""
    p95_seconds: float | None = None
    replica_qps: Mapping[int, float] = field(default_factory=dict)
    """Replica ordinal → its requests per second."""
    in_flight: Mapping[int, int] = field(default_factory=dict)
    """Replica ordinal → requests it is serving now."""
    window_seconds: float = 0
    at: float = 0
    cpu_used: Mapping[int, float] = field(default_factory=dict)
    """Replica ordinal → CPUs it uses (cores), where the source measures it: the throttling check."""

    def to_dict(self) -> dict:
        return {"qps": self.qps, "p95_seconds": self.p95_seconds, "window_seconds": self.window_seconds,
                "at": self.at, "replica_qps": {str(k): v for k, v in self.replica_qps.items()},
                "in_flight": {str(k): v for k, v in self.in_flight.items()},
                "cpu_used": {str(k): v for k, v in self.cpu_used.items()}}

    @classmethod
    def from_dict(cls, data: Mapping) -> "ServiceMetrics":
        p95 = data.get("p95_seconds")
        return cls(qps=float(data["qps"]), p95_seconds=None if p95 is None else float(p95),
                   replica_qps={int(k): float(v) for k, v in (data.get("replica_qps") or {}).items()},
                   in_flight={int(k): int(v) for k, v in (data.get("in_flight") or {}).items()},
                   window_seconds=float(data.get("window_seconds") or 0), at=float(data.get("at") or 0),
                   cpu_used={int(k): float(v) for k, v in (data.get("cpu_used") or {}).items()})
