"""Which nodes of an autoscaled pool to retire: cluster-autoscaler's scale-down, on crossdock's jobs.

A ready node is *unneeded* when

- its utilisation is below the threshold: the larger of its CPU and memory requests over
  allocatable (``scale_down_utilization_threshold``, 0.5); a GPU node is judged on its GPUs alone
  (``scale_down_gpu_utilization_threshold``, 0.5), devices partly shared counting as used;
- everything on it could move elsewhere: no work crossdock did not start, no non-preemptible job,
  no part of a multi-node job, and every preemptible job on it fits another node now (placed with
  the real core on the world's inventory, this node and the other unneeded ones excluded). The
  moves are kept in the world, so two nodes never count on the same free room.

Every ready node below the threshold, unneeded or kept, is a *deletion candidate* while the pool
has more than ``min_nodes`` nodes: the cycle takes it last for new work (a ``PreferNoSchedule``
taint, as cluster-autoscaler soft-taints the nodes it means to remove), so that new work fills
the busier nodes and a candidate that runs non-preemptible work empties as that work ends
instead of taking more.

It becomes removable once unneeded for ``scale_down_unneeded_seconds`` (600) and
``scale_down_delay_after_add_seconds`` (600) after the pool's last scale-up, and never below
``min_nodes``. Per pass, like cluster-autoscaler: empty nodes go in bulk (up to
:data:`MAX_EMPTY_BULK`), at most one node with work, whose jobs are drained (requeued) first; only
the first :data:`NON_EMPTY_CANDIDATES` nodes with work (least used first) are simulated. Starting
nodes asked for more than ``max_node_provision_seconds`` (900) ago are given up: removed and
counted as failed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Mapping

import numpy as np

from crossdock.queue.autoscale.capacity import World
from crossdock.queue.config import ClusterConfig
from crossdock.queue.models import Job
from crossdock.queue.ports import NodeGroup
from crossdock.queue.scheduler.framework import CycleState
from crossdock.queue.scheduler.placement import place
from crossdock.queue.scheduler.request import build_request
from crossdock.queue.snapshot import Snapshot

MAX_EMPTY_BULK = 10
"""cluster-autoscaler's ``--max-empty-bulk-delete``."""
NON_EMPTY_CANDIDATES = 30
"""cluster-autoscaler's ``--scale-down-non-empty-candidates-count``."""


@dataclass(frozen=True)
class ScaleDown:
    pool: str
    unneeded: Mapping[str, float] = field(default_factory=dict)
    """Node → since when it has been unneeded (the next pass's ``since``)."""
    remove: tuple[str, ...] = ()
    """Nodes to remove now: the failed ones, then the retired ones."""
    drain: tuple[int, ...] = ()
    """Jobs to requeue off the retired nodes before they go."""
    failed: tuple[str, ...] = ()
    """Starting nodes given up after ``max_node_provision_seconds``."""
    blocked: Mapping[str, str] = field(default_factory=dict)
    """Nodes below the threshold that stay, with why."""
    candidates: tuple[str, ...] = ()
    """Ready nodes below the threshold that stay this pass, least used first: new work goes
    elsewhere while others have room (see the module's docstring)."""
    limited_by: str = ""
    message: str = ""


def utilisation(world: World, names: list[str]) -> dict[str, tuple[float, bool]]:
    """Node → (its utilisation, whether it is judged on its GPUs)."""
    inv = world.inv
    idx = np.array([inv.index[n] for n in names], np.int64)
    if not len(idx):
        return {}
    cpu = inv.cpu_used[idx] / np.maximum(inv.cpu_alloc[idx], 1)
    mem = inv.mem_used[idx] / np.maximum(inv.mem_alloc[idx], 1)
    gpu_nodes = inv.gpu_total[idx] > 0
    gpu = inv.res_used[2, idx] / np.maximum(inv.gpu_total[idx], 1)
    util = np.where(gpu_nodes, gpu, np.maximum(cpu, mem))
    return {n: (float(u), bool(g)) for n, u, g in zip(names, util.tolist(), gpu_nodes.tolist())}


def unneeded(pool: str, group: NodeGroup, world: World | Snapshot, jobs: Mapping[int, Job], config: ClusterConfig, *,
             since: Mapping[str, float], requested: Mapping[str, float], last_scale_up: float | None, now: float,
             may_remove: bool = True) -> ScaleDown:
    """The scale-down of ``pool`` this pass (see the module's docstring). ``world``: the cluster (a
    :class:`~.capacity.World`, which keeps the simulated moves for the next pool, or a snapshot);
    ``jobs``: the active jobs by id; ``since``/``requested``/``last_scale_up`` from the last pass's
    state; ``now`` in seconds (epoch). ``may_remove`` False (the pool grows this pass) tracks
    unneeded nodes but removes none."""
    if isinstance(world, Snapshot):
        world = World(world, config, datetime.fromtimestamp(now, timezone.utc))
    auto = config.autoscaler
    failed = timed_out(group, requested, config, now)
    inv = world.inv
    ready = [n for n in group.ready if n in inv.index and inv.schedulable[inv.index[n]]]
    util = utilisation(world, ready)
    on_node: dict[str, list] = {}
    for a in world.snapshot.allocations:
        on_node.setdefault(a.node, []).append(a)
    below = sorted((n for n in ready if util[n][0] < (auto.scale_down_gpu_utilization_threshold if util[n][1]
                                                      else auto.scale_down_utilization_threshold)),
                   key=lambda n: (bool(on_node.get(n)), util[n][0], n))
    found: dict[str, float] = {}
    blocked: dict[str, str] = {}
    drains: dict[str, tuple[int, ...]] = {}
    simulated = 0
    for name in below:
        allocs = on_node.get(name, [])
        why = _why_kept(allocs, jobs)
        if why is None and allocs:
            if simulated >= NON_EMPTY_CANDIDATES:
                continue
            simulated += 1
            why = _move(world, name, allocs, jobs, config)
        else:
            _exclude(world, name)
        if why is not None:
            blocked[name] = why
            continue
        found[name] = since.get(name, now)
        drains[name] = tuple(sorted({a.job_id for a in allocs}))
    limited, message = "", ""
    if blocked and not found:
        first = next(iter(blocked.items()))
        limited = "NonPreemptible" if any(w.startswith("NonPreemptible") for w in blocked.values()) else ""
        message = f"{len(blocked)} node(s) below the threshold stay ({first[0]}: {first[1]})"
    removable = [n for n in found if now - found[n] >= auto.scale_down_unneeded_seconds]
    if found and not removable:
        limited = "Unneeded"
        wait = min(auto.scale_down_unneeded_seconds - (now - s) for s in found.values())
        message = f"{len(found)} node(s) unneeded; the first may go in {wait:.0f} s"
    if removable and last_scale_up is not None and now - last_scale_up < auto.scale_down_delay_after_add_seconds:
        wait = auto.scale_down_delay_after_add_seconds - (now - last_scale_up)
        limited, message = "DelayAfterAdd", f"{len(removable)} node(s) removable in {wait:.0f} s (delay after add)"
        removable = []
    if removable and not may_remove:
        limited, message, removable = "ScaleUp", "nodes are being added to this pool; none removed", []
    keep = len(group.ready) + len(group.starting) - len(failed)
    room = max(0, keep - config.pools[pool].min_nodes)
    empty = [n for n in removable if not drains[n]][:MAX_EMPTY_BULK]
    busy = [n for n in removable if drains[n]][:1]
    chosen = (empty + busy)[:room]
    if len(chosen) < len(empty + busy):
        limited = "MinNodes"
        message = f"min_nodes {config.pools[pool].min_nodes} keeps {len(empty + busy) - len(chosen)} unneeded node(s)"
    elif chosen:
        limited, message = "", f"retiring {len(chosen)} node(s) unneeded for ≥ {auto.scale_down_unneeded_seconds:.0f} s"
    drain = tuple(j for n in chosen for j in drains[n])
    candidates = tuple(n for n in below if n not in chosen) if keep > config.pools[pool].min_nodes else ()
    return ScaleDown(pool, found, failed + tuple(chosen), drain, failed, blocked, candidates, limited, message)


def timed_out(group: NodeGroup, requested: Mapping[str, float], config: ClusterConfig, now: float) -> tuple[str, ...]:
    """The group's starting nodes asked for at least ``max_node_provision_seconds`` ago."""
    limit = config.autoscaler.max_node_provision_seconds
    return tuple(n for n in group.starting if n in requested and now - requested[n] >= limit)


def _why_kept(allocs: list, jobs: Mapping[int, Job]) -> str | None:
    for a in allocs:
        if a.job_id is None:
            return "runs work crossdock did not start"
        if not a.preemptible:
            return f"NonPreemptible: runs job {a.job_id}, which is not preemptible"
        job = jobs.get(a.job_id)
        if job is None:
            return f"runs job {a.job_id}, which this pass did not read"
        if len(job.nodes) > 1:
            return f"runs part of multi-node job {a.job_id}"
    return None


def _exclude(world: World, name: str) -> None:
    """Keep later simulations off a node that is going: unschedulable, with fresh filter caches
    (NodeUnschedulable is a static filter, cached per request shape)."""
    world.inv.schedulable[world.inv.index[name]] = False
    world.state = CycleState(world.inv, world.config, world.now)


def _move(world: World, name: str, allocs: list, jobs: Mapping[int, Job], config: ClusterConfig) -> str | None:
    """Release the node's jobs and place each elsewhere; None when all fit (the moves stay), else why not."""
    inv = world.inv
    for a in allocs:
        inv.release(a)
    _exclude(world, name)
    done = []
    for a in allocs:
        req = build_request(jobs[a.job_id], config)
        got = place(world.state, world.profile(req), req)
        if got is None:
            for assignments in reversed(done):
                for x in reversed(assignments):
                    inv.undo(x)
            for b in allocs:
                inv.apply(b)
            inv.schedulable[inv.index[name]] = True
            world.state = CycleState(inv, world.config, world.now)
            return f"job {a.job_id} fits no other node"
        done.append(got)
    return None
