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
from crossdock.queue.scheduler.registry import Profile
from crossdock.queue.scheduler.request import Request
from crossdock.queue.snapshot import Allocation

SINGLE_TRIES = 64
COMBINATION_BUDGET = 4000
MAX_NODES_EXAMINED = 256


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
        pairs = [(v, inv.index[a.node], a) for v in self.victims.values() for a in v.allocations]
        self.pair_victim = [p[0] for p in pairs]
        self.pair_node = np.array([p[1] for p in pairs], np.int64)
        self.pair_cpu = np.array([p[2].cpu_milli for p in pairs], np.int64)
        self.pair_mem = np.array([p[2].memory_mib for p in pairs], np.int64)
        self.pair_gpu = np.array([sum(g in inv.dev_col[p[1]] for g in p[2].gpu_ids) for p in pairs], np.int64)
        self.pair_share = np.array([round(max(p[2].gpu_share.values(), default=0) * FULL) for p in pairs], np.int64)
        self.pair_slices = np.array([sum(g in inv.slice_home for g in p[2].gpu_ids) for p in pairs], np.int64)
        self.pair_prio = np.array([p[0].priority for p in pairs], np.int64)
        self.pair_id = np.array([p[0].job_id for p in pairs], np.int64)
        self.by_node: dict[int, list[Victim]] = {}
        for v, i, _ in pairs:
            self.by_node.setdefault(i, []).append(v)

    # --- exact check on one node -------------------------------------------------------------
    def fits_without(self, state: CycleState, profile: Profile, req: Request, i: int, victims: Iterable[Victim]) -> bool:
        inv = self.inv
        saved = inv.save(i)
        name = inv.nodes[i].name
        for v in victims:
            for a in v.on(name):
                inv.release(a)
        ok = len(profile.feasible(state, req, np.array([i], np.int64))) == 1
        inv.restore(i, saved)
        return ok

    def candidates(self, req: Request, i: int) -> list[Victim]:
        vs = {v.job_id: v for v in self.by_node.get(i, []) if v.priority < req.priority and v.job_id not in self.taken}
        return sorted(vs.values(), key=lambda v: v.preference)

    # --- search ------------------------------------------------------------------------------
    def _single(self, state: CycleState, profile: Profile, req: Request, nodes: np.ndarray) -> tuple[int, Victim] | None:
        inv = self.inv
        if len(self.pair_node) == 0:
            return None
        n = self.pair_node
        ok = (self.pair_prio < req.priority) & np.isin(n, nodes)
        ok &= ~np.isin(self.pair_id, list(self.taken)) if self.taken else True
        ok &= inv.cpu_free[n] + self.pair_cpu >= req.cpu_milli
        ok &= inv.mem_free[n] + self.pair_mem >= req.memory_mib
        if req.gpus:
            ok &= inv.gpu_free[n] + self.pair_gpu >= req.gpus
        if req.gpu_share_milli:
            ok &= (inv.share_top[n] + self.pair_share >= req.gpu_share_milli) | (self.pair_gpu > 0)
        if req.mig_count:
            free = inv.mig_free.get(req.mig or "")
            have = free[n] if free is not None else 0
            ok &= have + self.pair_slices >= req.mig_count
        rows = np.flatnonzero(ok)
        if len(rows) == 0:
            return None
        ordered = sorted(rows, key=lambda r: (self.pair_victim[r].preference, int(n[r])))
        for r in ordered[:SINGLE_TRIES]:
            v, i = self.pair_victim[r], int(n[r])
            if self.fits_without(state, profile, req, i, [v]):
                return i, v
        return None

    def _smallest_on(self, state: CycleState, profile: Profile, req: Request, i: int, k_max: int,
                     budget: list[int]) -> tuple[Victim, ...] | None:
        cands = self.candidates(req, i)
        if not cands or not self.fits_without(state, profile, req, i, cands):
            return None
        for k in range(1, min(len(cands), k_max) + 1):
            found = []
            for combo in combinations(cands, k):
                budget[0] -= 1
                if budget[0] < 0:
                    break
                if self.fits_without(state, profile, req, i, combo):
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
        fitting_set = set(int(i) for i in fitting)
        nodes = [int(i) for i in static if int(i) not in fitting_set and int(i) in self.by_node]
        options = []
        for i in nodes[:MAX_NODES_EXAMINED]:
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
