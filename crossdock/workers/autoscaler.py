"""The autoscaler loop: fleets and node pools follow the backlog, decided by the pure core.

One pass (the scheduling leader runs it as a step of its turn, every
``autoscaler.interval_seconds`` and at once when new jobs arrive, so that a backlog spike is
answered within a cycle rather than a poll period):

1. read the pending and active jobs and the scheduler's snapshot; each elastic queue's fleet
   replicas (``ScalesFleet``) and each provisioned pool's node group (``ProvisionsNodes``);
2. :func:`crossdock.queue.autoscale.plan.plan` decides (pure); its state is saved at once;
3. act: set each fleet's replicas (a scale-in stops only idle replicas, the actuator's promise);
   add nodes; drain the preemptible jobs on nodes to retire through the preemption path (the
   follower requeues them as for any preemption) and remove a node only once nothing runs on it;
4. record the pass's decisions and one event per change (``redis_store/autoscale.py``) and mark
   the pending jobs that wait for capacity ``WaitingForCapacity``.

Reasons are written by two parties, so one rule decides them: the cycle writes every pending
job's reason each cycle, and :func:`capacity_reasons` upgrades its "no room" reasons
(Resources, Unschedulable) to ``WaitingForCapacity`` for the jobs the last pass found waiting
for capacity; the pass applies the same rule to the reasons standing. A job the autoscaler stops
listing (its pool at ``max_nodes``) goes back to the cycle's reason at the next cycle.

A target whose backend is away is skipped for the pass (logged, shown with its error in
``crossdock autoscale``); the others go on. A fleet without a ``name`` is named after its queue.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Callable, Collection, Mapping, Sequence

from crossdock.observe import metrics
from crossdock.queue.autoscale.plan import (AutoscalePlan, AutoscaleState, FleetDecision, Inputs, NodeDecision, plan,
                                            soft_tainted)
from crossdock.queue.config import ClusterConfig, Fleet
from crossdock.queue.models import Job
from crossdock.queue.ports import NodeGroup, ProvisionsNodes, ScalesFleet
from crossdock.queue.snapshot import Snapshot
from crossdock.queue.states import Reason
from crossdock.workers.app import SendTask
from crossdock.workers.loops import EXPECTED

log = logging.getLogger(__name__)

UPGRADABLE = frozenset({Reason.RESOURCES, Reason.UNSCHEDULABLE, Reason.WAITING_FOR_CAPACITY})
"""The cycle's reasons that mean "no room now": the ones more capacity on its way answers."""

Busy = Callable[[], Collection[str]]
"""The replicas (worker host names: pod names on Kubernetes) that run a task now."""


def capacity_reasons(reasons: Mapping[int, str], explanations: Mapping[int, str],
                     waiting: Mapping[int, str]) -> tuple[dict[int, str], dict[int, str]]:
    """The cycle's pending reasons and explanations, with ``WaitingForCapacity`` (and the
    autoscaler's explanation) for jobs in ``waiting`` whose reason is one of UPGRADABLE."""
    reasons, explanations = dict(reasons), dict(explanations)
    for job_id, why in waiting.items():
        if reasons.get(job_id) in UPGRADABLE:
            reasons[job_id], explanations[job_id] = Reason.WAITING_FOR_CAPACITY, why
    return reasons, explanations


def fleets_of(config: ClusterConfig) -> dict[str, Fleet]:
    """Elastic queue → its fleet, a fleet without a name named after its queue."""
    out = {}
    for qname, q in config.queues.items():
        if q.elastic != "none" and q.elastic.fleet is not None:
            fleet = q.elastic.fleet
            out[qname] = fleet if fleet.name else fleet.model_copy(update={"name": qname})
    return out


def provisioned_pools(config: ClusterConfig) -> list[str]:
    return [name for name, pool in config.pools.items() if pool.provisioner is not None]


class Autoscaler:
    def __init__(self, rt: Any, holder: str, snapshot: Callable[[list[Job], list[Job]], Snapshot], send: SendTask,
                 fleets: Mapping[str, ScalesFleet] | None = None, busy: Busy | None = None,
                 plan_fn: Callable[..., AutoscalePlan] = plan, clock: Callable[[], float] = time.time,
                 nodes_changed: Callable[[str], None] | None = None):
        self.rt, self.holder, self.snapshot, self.send = rt, holder, snapshot, send
        self.nodes_changed = nodes_changed
        """Called with a backend kind whose nodes changed or are changing: its inventory is read again."""
        self.actuators = dict(fleets or {})
        """Backend kind → the fleet actuator to use instead of the backend (the local fleet is run
        by ``crossdock up``, not by the local backend)."""
        self.busy, self.plan_fn, self.clock = busy, plan_fn, clock
        self.waiting: dict[int, str] = {}
        """The last pass's pending jobs waiting for capacity → why (for :func:`capacity_reasons`)."""
        self._soft: frozenset[str] | None = None

    def soft_tainted(self) -> frozenset[str]:
        """The nodes the cycle takes last (the last pass's deletion candidates; before this process's
        first pass, the stored state's)."""
        if not self.wanted():
            return frozenset()
        if self._soft is None:
            try:
                self._soft = soft_tainted(AutoscaleState.from_dict(self.rt.store.autoscale.state() or {}))
            except ValueError:  # a state pass_once reports and replaces
                self._soft = frozenset()
        return self._soft

    def wanted(self) -> bool:
        cfg = self.rt.config
        return cfg.autoscaler.enabled and bool(fleets_of(cfg) or provisioned_pools(cfg))

    def fleet_actuator(self, kind: str) -> ScalesFleet:
        actuator = self.actuators.get(kind) or self.rt.backends(kind)
        if not isinstance(actuator, ScalesFleet):
            raise TypeError(f"backend {kind} scales no fleets (it implements no ScalesFleet)")
        return actuator

    def provisioner(self, pool: str) -> ProvisionsNodes:
        kind = self.rt.config.pools[pool].backend
        backend = self.rt.backends(kind)
        if not isinstance(backend, ProvisionsNodes):
            raise TypeError(f"backend {kind} provisions no nodes (pool {pool})")
        return backend

    # --- one pass ----------------------------------------------------------------------------
    def pass_once(self) -> AutoscalePlan | None:
        if not self.wanted():
            self.waiting, self._soft = {}, frozenset()
            return None
        cfg, store = self.rt.config, self.rt.store
        pending = store.get_many(store.pending_ids())
        active = store.get_many(store.active_ids())
        snapshot = self.snapshot(pending, active)
        errors: dict[str, str] = {}
        fleets, replicas = fleets_of(cfg), {}
        for queue, fleet in fleets.items():
            try:
                replicas[queue] = self.fleet_actuator(fleet.backend).fleet_replicas(fleet)
            except (*EXPECTED, TypeError) as exc:
                errors[f"fleet:{queue}"] = self._skip(f"fleet of {queue}", exc)
        groups: dict[str, NodeGroup] = {}
        for pool in provisioned_pools(cfg):
            try:
                groups[pool] = self.provisioner(pool).node_group(pool)
            except (*EXPECTED, TypeError) as exc:
                errors[f"pool:{pool}"] = self._skip(f"nodes of pool {pool}", exc)
        state = AutoscaleState.from_dict(store.autoscale.state() or {})
        result = self.plan_fn(Inputs(snapshot, [*pending, *active], replicas, groups), state, cfg, self.clock())
        store.autoscale.save_state(result.state.to_dict())
        self._soft = soft_tainted(result.state)
        changes = [*self._scale_fleets(result.fleets, fleets, errors), *self._resize_pools(result.nodes, active, errors)]
        passed = decisions(result, groups, fleets, errors)
        store.autoscale.record_pass(passed, changes, self.holder)
        metrics.record_autoscale(passed)
        self.waiting = dict(result.reasons)
        self._mark_waiting(pending)
        moving = {p for p, g in groups.items() if g.starting or g.stopping} | {c["pool"] for c in changes if "pool" in c}
        for kind in {cfg.pools[p].backend for p in moving}:
            if self.nodes_changed:
                self.nodes_changed(kind)
        return result

    def _skip(self, what: str, exc: BaseException) -> str:
        why = f"{type(exc).__name__}: {exc}"
        log.warning("autoscaler: %s unavailable this pass (%s)", what, why)
        return why

    def _scale_fleets(self, plan_fleets: Sequence[FleetDecision], fleets: Mapping[str, Fleet],
                      errors: dict[str, str]) -> list[dict[str, Any]]:
        changes = []
        for d in plan_fleets:
            fleet = fleets.get(d.queue)
            if fleet is None or d.desired == d.current:
                continue
            try:
                # an actuator of this process (the local fleet) asks its own replicas; a backend's
                # fleet (a Deployment) is told which workers run a task now
                asks = self.busy is not None and d.desired < d.current and fleet.backend not in self.actuators
                busy = frozenset(self.busy()) if asks else frozenset()
                reached = self.fleet_actuator(fleet.backend).scale_fleet(fleet, d.desired, busy=busy)
            except (*EXPECTED, TypeError) as exc:
                errors[f"fleet:{d.queue}"] = self._skip(f"scaling the fleet of {d.queue}", exc)
                continue
            if reached != d.current:
                log.info("autoscaler: fleet %s of %s %s -> %s (%s)", fleet.name, d.queue, d.current, reached,
                         fleet_reason(d, reached))
                changes.append({"target": f"fleet:{d.queue}", "event": "fleet_scaled", "queue": d.queue,
                                "fleet": fleet.name, "from": d.current, "to": reached, "desired": d.desired,
                                "backlog": d.backlog, "recommended": d.recommended,
                                "limited_by": d.limited_by, "reason": fleet_reason(d, reached)})
        return changes

    def _resize_pools(self, plan_nodes: Sequence[NodeDecision], active: Sequence[Job],
                      errors: dict[str, str]) -> list[dict[str, Any]]:
        changes: list[dict[str, Any]] = []
        on_node: dict[str, list[Job]] = {}
        for job in active:
            for n in job.nodes:
                on_node.setdefault(n, []).append(job)
        for d in plan_nodes:
            target = f"pool:{d.pool}"
            try:
                backend = self.provisioner(d.pool)
                if d.add > 0:
                    added = backend.add_nodes(d.pool, d.add)
                    if added:
                        changes.append({"target": target, "event": "nodes_added", "pool": d.pool, "from": d.current,
                                        "to": d.current + len(added), "nodes": added, "limited_by": d.limited_by,
                                        "reason": node_reason(d, f"{len(added)} added")})
                if d.remove:
                    changes += self._retire(d, backend, on_node)
            except (*EXPECTED, TypeError) as exc:
                errors[target] = self._skip(f"resizing pool {d.pool}", exc)
        return changes

    def _retire(self, d: NodeDecision, backend: ProvisionsNodes, on_node: Mapping[str, list[Job]]) -> list[dict]:
        """Drain the preemptible jobs on the nodes to retire (once each), remove the nodes nothing runs on."""
        changes: list[dict[str, Any]] = []
        target, drain = f"pool:{d.pool}", set(d.drain)
        draining = [j for n in d.remove for j in on_node.get(n, ()) if j.id in drain and not j.preempt_requested]
        for job in draining:
            grace = self.rt.config.priority_classes[job.priority_class].grace_seconds
            self.rt.store.request_preempt(job.id, grace)
            self.send("crossdock.preempt", [job.id, grace, job.attempts], job.backend or "local")
        if draining:
            nodes = sorted({n for j in draining for n in j.nodes if n in d.remove})
            changes.append({"target": target, "event": "nodes_drained", "pool": d.pool, "nodes": nodes,
                            "jobs": [j.id for j in draining],
                            "reason": node_reason(d, "preemptible work requeued before its nodes go")})
        # a node goes only once nothing runs on it; one that still runs work the plan did not
        # drain (it started since the snapshot) stays
        empty = [n for n in d.remove if not on_node.get(n)]
        removed = backend.remove_nodes(d.pool, empty) if empty else []
        if removed:
            failed = [n for n in removed if n in d.failed]
            why = f"{len(failed)} not ready in time, {len(removed) - len(failed)} unneeded" if failed else "unneeded"
            changes.append({"target": target, "event": "nodes_removed", "pool": d.pool, "from": d.current,
                            "to": d.current - len(removed), "nodes": removed, "failed": failed or None,
                            "limited_by": d.limited_by, "reason": node_reason(d, why)})
        return changes

    def _mark_waiting(self, pending: Sequence[Job]) -> None:
        standing = {j.id: j.reason for j in pending}
        reasons, explanations = capacity_reasons(standing, {}, self.waiting)
        upgraded = {i: r for i, r in reasons.items() if r == Reason.WAITING_FOR_CAPACITY and standing[i] != r}
        self.rt.store.set_reasons(upgraded, {i: explanations[i] for i in upgraded})


# --- what a pass shows -----------------------------------------------------------------------------
def fleet_reason(d: FleetDecision, reached: int | None = None) -> str:
    """The plan's own message, else the decision's numbers; and how far a scale-in got."""
    text = d.message or f"backlog {d.backlog}: {d.recommended} recommended, {d.desired} desired" + (
        f" (limited by {d.limited_by})" if d.limited_by else "")
    if reached is not None and reached != d.desired:
        text += f"; {reached} reached (busy replicas are not stopped)"
    return text


def node_reason(d: NodeDecision, what: str) -> str:
    """What was done, then the plan's own message, else the decision's numbers."""
    return f"{what}: " + (d.message or f"{d.current} -> {d.desired} desired" + (
        f" (limited by {d.limited_by})" if d.limited_by else ""))


def decisions(result: AutoscalePlan, groups: Mapping[str, NodeGroup], fleets: Mapping[str, Fleet],
              errors: Mapping[str, str]) -> dict[str, Any]:
    """The pass as ``crossdock autoscale`` shows it (plain data, saved as JSON)."""
    decided_fleets = {d.queue for d in result.fleets}
    decided_pools = {d.pool for d in result.nodes}
    out_fleets = [{"queue": d.queue, "fleet": fleets[d.queue].name if d.queue in fleets else None,
                   "backend": fleets[d.queue].backend if d.queue in fleets else None, "backlog": d.backlog,
                   "current": d.current, "recommended": d.recommended, "desired": d.desired,
                   "limited_by": d.limited_by, "message": d.message, "note": d.note,
                   "error": errors.get(f"fleet:{d.queue}")}
                  for d in result.fleets]
    out_fleets += [{"queue": q, "fleet": f.name, "backend": f.backend, "error": errors[f"fleet:{q}"]}
                   for q, f in fleets.items() if q not in decided_fleets and f"fleet:{q}" in errors]
    out_pools = []
    for d in result.nodes:
        g = groups.get(d.pool, NodeGroup(d.pool))
        out_pools.append({"pool": d.pool, "ready": len(g.ready), "starting": len(g.starting),
                          "stopping": len(g.stopping), "current": d.current, "desired": d.desired, "add": d.add,
                          "remove": list(d.remove), "drain": list(d.drain), "waiting": len(d.waiting),
                          "candidates": list(d.candidates), "limited_by": d.limited_by, "message": d.message, "error": errors.get(f"pool:{d.pool}")})
    out_pools += [{"pool": key.split(":", 1)[1], "error": why} for key, why in errors.items()
                  if key.startswith("pool:") and key.split(":", 1)[1] not in decided_pools]
    return {"fleets": out_fleets, "pools": out_pools}
