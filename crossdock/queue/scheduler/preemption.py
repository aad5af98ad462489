"""Preemption (the post-filter): the fewest running jobs whose eviction lets a blocked job fit.

Rules: only preemptible jobs of strictly lower priority are victims, never one that is already
terminating; a gang victim is evicted whole (all its nodes); among victim sets of the same
(smallest) size, sets of borrowing queues' jobs come first, then lower priorities, then the most
recently started. Capacity is checked with the same filters that placement uses, on the node
with the victims' allocations given back (a simulation, restored afterwards).

The search: one victim per node is tried first over every (victim, node) pair that passes a
vectorized necessary condition, in preference order; only if no single victim suffices are
pairs, triples… tried per node, within a budget of combinations (exact on small clusters; on
big ones the budget bounds the work and the set found is minimal among the nodes examined).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from itertools import combinations
from typing import Iterable

import numpy as np

from crossdock.queue.scheduler.framework import CycleState
from crossdock.queue.scheduler.inventory import FULL, Inventory
from crossdock.queue.scheduler.plugins.reserved_capacity import ReservedCapacity
from crossdock.queue.scheduler.registry import Profile
from crossdock.queue.scheduler.request import Request
from crossdock.queue.snapshot import Allocation

SINGLE_TRIES = 64
COMBINATION_BUDGET = 2000
MAX_NODES_EXAMINED = 128


@dataclass(frozen=True, slots=True)
class Victim:
    job_id: int
    allocations: tuple[Allocation, ...]
    priority: int
    started: float
    borrowing: bool
    grace_seconds: int

    def on(self, node: str) -> list[Allocation]:
        return [a for a in self.allocations if a.node == node]

    @property
    def preference(self) -> tuple:
        return (not self.borrowing, self.priority, -self.started, self.job_id)


def set_key(victims: Iterable[Victim]) -> tuple:
    vs = list(victims)
    return (sum(not v.borrowing for v in vs), max(v.priority for v in vs), sum(v.priority for v in vs),
            -min(v.started for v in vs), tuple(sorted(v.job_id for v in vs)))


class Preemptor:
    def __init__(self, inv: Inventory, allocations: Iterable[Allocation], borrowing: set[str]):
        self.inv = inv
        groups: dict[int, list[Allocation]] = {}
        for a in allocations:
            if a.job_id is not None and a.preemptible and not a.terminating and a.node in inv.index:
                groups.setdefault(a.job_id, []).append(a)
        self.victims = {jid: Victim(jid, tuple(allocs), allocs[0].priority,
                                    _ts(allocs[0].start_time), allocs[0].queue in borrowing,
                                    max(a.grace_seconds for a in allocs))
                        for jid, allocs in groups.items()}
        self.taken: set[int] = set()
        # one unit per (victim, node): what the victim would give back on that node
        units: dict[tuple[int, int], list] = {}
        slices = inv.slice_home
        for v in self.victims.values():
            for a in v.allocations:
                i = inv.index[a.node]
                u = units.setdefault((v.job_id, i), [v, i, 0, 0, 0, 0, 0])
                u[2] += a.cpu_milli
                u[3] += a.memory_mib
                if a.gpu_ids:
                    cols = inv.dev_col[i]
                    u[4] += sum(g in cols for g in a.gpu_ids)
                    if slices:
                        u[6] += sum(g in slices for g in a.gpu_ids)
                if a.gpu_share:
                    # a shared device may become idle when its last sharer leaves: count it (a necessary bound)
                    u[4] += len(a.gpu_share)
                    u[5] = max(u[5], round(max(a.gpu_share.values()) * FULL))
        keys = {v.job_id: v.preference for v in self.victims.values()}
        rows = sorted(units.values(), key=lambda u: (keys[u[0].job_id], u[1]))
        self.unit_victim = [u[0] for u in rows]
        self.unit_node = np.array([u[1] for u in rows], np.int64)
        self.unit_cpu, self.unit_mem, self.unit_gpu, self.unit_share, self.unit_slices = (
            np.array([u[k] for u in rows], np.int64) for k in range(2, 7))
        self.unit_prio = np.array([u[0].priority for u in rows], np.int64)
        self.unit_id = np.array([u[0].job_id for u in rows], np.int64)
        self.held = {(u[0].job_id, u[1]): (u[2], u[3], u[4]) for u in rows}
        """(job id, node) -> (cpu, memory, GPUs that may become idle) the victim gives back there."""
        self.by_node: dict[int, list[Victim]] = {}
        for u in rows:
            self.by_node.setdefault(u[1], []).append(u[0])
        self.shared_nodes = {inv.index[a.node] for v in self.victims.values() for a in v.allocations if a.gpu_share}

    # --- exact check on one node -------------------------------------------------------------
    def could_fit(self, req: Request, i: int, victims: Iterable[Victim]) -> bool:
        """Necessary condition (CPU, memory, idle GPU counts) before the exact simulation."""
        inv = self.inv
        cpu, mem, gpu = int(inv.cpu_free[i]), int(inv.mem_free[i]), int(inv.gpu_free[i])
        for v in victims:
            c, m, g = self.held.get((v.job_id, i), (0, 0, 0))
            cpu, mem, gpu = cpu + c, mem + m, gpu + g
        return cpu >= req.cpu_milli and mem >= req.memory_mib and gpu >= req.gpus

    def counts_decide(self, state: CycleState, req: Request, i: int) -> bool:
        """True when :meth:`could_fit` is exact on node ``i`` for ``req`` (no simulation needed): only
        CPU, memory and idle-GPU counts matter (no shares, MIG, islands to respect, anti-affinity or
        holds on the node)."""
        inv = self.inv
        if req.gpu_share_milli or req.mig_count or req.exclusive or req.anti_affinity or i in self.shared_nodes:
            return False
        if 2 <= req.gpus <= inv.island_cap[i]:
            return False
        held = ReservedCapacity().filter(state, req, np.array([i], np.int64))
        return held is None

    def fits_without(self, state: CycleState, profile: Profile, req: Request, i: int, victims: Iterable[Victim]) -> bool:
        inv = self.inv
        saved = inv.save(i)
        name = inv.nodes[i].name
        inv.quiet = True
        try:
            for v in victims:
                for a in v.on(name):
                    inv.release(a)
            ok = len(profile.feasible(state, req, np.array([i], np.int64))) == 1
        finally:
            inv.restore(i, saved)
            inv.quiet = False
        return ok

    def candidates(self, req: Request, i: int) -> list[Victim]:
        vs = {v.job_id: v for v in self.by_node.get(i, []) if v.priority < req.priority and v.job_id not in self.taken}
        return sorted(vs.values(), key=lambda v: v.preference)

    # --- search ------------------------------------------------------------------------------
    def _usable(self, req: Request) -> np.ndarray:
        ok = self.unit_prio < req.priority
        if self.taken:
            ok &= ~np.isin(self.unit_id, list(self.taken))
        return ok

    def _single(self, state: CycleState, profile: Profile, req: Request, nodes: np.ndarray) -> tuple[int, Victim] | None:
        inv = self.inv
        if len(self.unit_node) == 0:
            return None
        n = self.unit_node
        ok = self._usable(req) & np.isin(n, nodes)
        ok &= inv.cpu_free[n] + self.unit_cpu >= req.cpu_milli
        ok &= inv.mem_free[n] + self.unit_mem >= req.memory_mib
        if req.gpus:
            ok &= inv.gpu_free[n] + self.unit_gpu >= req.gpus
        if req.gpu_share_milli:
            ok &= (inv.share_top[n] + self.unit_share >= req.gpu_share_milli) | (self.unit_gpu > 0)
        if req.mig_count:
            free = inv.mig_free.get(req.mig or "")
            have = free[n] if free is not None else 0
            ok &= have + self.unit_slices >= req.mig_count
        for r in np.flatnonzero(ok)[:SINGLE_TRIES]:  # units are in preference order already
            v, i = self.unit_victim[r], int(n[r])
            if self.counts_decide(state, req, i) or self.fits_without(state, profile, req, i, [v]):
                return i, v  # the vectorized check above is could_fit for this one victim
        return None

    def lower_bounds(self, req: Request) -> tuple[np.ndarray, np.ndarray]:
        """Per node: at least this many victims are needed (each gives back at most the most any one
        usable victim there holds), and whether all usable victims together could be enough."""
        inv = self.inv
        usable = self._usable(req)
        n = self.unit_node[usable]
        bound = np.zeros(inv.n, np.int64)
        enough = np.ones(inv.n, bool)
        for amounts, free, need in ((self.unit_cpu, inv.cpu_free, req.cpu_milli),
                                    (self.unit_mem, inv.mem_free, req.memory_mib),
                                    (self.unit_gpu, inv.gpu_free, req.gpus)):
            deficit = need - free
            top = np.zeros(inv.n, np.int64)
            np.maximum.at(top, n, amounts[usable])
            total = np.bincount(n, amounts[usable], minlength=inv.n)
            enough &= (deficit <= 0) | (total >= deficit)
            lb = np.where(deficit <= 0, 0, -(-deficit // np.maximum(top, 1)))
            bound = np.maximum(bound, lb)
        return bound, enough

    def _smallest_on(self, state: CycleState, profile: Profile, req: Request, i: int, k_max: int,
                     budget: list[int]) -> tuple[Victim, ...] | None:
        cands = self.candidates(req, i)
        exact = self.counts_decide(state, req, i)
        if not cands or not self.could_fit(req, i, cands) or not (
                exact or self.fits_without(state, profile, req, i, cands)):
            return None
        for k in range(1, min(len(cands), k_max) + 1):
            found = []
            for combo in combinations(cands, k):
                if not self.could_fit(req, i, combo):
                    continue
                budget[0] -= 1
                if budget[0] < 0:
                    break
                if exact or self.fits_without(state, profile, req, i, combo):
                    found.append(combo)
            if found:
                return min(found, key=set_key)
            if budget[0] < 0:
                break
        return tuple(cands) if len(cands) <= k_max else None

    def find(self, state: CycleState, profile: Profile, req: Request, cap: int) -> tuple[list[int], list[Victim]] | None:
        """Nodes (one per missing worker) and the victims that make room on them, or None."""
        if cap <= 0:
            return None
        static = profile.static_nodes(state, req)
        fitting = profile.feasible(state, req, static)
        missing = req.nodes - len(fitting)
        if missing <= 0:
            return None
        if missing == 1 and req.nodes == 1:
            single = self._single(state, profile, req, static)
            if single is not None:
                return [single[0]], [single[1]]
        budget = [COMBINATION_BUDGET]
        bound, enough = self.lower_bounds(req)
        mask = np.zeros(self.inv.n, bool)
        mask[static] = True
        mask[fitting] = False
        nodes = np.flatnonzero(mask & enough & (bound <= cap))
        nodes = nodes[np.lexsort((nodes, bound[nodes]))]
        options = []
        for i in nodes[:MAX_NODES_EXAMINED]:
            i = int(i)
            if len(options) >= missing and bound[i] > sorted(o[0] for o in options)[missing - 1]:
                break  # no later node can need fewer victims
            found = self._smallest_on(state, profile, req, i, cap, budget)
            if found is not None:
                options.append((len(found), set_key(found), i, found))
            if budget[0] < 0:
                break
        if len(options) < missing:
            return None
        options.sort(key=lambda o: (o[0], o[1], o[2]))
        chosen = options[:missing]
        victims: dict[int, Victim] = {}
        for _, _, _, found in chosen:
            for v in found:
                victims[v.job_id] = v
        if len(victims) > cap:
            return None
        return [o[2] for o in chosen], list(victims.values())


def _ts(t: datetime | None) -> float:
    return t.timestamp() if t is not None else 0.0
