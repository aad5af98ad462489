"""One autoscaling pass: every elastic queue's fleet and every autoscaled pool's nodes.

``plan(inputs, state, config, now)`` is pure. It returns an :class:`AutoscalePlan` — decisions to
carry out, each with what limited it — and the :class:`AutoscaleState` the next pass starts from
(recommendation history, scale events, when each node became unneeded). The caller saves the
state in the store, acts through the backends, and writes one event per change.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Mapping, Sequence

from crossdock.queue.autoscale import capacity, hpa, keda, scaledown
from crossdock.queue.autoscale.capacity import World
from crossdock.queue.config import MAX_COUNT, ClusterConfig
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
    note: str = ""
    """Said when the workers beyond one add no capacity (:func:`keda.no_capacity`)."""


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
    """"" | "MaxNodes" | "Spare" (no more nodes may be added) | "MinNodes" (kept at or raised to min_nodes)
    | "DelayAfterAdd" | "Unneeded" (unneeded nodes wait out scale_down_unneeded_seconds) | "ScaleUp" (a
    pool that grows removes nothing) | "NonPreemptible" (the only nodes below the threshold run work
    that may not be drained) | "Provisioning" (starting nodes were given up) | "NoTemplate"."""
    message: str = ""
    waiting: tuple[int, ...] = ()
    """Pending jobs that wait for nodes of this pool (being added or starting)."""
    failed: tuple[str, ...] = ()
    """Starting nodes given up after ``max_node_provision_seconds`` (also in ``remove``)."""
    candidates: tuple[str, ...] = ()
    """Deletion candidates: nodes below the utilisation threshold that stay, which the cycle takes
    last (:attr:`.scaledown.ScaleDown.candidates`)."""


@dataclass
class AutoscaleState:
    """What a pass remembers for the next; JSON-serialisable (the store keeps it)."""

    recommendations: dict[str, list[tuple[float, int]]] = field(default_factory=dict)
    """Queue → (time, recommended replicas), pruned to the longest stabilization window."""
    scale_events: dict[str, list[tuple[float, int]]] = field(default_factory=dict)
    """Queue → (time, replica change: + added, − removed), in the HPA's slots (:func:`hpa.record_scale_event`)."""
    last_active: dict[str, float] = field(default_factory=dict)
    """Queue → the last time its backlog was above the activation threshold."""
    unneeded_since: dict[str, float] = field(default_factory=dict)
    """Node → since when it has been unneeded."""
    last_scale_up: dict[str, float] = field(default_factory=dict)
    """Pool → when nodes were last added."""
    requested: dict[str, float] = field(default_factory=dict)
    """Node → when it was asked for (provision timeout): the first pass that saw it starting, or
    earlier where the loop records the names ``add_nodes`` returned."""
    failed: dict[str, int] = field(default_factory=dict)
    """Pool → how many of its starting nodes were given up after ``max_node_provision_seconds``."""
    candidates: dict[str, float] = field(default_factory=dict)
    """Node → since when it has been a deletion candidate (the cycle's soft taint, :func:`soft_tainted`)."""

    def to_dict(self) -> dict:
        return {"recommendations": {q: [[t, r] for t, r in v] for q, v in self.recommendations.items()},
                "scale_events": {q: [[t, c] for t, c in v] for q, v in self.scale_events.items()},
                "last_active": dict(self.last_active), "unneeded_since": dict(self.unneeded_since),
                "last_scale_up": dict(self.last_scale_up), "requested": dict(self.requested),
                "failed": dict(self.failed), "candidates": dict(self.candidates)}

    @classmethod
    def from_dict(cls, data: Mapping) -> "AutoscaleState":
        """The state :meth:`to_dict` wrote (after a JSON round trip); missing keys are empty."""
        def pairs(key: str) -> dict[str, list[tuple[float, int]]]:
            return {str(q): [(float(t), int(r)) for t, r in v] for q, v in (data.get(key) or {}).items()}

        def times(key: str) -> dict[str, float]:
            return {str(k): float(v) for k, v in (data.get(key) or {}).items()}

        try:
            return cls(pairs("recommendations"), pairs("scale_events"), times("last_active"),
                       times("unneeded_since"), times("last_scale_up"), times("requested"),
                       {str(k): int(v) for k, v in (data.get("failed") or {}).items()}, times("candidates"))
        except (TypeError, ValueError, AttributeError) as exc:
            raise ValueError(f"autoscaler state: not what AutoscaleState.to_dict writes ({exc}); delete the"
                             " stored state to start afresh") from None


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
    """Seconds per phase (fleets, snapshot, demands, fits_now, estimate, decide) and in all (total)."""
    never_fit: tuple[int, ...] = ()
    """Pending jobs no empty node of any autoscaled pool's template can hold: adding nodes will not
    start them (their cycle reason, e.g. ``Unschedulable``, stands)."""


def plan(inputs: Inputs, state: AutoscaleState, config: ClusterConfig, now: float) -> AutoscalePlan:
    """Decide every fleet's replicas and every autoscaled pool's nodes for this pass.

    1. fleets: each queue whose ``elastic`` is ``queue_length`` with a ``fleet`` (KEDA's activation
       and cooldown, then HPA's arithmetic, :func:`.keda.elastic_pass`);
    2. demands: pending jobs that capacity could start, grouped by request shape;
    3. fits now: those the free capacity takes (the next cycle starts them) are left out;
    4. grow: the rest onto starting nodes, then the least-waste pools' new nodes (:func:`.capacity.grow`);
    5. shrink: timed-out starting nodes given up, unneeded nodes retired (:func:`.scaledown.unneeded`);
    6. decisions, reasons for the jobs that wait for nodes, and the next state.
    """
    marks = [time.perf_counter()]
    timings: dict[str, float] = {}

    def lap(phase: str) -> None:
        marks.append(time.perf_counter())
        timings[phase] = marks[-1] - marks[-2]

    nxt = AutoscaleState.from_dict(state.to_dict())
    if not config.autoscaler.enabled:
        nxt.candidates = {}
        return AutoscalePlan(state=nxt, timings={"total": 0.0})
    fleets = tuple(_fleet(q, inputs, state, nxt, config, now) for q in fleet_queues(config) if q in inputs.fleets)
    lap("fleets")
    pools = [p for p, pool in config.pools.items() if pool.provisioner and p in inputs.groups]
    if not pools:
        nxt.candidates = {}
    nodes: list[NodeDecision] = []
    reasons: dict[int, str] = {}
    growth = capacity.Growth()
    if pools:
        nodes, growth = _pools(pools, inputs, state, nxt, config, now, reasons, lap)
    timings["total"] = marks[-1] - marks[0]
    return AutoscalePlan(fleets, tuple(nodes), reasons, nxt, timings, growth.never_fit)


def fleet_queues(config: ClusterConfig) -> list[str]:
    """The queues whose fleet follows its backlog: ``elastic`` of metric ``queue_length`` with a ``fleet``."""
    return [q for q, c in config.queues.items()
            if c.elastic != "none" and c.elastic.metric == "queue_length" and c.elastic.fleet is not None]


def _fleet(queue: str, inputs: Inputs, state: AutoscaleState, nxt: AutoscaleState, config: ClusterConfig,
           now: float) -> FleetDecision:
    elastic = config.queues[queue].elastic
    current = int(inputs.fleets[queue])
    backlog = keda.backlog(inputs.jobs, queue)
    behavior = hpa.behavior_dict(elastic.behavior)
    window = hpa.recommendation_window(behavior)
    history = state.recommendations.get(queue) or [(now, current)]  # upstream seeds the first pass so
    events = state.scale_events.get(queue, [])
    step = keda.elastic_pass(
        elastic, backlog, current_replicas=current, last_active=state.last_active.get(queue), now=now,
        recommendations=[(now - t, r) for t, r in history], **hpa.event_ages(events, now))
    if step.active:
        nxt.last_active[queue] = now
    # The HPA keeps what its own passes saw and did: at zero replicas it is disabled (KEDA wakes the
    # fleet), and KEDA's 0 ↔ 1 is not one of its scale events.
    kept = [(t, r) for t, r in history if now - t <= window]
    nxt.recommendations[queue] = kept + [(now, step.recommended)] if current else kept
    scaled = step.replicas != current and current and step.replicas
    nxt.scale_events[queue] = hpa.record_scale_event(events, now, step.replicas - current if scaled else 0, behavior)
    per = elastic.per_replica
    message = f"backlog {backlog}, {per:g} per replica: {step.recommended} recommended"
    if step.limited_by:
        message += f", {step.replicas} after {step.limited_by}"
    return FleetDecision(queue, backlog, current, step.recommended, step.replicas, step.limited_by, message,
                         keda.no_capacity(inputs.jobs, queue, step.replicas))


def _pools(pools: list[str], inputs: Inputs, state: AutoscaleState, nxt: AutoscaleState, config: ClusterConfig,
           now: float, reasons: dict[int, str], lap) -> tuple[list[NodeDecision], "capacity.Growth"]:
    when = datetime.fromtimestamp(now, timezone.utc)
    world = World(inputs.snapshot, config, when)
    lap("snapshot")
    wanted = capacity.demands(capacity.waiting(inputs.jobs), config)
    lap("demands")
    left = capacity.fits_now(world, wanted)
    lap("fits_now")
    candidates: dict[str, tuple] = {}
    limits: dict[str, tuple[int, str]] = {}
    takes_work = {n.name for n in inputs.snapshot.nodes if n.schedulable}
    for p in pools:
        group, pool = inputs.groups[p], config.pools[p]
        starting = len(group.starting) - len(scaledown.timed_out(group, state.requested, config, now))
        # Starting at the last pass, ready to the provisioner now, still coming up in the snapshot
        # (read a moment before the group): capacity that is there, not a reason to add a node.
        coming = sum(1 for n in group.ready if n in state.requested and n not in takes_work)
        limits[p] = _limit(pool.max_nodes, group.spare, len(group.ready) + starting)
        template = capacity.pool_template(p, pool, inputs.snapshot)
        if template is not None:
            candidates[p] = (capacity.template_node(p, pool, template), starting + coming, limits[p][0])
    growth = capacity.grow(candidates, left, config, when) if left else capacity.Growth()
    lap("estimate")
    jobs = {j.id: j for j in inputs.jobs}
    known = {n for p in pools for g in [inputs.groups[p]] for n in (*g.ready, *g.starting, *g.stopping)}
    nxt.unneeded_since = {n: t for n, t in nxt.unneeded_since.items() if n in known}
    nxt.requested = {n: t for n, t in nxt.requested.items() if n in known}
    nxt.candidates = {n: t for n, t in nxt.candidates.items() if n in known}
    out = [_pool(p, inputs.groups[p], growth, limits[p], p in candidates, world, jobs, state, nxt, config, now, reasons)
           for p in pools]
    lap("decide")
    return out, growth


def _pool(p: str, group: NodeGroup, growth: "capacity.Growth", limit: tuple[int, str], has_template: bool,
          world: World, jobs: Mapping[int, Job], state: AutoscaleState, nxt: AutoscaleState, config: ClusterConfig,
          now: float, reasons: dict[int, str]) -> NodeDecision:
    """One pool's decision: what the backlog adds (raised to ``min_nodes``), what scale-down removes,
    the reasons of the jobs that wait for it, and the step that limited it."""
    pool, (room, bound) = config.pools[p], limit
    est = growth.chosen.get(p)
    current = len(group.ready) + len(group.starting)
    failed = scaledown.timed_out(group, state.requested, config, now)
    alive = current - len(failed)
    add = est.nodes if est else 0
    steps: list[tuple[str, str]] = []  # (limited_by, message), the first limit named wins
    if est and est.on_new:
        reasons.update(dict.fromkeys(est.on_new, f"waiting for capacity: adding {add} node(s) to pool {p}"))
        steps.append(("", f"adding {add} node(s) for {len(est.on_new)} pending job(s)"))
    if est and est.on_starting:
        text = f"waiting for capacity: {alive - len(group.ready)} node(s) of pool {p} are starting"
        reasons.update(dict.fromkeys(est.on_starting, text))
        steps.append(("", f"{len(est.on_starting)} pending job(s) wait for the starting node(s)"))
    if alive + add < pool.min_nodes and room > add:
        add = min(pool.min_nodes - alive, room)
        steps.insert(0, ("MinNodes", f"raising the pool to min_nodes {pool.min_nodes}"))
    over = growth.over_limit.get(p, ())
    if over:
        steps.append((bound, f"{len(over)} job(s) need more nodes than {bound} allows"))
    elif add and add >= room:
        steps.append((bound, "at its max_nodes" if bound == "MaxNodes" else "at its spare nodes"))
    down = scaledown.unneeded(p, group, world, jobs, config, since=state.unneeded_since, requested=state.requested,
                              last_scale_up=state.last_scale_up.get(p), now=now, may_remove=add == 0)
    if down.failed:
        steps.append(("Provisioning", f"gave up {len(down.failed)} node(s) not ready after"
                                      f" {config.autoscaler.max_node_provision_seconds:.0f} s"))
        nxt.failed[p] = nxt.failed.get(p, 0) + len(down.failed)
    if down.message and not add:
        steps.append((down.limited_by, down.message))
    if not has_template and not steps:
        steps.append(("NoTemplate", "no node_template and no node of the pool to copy"))
    if add:
        nxt.last_scale_up[p] = now
    _track(nxt, group, down, now)
    limited = next((why for why, _ in steps if why), "")
    message = "; ".join(text for _, text in steps)
    waiting = (est.on_new + est.on_starting) if est else ()
    return NodeDecision(p, current, current + add - len(down.remove), add, down.remove, down.drain, limited, message,
                        waiting, down.failed, down.candidates)


def _limit(max_nodes: int | None, spare: int | None, current: int) -> tuple[int, str]:
    """How many nodes may be added, and which bound sets it ("MaxNodes" or "Spare")."""
    by_max = max(0, max_nodes - current) if max_nodes is not None else None
    if spare is not None and (by_max is None or spare < by_max):
        return max(0, spare), "Spare"
    return (by_max if by_max is not None else MAX_COUNT), "MaxNodes"


def _track(nxt: AutoscaleState, group: NodeGroup, down: "scaledown.ScaleDown", now: float) -> None:
    """The pool's nodes in the next state: since when each is unneeded and a deletion candidate, and
    when each starting node was asked for (first seen starting, unless the loop recorded it when
    ``add_nodes`` answered)."""
    gone = set(down.remove)
    was = {n: nxt.candidates.pop(n) for n in (*group.ready, *group.starting, *group.stopping) if n in nxt.candidates}
    for n in (*group.ready, *group.starting, *group.stopping):
        nxt.unneeded_since.pop(n, None)
        if n in gone or n not in group.starting:
            nxt.requested.pop(n, None)
        else:
            nxt.requested.setdefault(n, now)
    nxt.unneeded_since.update({n: t for n, t in down.unneeded.items() if n not in gone})
    nxt.candidates.update({n: was.get(n, now) for n in down.candidates})


def soft_tainted(state: AutoscaleState) -> frozenset[str]:
    """The nodes the cycle takes last: the last pass's deletion candidates."""
    return frozenset(state.candidates)
