"""One autoscaling pass: every elastic queue's fleet and every autoscaled pool's nodes.

``plan(inputs, state, config, now)`` is pure. It returns an :class:`AutoscalePlan` — decisions to
carry out, each with what limited it — and the :class:`AutoscaleState` the next pass starts from
(recommendation history, scale events, when each node became unneeded). The caller saves the
state in the store, acts through the backends, and writes one event per change.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Sequence

from crossdock.queue.models import Job
from crossdock.queue.ports import NodeGroup
from crossdock.queue.snapshot import Snapshot


@dataclass(frozen=True)
class FleetDecision:
    queue: str
    backlog: int
    """Pending + scheduled + running jobs of the queue."""
    current: int
    recommended: int
    """What the metric alone asks for (``hpa.recommend``, KEDA's activation)."""
    desired: int
    """After stabilization, policies and min/max (``hpa.normalize``): what the fleet is set to."""
    limited_by: str = ""
    """The step that changed ``recommended``: "" | "ScaleUpStabilized" | "ScaleDownStabilized" |
    "ScaleUpLimit" | "ScaleDownLimit" | "TooFewReplicas" | "TooManyReplicas" | "Cooldown" | "Activation"."""
    message: str = ""


@dataclass(frozen=True)
class NodeDecision:
    pool: str
    current: int
    """Ready + starting nodes."""
    desired: int
    add: int = 0
    remove: tuple[str, ...] = ()
    """Nodes to retire now (empty or holding only preemptible work to drain first)."""
    drain: tuple[int, ...] = ()
    """Jobs to requeue off the nodes in ``remove`` before they go."""
    limited_by: str = ""
    """"" | "MaxNodes" | "MinNodes" | "DelayAfterAdd" | "Unneeded" | "NonPreemptible" | "Provisioning" | "Spare"."""
    message: str = ""
    waiting: tuple[int, ...] = ()
    """Pending jobs that wait for nodes of this pool."""


@dataclass
class AutoscaleState:
    """What a pass remembers for the next; JSON-serialisable (the store keeps it)."""

    recommendations: dict[str, list[tuple[float, int]]] = field(default_factory=dict)
    """Queue → (time, recommended replicas), pruned to the longest stabilization window."""
    scale_events: dict[str, list[tuple[float, int]]] = field(default_factory=dict)
    """Queue → (time, replica change), pruned to the longest policy period."""
    last_active: dict[str, float] = field(default_factory=dict)
    """Queue → the last time its backlog was above the activation threshold."""
    unneeded_since: dict[str, float] = field(default_factory=dict)
    """Node → since when it has been unneeded."""
    last_scale_up: dict[str, float] = field(default_factory=dict)
    """Pool → when nodes were last added."""
    requested: dict[str, float] = field(default_factory=dict)
    """Node → when it was asked for (provision timeout)."""

    def to_dict(self) -> dict: ...

    @classmethod
    def from_dict(cls, data: Mapping) -> "AutoscaleState": ...


@dataclass(frozen=True)
class Inputs:
    """What the loop read for one pass."""

    snapshot: Snapshot
    jobs: Sequence[Job]
    """The active jobs (pending, scheduled, running) of every queue."""
    fleets: Mapping[str, int] = field(default_factory=dict)
    """Queue → current replicas of its fleet (queues with a fleet only)."""
    groups: Mapping[str, NodeGroup] = field(default_factory=dict)
    """Pool → its node group (pools with a provisioner only)."""


@dataclass(frozen=True)
class AutoscalePlan:
    fleets: tuple[FleetDecision, ...] = ()
    nodes: tuple[NodeDecision, ...] = ()
    reasons: Mapping[int, str] = field(default_factory=dict)
    """Pending job → explanation, for jobs waiting for capacity (reason ``WaitingForCapacity``)."""
    state: AutoscaleState = field(default_factory=AutoscaleState)
    timings: Mapping[str, float] = field(default_factory=dict)


def plan(inputs: Inputs, state: AutoscaleState, config, now: float) -> AutoscalePlan:
    """Decide every fleet's replicas and every autoscaled pool's nodes for this pass."""
    raise NotImplementedError
