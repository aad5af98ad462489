"""The upstream descheduler's strategies (its plugin and parameter names), on crossdock's view.

Each strategy proposes moves and leaves the rest to the evictor's rules and caps. Where the
upstream plugin evicts and hopes the scheduler does better, these reserve a destination first
when they can (``LowNodeUtilization`` lands a moved job on an under-utilised node,
``HighNodeUtilization`` empties a node only when every job on it lands on a node that stays),
so a move is never made that the next cycle would undo (descheduler#616, #994). ``nodeFit``:
a job that fits on no other node now is left where it is.

Utilisation is requested/allocatable in percent per resource (``cpu``, ``memory``, ``pods``,
``nvidia.com/gpu``); a node without a listed resource at all (a CPU node for
``nvidia.com/gpu``) is not classified.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from crossdock.queue.config_deschedule import (HighNodeUtilizationArgs, LowNodeUtilizationArgs, PodLifeTimeArgs,
                                               RemoveDuplicatesArgs, RemovePodsViolatingInterPodAntiAffinityArgs,
                                               RemovePodsViolatingNodeAffinityArgs,
                                               RemovePodsViolatingTopologySpreadConstraintArgs)
from crossdock.queue.deschedule.evictor import Evictor
from crossdock.queue.deschedule.migration import Migration, Skipped
from crossdock.queue.deschedule.view import Candidate, View
from crossdock.queue.scheduler.inventory import NO_POD_LIMIT
from crossdock.queue.scheduler.placement import choose

Strategy = Callable[[View, Evictor, object, list[Skipped]], list[Migration]]


def utilization(view: View, resource: str) -> np.ndarray:
    """Percent of each node's allocatable ``resource`` requested; NaN where the node has none."""
    inv = view.inv
    used, alloc = {
        "cpu": (inv.cpu_used, inv.cpu_alloc),
        "memory": (inv.mem_used, inv.mem_alloc),
        "pods": (inv.pods_used, np.where(inv.pods_alloc >= NO_POD_LIMIT, 0, inv.pods_alloc)),
        "nvidia.com/gpu": (inv.gpu_total - inv.gpu_free, inv.gpu_total),
    }[resource]
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(alloc > 0, used * 100.0 / np.maximum(alloc, 1), np.nan)


def _classify(view: View, thresholds: dict[str, float], below: bool, deviation: bool = False) -> np.ndarray:
    """Nodes all of whose listed resources are below (``below``) or any above the thresholds."""
    n = view.inv.n
    known = np.ones(n, bool)
    hit = np.ones(n, bool) if below else np.zeros(n, bool)
    for resource, pct in thresholds.items():
        u = utilization(view, resource)
        known &= ~np.isnan(u)
        limit = (np.nanmean(u) - pct if below else np.nanmean(u) + pct) if deviation and (~np.isnan(u)).any() else pct
        with np.errstate(invalid="ignore"):
            hit = (hit & (u < limit)) if below else (hit | (u > limit))
    return np.flatnonzero(known & hit & view.inv.schedulable)


def _move(view: View, c: Candidate, strategy: str, reason: str, to: int | None) -> Migration:
    return Migration(c.id, c.job.attempts, tuple(a.node for a in c.allocations),
                     (view.name(to),) if to is not None else None, strategy, reason, gpus=c.gpus)


def _evictable(view: View, evictor: Evictor, c: Candidate, strategy: str, skipped: list[Skipped]) -> bool:
    why = evictor.why_not(c)
    if why is not None:
        skipped.append(Skipped(c.id, strategy, why))
    return why is None


def _land_elsewhere(view: View, evictor: Evictor, c: Candidate, strategy: str, reason: str, skipped: list[Skipped],
                    allowed: set[int] | None = None) -> Migration | None:
    """Move single-node ``c`` with its destination reserved (nodeFit); a gang is released without
    one (the scheduler places it whole) if it would fit whole elsewhere."""
    view.release(c)
    if len(c.nodes) > 1:
        if view.config.descheduler.evictor.nodeFit and choose(view.state, view.profile(c.request), c.request) is None:
            view.restore(c)
            skipped.append(Skipped(c.id, strategy, "nodeFit: its gang fits nowhere else now"))
            return None
        evictor.take(c)
        return _move(view, c, strategy, reason, None)
    a = view.place_away(c, set(), allowed)
    if a is None:
        view.restore(c)
        where = "on an under-utilised node" if allowed is not None else "on another node"
        skipped.append(Skipped(c.id, strategy, f"nodeFit: fits nowhere {where} now"))
        return None
    evictor.take(c)
    return _move(view, c, strategy, reason, a.node)


def low_node_utilization(view: View, evictor: Evictor, args: LowNodeUtilizationArgs, skipped: list[Skipped]) -> list[Migration]:
    name = "LowNodeUtilization"
    under = _classify(view, args.thresholds, True, args.useDeviationThresholds)
    over = _classify(view, args.targetThresholds, False, args.useDeviationThresholds)
    if len(under) == 0 or len(over) == 0 or len(under) <= args.numberOfNodes:
        return []
    targets = set(under.tolist())
    per_node = args.evictionLimits.get("node")
    out: list[Migration] = []
    for i in over.tolist():
        moved = 0
        for c in sorted(view.on_node.get(i, []), key=lambda c: (c.job.priority, -_started(c), c.id)):
            if per_node is not None and moved >= per_node:
                break
            if i not in _classify(view, args.targetThresholds, False, args.useDeviationThresholds):
                break  # back under its target
            if len(c.nodes) > 1 or not _evictable(view, evictor, c, name, skipped):
                continue
            reason = f"node {view.name(i)} is above targetThresholds {_fmt(args.targetThresholds)}"
            m = _land_elsewhere(view, evictor, c, name, reason, skipped, allowed=targets)
            if m is not None:
                out.append(m)
                moved += 1
    return out


def high_node_utilization(view: View, evictor: Evictor, args: HighNodeUtilizationArgs, skipped: list[Skipped]) -> list[Migration]:
    """Empty the least-used nodes below ``thresholds``, whole nodes only, onto nodes that stay."""
    name = "HighNodeUtilization"
    under = _classify(view, args.thresholds, True)
    if len(under) <= args.numberOfNodes:
        return []
    key = next(iter(args.thresholds))
    u = utilization(view, key)
    order = sorted(under.tolist(), key=lambda i: (u[i], i))
    keep = set(range(view.inv.n)) - set(order)
    out: list[Migration] = []
    for i in order:
        jobs = view.on_node.get(i, [])
        if not jobs:
            continue
        stuck = [c for c in jobs if len(c.nodes) > 1 or evictor.why_not(c) is not None]
        if stuck:
            for c in stuck:
                why = "runs on several nodes (a gang)" if len(c.nodes) > 1 else evictor.why_not(c)
                skipped.append(Skipped(c.id, name, f"{why}: node {view.name(i)} cannot be emptied"))
            keep.add(i)
            continue
        if evictor.allows_together(jobs) is not None:
            skipped.extend(Skipped(c.id, name, f"{evictor.allows_together(jobs)}: node {view.name(i)} stays") for c in jobs)
            keep.add(i)
            continue
        landed = []
        for c in sorted(jobs, key=lambda c: (-c.gpus, c.id)):
            view.release(c)
            a = view.place_away(c, set(), keep)
            if a is None:
                view.restore(c)
                break
            landed.append((c, a))
        if len(landed) < len(jobs):
            for c, a in reversed(landed):
                view.inv.undo(a)
                view.restore(c)
            skipped.extend(Skipped(c.id, name, f"nodeFit: node {view.name(i)}'s jobs do not all fit on the nodes that stay")
                           for c in jobs)
            keep.add(i)
            continue
        for c, a in landed:
            evictor.take(c)
            out.append(_move(view, c, name, f"empties node {view.name(i)} (below thresholds {_fmt(args.thresholds)})"
                             " so the autoscaler can remove it", a.node))
    return out


def node_affinity(view: View, evictor: Evictor, args: RemovePodsViolatingNodeAffinityArgs, skipped: list[Skipped]) -> list[Migration]:
    name = "RemovePodsViolatingNodeAffinity"
    out = []
    for c in list(view.candidates):
        allowed = set(view.profile(c.request).static_nodes(view.state, c.request).tolist())
        wrong = [i for i in c.nodes if i not in allowed]
        if not wrong or not _evictable(view, evictor, c, name, skipped):
            continue
        m = _land_elsewhere(view, evictor, c, name, f"node {view.name(wrong[0])} no longer matches its pool or"
                            " node selector", skipped)
        if m is not None:
            out.append(m)
    return out


def inter_pod_anti_affinity(view: View, evictor: Evictor, args: RemovePodsViolatingInterPodAntiAffinityArgs,
                            skipped: list[Skipped]) -> list[Migration]:
    name = "RemovePodsViolatingInterPodAntiAffinity"
    out = []
    for i, jobs in sorted(view.on_node.items()):
        groups: dict[int, list[Candidate]] = {}
        for c in jobs:
            if c.request.anti_affinity:
                groups.setdefault(c.request.group, []).append(c)
        for members in groups.values():
            for c in sorted(members, key=lambda c: (_started(c), c.id))[1:]:  # the oldest stays
                if not _evictable(view, evictor, c, name, skipped):
                    continue
                m = _land_elsewhere(view, evictor, c, name, f"shares node {view.name(i)} with another worker of"
                                    f" its anti-affinity group {c.request.group}", skipped)
                if m is not None:
                    out.append(m)
    return out


def topology_spread(view: View, evictor: Evictor, args: RemovePodsViolatingTopologySpreadConstraintArgs,
                    skipped: list[Skipped]) -> list[Migration]:
    """A gang with a ``topology`` key must sit in one domain of it (a hard constraint,
    ``DoNotSchedule``); one whose nodes now span several domains (a node's label changed) moves whole."""
    name = "RemovePodsViolatingTopologySpreadConstraint"
    out = []
    for c in list(view.candidates):
        key = c.request.topology_key
        if not key or len(c.nodes) < 2:
            continue
        domains = {view.inv.nodes[i].labels.get(key) for i in c.nodes}
        if len(domains) == 1 and None not in domains:
            continue
        if not _evictable(view, evictor, c, name, skipped):
            continue
        shown = ", ".join(sorted(str(d) for d in domains))
        view.release(c)
        if args.topologyBalanceNodeFit and choose(view.state, view.profile(c.request), c.request) is None:
            view.restore(c)
            skipped.append(Skipped(c.id, name, f"spans {key} domains {shown}, but no single domain has room now"))
            continue
        evictor.take(c)
        out.append(_move(view, c, name, f"its workers span {len(domains)} {key} domains ({shown})", None))
    return out


def remove_duplicates(view: View, evictor: Evictor, args: RemoveDuplicatesArgs, skipped: list[Skipped]) -> list[Migration]:
    name = "RemoveDuplicates"
    if "array" in args.excludeOwnerKinds:
        return []
    out = []
    for i, jobs in sorted(view.on_node.items()):
        groups: dict[int, list[Candidate]] = {}
        for c in jobs:
            if c.job.array_job_id is not None and len(c.nodes) == 1:
                groups.setdefault(c.job.array_job_id, []).append(c)
        for array_id, members in groups.items():
            for c in sorted(members, key=lambda c: (_started(c), c.id))[1:]:
                if not _evictable(view, evictor, c, name, skipped):
                    continue
                m = _land_elsewhere(view, evictor, c, name, f"another task of array {array_id} runs on"
                                    f" {view.name(i)}", skipped)
                if m is not None:
                    out.append(m)
    return out


def pod_lifetime(view: View, evictor: Evictor, args: PodLifeTimeArgs, skipped: list[Skipped]) -> list[Migration]:
    name = "PodLifeTime"
    now = view.now.timestamp()
    old = [c for c in view.candidates if c.job.start_time is not None and now - _started(c) > args.maxPodLifeTimeSeconds]
    out = []
    for c in sorted(old, key=lambda c: (_started(c), c.id)):  # oldest first, as upstream
        if not _evictable(view, evictor, c, name, skipped):
            continue
        m = _land_elsewhere(view, evictor, c, name, f"running for {now - _started(c):.0f} s, over"
                            f" maxPodLifeTimeSeconds {args.maxPodLifeTimeSeconds}", skipped)
        if m is not None:
            out.append(m)
    return out


STRATEGIES: dict[str, Strategy] = {
    # upstream's order: the deschedule plugins, then the balance plugins
    "RemoveDuplicates": remove_duplicates,  # type: ignore[dict-item]
    "PodLifeTime": pod_lifetime,  # type: ignore[dict-item]
    "RemovePodsViolatingNodeAffinity": node_affinity,  # type: ignore[dict-item]
    "RemovePodsViolatingInterPodAntiAffinity": inter_pod_anti_affinity,  # type: ignore[dict-item]
    "RemovePodsViolatingTopologySpreadConstraint": topology_spread,  # type: ignore[dict-item]
    "LowNodeUtilization": low_node_utilization,  # type: ignore[dict-item]
    "HighNodeUtilization": high_node_utilization,  # type: ignore[dict-item]
}


def _started(c: Candidate) -> float:
    return c.job.start_time.timestamp() if c.job.start_time else 0.0


def _fmt(thresholds: dict[str, float]) -> str:
    return ", ".join(f"{k} {v:g}%" for k, v in thresholds.items())
