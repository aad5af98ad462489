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

Speed: the running jobs are indexed once per cycle, as arrays of (victim, node) units; per job
priority the per-node sums of what usable victims give back are kept and re-summed only on nodes
whose victims were taken; on a node where counts decide, a search's answer (and the budget it
spent) is remembered for later preemptors of the same shape until that node changes.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from bisect import insort
from itertools import combinations
from typing import Iterable

import numpy as np

from crossdock.queue.scheduler.framework import CycleState
from crossdock.queue.scheduler.inventory import FULL, Inventory
from crossdock.queue.scheduler.placement import feasible
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
    """The cycle's running preemptible jobs, indexed for :meth:`find`.

    One *unit* per (victim, node): what the victim would give back on that node. Units are kept
    as arrays in preference order (``unit_*``) and, per node, as a run of ``node_order``.
    :class:`Victim` objects are made only for the victims a search looks at.
    """

    def __init__(self, inv: Inventory, allocations: Iterable[Allocation], borrowing: set[str]):
        self.inv = inv
        index, dev_col, slices = inv.index, inv.dev_col, inv.slice_home
        kept: list[Allocation] = []
        a_job: list[int] = []
        a_node: list[int] = []
        a_cpu: list[int] = []
        a_mem: list[int] = []
        a_gpu: list[int] = []
        a_share: list[int] = []
        a_slices: list[int] = []
        self.shared_nodes: set[int] = set()
        for a in allocations:
            if a.job_id is None or not a.preemptible or a.terminating or a.service is not None:
                continue  # a service replica is never a victim, whatever its priority class says
            i = index.get(a.node)
            if i is None:
                continue
            kept.append(a)
            a_job.append(a.job_id)
            a_node.append(i)
            a_cpu.append(a.cpu_milli)
            a_mem.append(a.memory_mib)
            gpu = share = nslices = 0
            if a.gpu_ids:
                cols = dev_col[i]
                gpu = sum(g in cols for g in a.gpu_ids)
                if slices:
                    nslices = sum(g in slices for g in a.gpu_ids)
            if a.gpu_share:
                # a shared device may become idle when its last sharer leaves: count it (a necessary bound)
                gpu += len(a.gpu_share)
                share = round(max(a.gpu_share.values()) * FULL)
                self.shared_nodes.add(i)
            a_gpu.append(gpu)
            a_share.append(share)
            a_slices.append(nslices)
        self._kept = kept
        job = np.array(a_job, np.int64)
        node = np.array(a_node, np.int64)
        # jobs: a victim's priority, start and queue are those of its first allocation (input order)
        by_job = np.argsort(job, kind="stable")
        starts = _starts(job[by_job])
        self._by_job, self._job_start = by_job, starts
        self._job_end = np.r_[starts[1:], len(by_job)].astype(np.int64)
        self._job_ids = job[by_job][starts]
        first = by_job[starts].tolist()
        self._job_prio = [kept[k].priority for k in first]
        self._job_started = [_ts(kept[k].start_time) for k in first]
        self._job_borrowing = [kept[k].queue in borrowing for k in first]
        self._victims: dict[int, Victim] = {}
        # units: one per (job, node), amounts summed over the job's allocations there
        by_unit = np.lexsort((node, job))
        ustart = _starts(job[by_unit], node[by_unit])
        u_job, u_node = job[by_unit][ustart], node[by_unit][ustart]
        sums = [np.add.reduceat(np.array(x, np.int64)[by_unit], ustart) if len(ustart) else np.zeros(0, np.int64)
                for x in (a_cpu, a_mem, a_gpu, a_slices)]
        u_share = (np.maximum.reduceat(np.array(a_share, np.int64)[by_unit], ustart) if len(ustart)
                   else np.zeros(0, np.int64))
        j = np.searchsorted(self._job_ids, u_job)
        prio = np.array(self._job_prio, np.int64)[j] if len(j) else np.zeros(0, np.int64)
        started = np.array(self._job_started, np.float64)[j] if len(j) else np.zeros(0, np.float64)
        borrow = np.array(self._job_borrowing, bool)[j] if len(j) else np.zeros(0, bool)
        # preference order: borrowing queues' jobs first, then lower priority, later start, job id; then node
        pref = np.lexsort((u_node, u_job, -started, prio, ~borrow))
        self.unit_node = u_node[pref]
        self.unit_id = u_job[pref]
        self.unit_prio = prio[pref]
        self.unit_cpu, self.unit_mem, self.unit_gpu, self.unit_slices = (x[pref] for x in sums)
        self.unit_share = u_share[pref]
        self.alive = np.ones(len(pref), bool)
        """False for the units of victims already taken."""
        self.taken: set[int] = set()
        """Victims already chosen this cycle (see :meth:`take`)."""
        # per node, its units in preference order: a run of node_order starting at group_start
        self.node_order = np.argsort(self.unit_node, kind="stable")
        sorted_nodes = self.unit_node[self.node_order]
        self.group_start = _starts(sorted_nodes)
        self.group_node = sorted_nodes[self.group_start]
        self._by_node = [x[self.node_order] for x in (self.unit_prio, self.unit_cpu, self.unit_mem, self.unit_gpu)]
        """Priority, CPU, memory and GPUs of the units in node order."""
        self._id, self._prio = self.unit_id.tolist(), self.unit_prio.tolist()
        lender = (~borrow[pref]).astype(np.int64).tolist()  # 1 for a victim whose queue is not borrowing
        self._key_parts = list(zip(lender, self._prio, started[pref].tolist(), self._id))
        """Per unit row, what :func:`set_key` reads of its victim (:meth:`_row_key`)."""
        self._cpu, self._mem, self._gpu = self.unit_cpu.tolist(), self.unit_mem.tolist(), self.unit_gpu.tolist()
        self._node = self.unit_node.tolist()
        order, lo = self.node_order.tolist(), self.group_start.tolist()
        self._node_rows: dict[int, list[int]] = {i: order[a:b] for i, a, b in
                                                 zip(self.group_node.tolist(), lo, lo[1:] + [len(order)])}
        """Node -> its unit rows in preference order (nodes without units are absent)."""
        self._alive = bytearray(b"\x01") * len(pref)
        self._node_version = [0] * inv.n
        """Bumped for a node when a victim with units there is taken (keys :attr:`_memo`)."""
        self._memo: dict[tuple, tuple] = {}
        """Per-node answers of :meth:`_smallest_counted`."""
        self._sums: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        """Per job priority, :meth:`_aggregates`; :meth:`take` re-sums the nodes it touches."""
        self._top_priority = int(self.unit_prio.max(initial=0))
        self._aggregates(self._top_priority + 1)

    def victim(self, job_id: int) -> Victim:
        v = self._victims.get(job_id)
        if v is None:
            j = int(np.searchsorted(self._job_ids, job_id))
            allocs = tuple(self._kept[k] for k in self._by_job[self._job_start[j]:self._job_end[j]].tolist())
            v = self._victims[job_id] = Victim(job_id, allocs, self._job_prio[j], self._job_started[j],
                                                self._job_borrowing[j], max(a.grace_seconds for a in allocs))
        return v

    @property
    def victims(self) -> dict[int, Victim]:
        """Every possible victim by job id."""
        return {jid: self.victim(jid) for jid in self._job_ids.tolist()}

    def take(self, victims: Iterable[Victim]) -> None:
        """Mark ``victims`` as chosen: later preemptors in the cycle do not count on them."""
        touched = set()
        for v in victims:
            self.taken.add(v.job_id)
            for r in np.flatnonzero(self.unit_id == v.job_id).tolist():
                self.alive[r] = False
                self._alive[r] = 0
                self._node_version[self._node[r]] += 1
                touched.add(self._node[r])
        for priority, (top, total) in self._sums.items():
            for i in touched:  # the victim sums of these nodes, again without the taken units
                rows = [r for r in self._rows_on(i) if self._alive[r] and self._prio[r] < priority]
                for k, amounts in enumerate((self._cpu, self._mem, self._gpu)):
                    given = [amounts[r] for r in rows]
                    top[k, i] = max(given, default=0)
                    total[k, i] = sum(given)

    # --- exact check on one node -------------------------------------------------------------
    def could_fit(self, req: Request, i: int, victims: Iterable[Victim]) -> bool:
        """Necessary condition (CPU, memory, idle GPU counts) before the exact simulation."""
        inv = self.inv
        cpu, mem, gpu = int(inv.cpu_free[i]), int(inv.mem_free[i]), int(inv.gpu_free[i])
        on_node = {self._id[r]: r for r in self._rows_on(i)}
        for v in victims:
            r = on_node.get(v.job_id)
            if r is not None:
                cpu, mem, gpu = cpu + self._cpu[r], mem + self._mem[r], gpu + self._gpu[r]
        return cpu >= req.cpu_milli and mem >= req.memory_mib and gpu >= req.gpus

    def counts_decide(self, state: CycleState, req: Request, i: int) -> bool:
        """True when :meth:`could_fit` is exact on node ``i`` for ``req`` (no simulation needed): only
        CPU, memory and idle-GPU counts matter (no shares, MIG, islands to respect, anti-affinity or
        holds on the node)."""
        return self._counts_decide_job(state, req) and self._counts_decide_node(req, i)

    def _counts_decide_job(self, state: CycleState, req: Request) -> bool:
        """The part of :meth:`counts_decide` that does not depend on the node (once per search)."""
        if req.gpu_share_milli or req.mig_count or req.exclusive or req.anti_affinity:
            return False
        # any hold that applies to this job (on whichever node) makes the simulation necessary
        return ReservedCapacity().filter(state, req, np.zeros(1, np.int64)) is None

    def _counts_decide_node(self, req: Request, i: int) -> bool:
        return i not in self.shared_nodes and not 2 <= req.gpus <= self.inv.island_cap[i]

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
        return [self.victim(self._id[r]) for r in self._units_on(req, i)]

    def _rows_on(self, i: int) -> list[int]:
        """Every unit row on node ``i``, in preference order."""
        return self._node_rows.get(i, [])

    def _units_on(self, req: Request, i: int) -> list[int]:
        """The unit rows of the usable victims on node ``i``, in preference order."""
        alive, prio, p = self._alive, self._prio, req.priority
        return [r for r in self._rows_on(i) if alive[r] and prio[r] < p]

    # --- search ------------------------------------------------------------------------------
    def _usable(self, req: Request) -> np.ndarray:
        return self._usable_at(req.priority)

    def _usable_at(self, priority: int) -> np.ndarray:
        return self.alive & (self.unit_prio < priority)

    def _single(self, state: CycleState, profile: Profile, req: Request, nodes: np.ndarray,
                exact_job: bool) -> tuple[int, Victim] | None:
        inv = self.inv
        if len(self.unit_node) == 0:
            return None
        n = self.unit_node
        member = np.zeros(inv.n, bool)
        member[nodes] = True
        ok = self._usable(req) & member[n]
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
        for r in np.flatnonzero(ok)[:SINGLE_TRIES].tolist():  # units are in preference order already
            v, i = self.victim(self._id[r]), int(n[r])
            if (exact_job and self._counts_decide_node(req, i)) or self.fits_without(state, profile, req, i, [v]):
                return i, v  # the vectorized check above is could_fit for this one victim
        return None

    def lower_bounds(self, req: Request) -> tuple[np.ndarray, np.ndarray]:
        """Per node: at least this many victims are needed (each gives back at most the most any one
        usable victim there holds), and whether all usable victims together could be enough."""
        inv = self.inv
        top, total = self._aggregates(req.priority)
        deficit = np.stack([req.cpu_milli - inv.cpu_free, req.memory_mib - inv.mem_free, req.gpus - inv.gpu_free])
        short = deficit > 0
        enough = (~short | (total >= deficit)).all(axis=0)
        bound = np.where(short, -(-deficit // np.maximum(top, 1)), 0).max(axis=0)
        return bound, enough

    def _aggregates(self, priority: int) -> tuple[np.ndarray, np.ndarray]:
        """Per node, over the usable victims of a job of ``priority``: the most and the total any one of
        them gives back, one row each for CPU, memory and GPUs. Kept per priority (:meth:`take` keeps
        them current). A job that outranks every victim reads the sums over all of them, built with
        the index."""
        if priority > self._top_priority:
            priority = self._top_priority + 1  # every unit usable: one entry serves all such jobs
        hit = self._sums.get(priority)
        if hit is None:
            n = self.inv.n
            top, total = np.zeros((3, n), np.int64), np.zeros((3, n), np.int64)
            order, starts, nodes = self.node_order, self.group_start, self.group_node
            if len(order):
                usable = self.alive[order] & (self._by_node[0] < priority)
                last = np.r_[starts[1:], len(order)] - 1
                for k, amounts in enumerate(self._by_node[1:]):
                    # amounts are never negative, so a unit that is not usable counts as 0
                    given = amounts * usable
                    top[k, nodes] = np.maximum.reduceat(given, starts)
                    total[k, nodes] = np.diff(np.cumsum(given)[last], prepend=0)
            hit = self._sums[priority] = (top, total)
        return hit[0], hit[1]

    def _smallest_on(self, state: CycleState, profile: Profile, req: Request, i: int, k_max: int,
                     budget: list[int], exact_job: bool | None = None, k_min: int = 1) -> tuple[Victim, ...] | None:
        """The preferred smallest victim set on node ``i`` (or None), spending ``budget`` on every
        combination that passes :meth:`could_fit`."""
        if exact_job is None:
            exact_job = self._counts_decide_job(state, req)
        inv = self.inv
        deficits = (req.cpu_milli - int(inv.cpu_free[i]), req.memory_mib - int(inv.mem_free[i]),
                    req.gpus - int(inv.gpu_free[i]))
        exact = exact_job and self._counts_decide_node(req, i)
        best = self._smallest(state, profile, req, i, k_max, budget, exact, k_min, deficits)
        return self._victims_of(best[0]) if best is not None else None

    def _smallest(self, state: CycleState, profile: Profile, req: Request, i: int, k_max: int, budget: list[int],
                  exact: bool, k_min: int, deficits: tuple[int, int, int]) -> tuple[list[int], tuple] | None:
        """:meth:`_smallest_on` with the node's deficits and exactness given: the set's unit rows and its
        :func:`set_key`.

        Sizes below ``k_min`` (a lower bound) and sizes whose largest amounts cannot cover a deficit
        are skipped: no combination of theirs passes :meth:`could_fit`, so none would spend budget.
        On an exact node the sets are compared by their rows' keys (:meth:`_row_key`, equal to
        :func:`set_key`), so victims are made only for the sets a search returns."""
        alive, prio, p = self._alive, self._prio, req.priority
        units = [r for r in self._node_rows.get(i, ()) if alive[r] and prio[r] < p]  # _units_on, inlined
        if not units:
            return None
        # amounts are never negative: only the resources the node is short of can fail a combination
        short = []
        for column, d in zip((self._cpu, self._mem, self._gpu), deficits):
            if d > 0:
                amounts = [column[r] for r in units]
                if sum(amounts) < d:
                    return None  # could_fit fails for all of them together
                short.append((amounts, d, sorted(amounts, reverse=True)))
        if not (exact or self.fits_without(state, profile, req, i, self._victims_of(units))):
            return None
        n = len(units)
        for k in range(max(1, k_min), min(n, k_max) + 1):
            passing: Iterable = combinations(range(n), k)
            for s, (amounts, d, top) in enumerate(short):  # could_fit, keeping combinations' order
                if sum(top[:k]) < d:
                    passing = ()  # not even the k largest cover it
                    break
                if s == 0:  # the combinations of the amounts run in step with those of the units
                    passing = [c for c, given in zip(passing, combinations(amounts, k)) if sum(given) >= d]
                else:
                    passing = [c for c in passing if sum([amounts[j] for j in c]) >= d]
            passing = list(passing)
            if not passing:
                continue
            # each combination that passes spends one unit of budget; the one that overdraws it ends the search
            spend = budget[0]
            tried = passing if len(passing) <= spend else passing[:spend]
            budget[0] = spend - len(passing) if len(passing) <= spend else -1
            found = [[units[j] for j in c] for c in tried]
            if not exact:
                found = [rows for rows in found if self.fits_without(state, profile, req, i, self._victims_of(rows))]
            if found:
                if len(found) == 1:
                    return found[0], self._row_key(found[0])
                keys = [self._row_key(rows) for rows in found]
                best = min(range(len(found)), key=keys.__getitem__)
                return found[best], keys[best]
            if budget[0] < 0:
                break
        return (units, self._row_key(units)) if n <= k_max else None

    def _smallest_counted(self, req: Request, i: int, k_max: int, budget: list[int], k_min: int,
                          deficits: tuple[int, int, int]) -> tuple[list[int], tuple] | None:
        """:meth:`_smallest` on a node where counts decide, remembered for the rest of the cycle.

        There the answer depends only on the usable units (node ``i``'s rows, which victims are
        taken, the job's priority), the deficits, ``k_min`` and ``k_max`` (only up to the node's
        number of units), so jobs of one shape that look at the same nodes reuse it. What it spent
        of the budget is remembered too and spent again; an answer cut short by the budget is not
        kept, and one whose spending no longer fits the budget is searched again."""
        key = (i, req.priority, deficits, k_min, min(k_max, len(self._node_rows.get(i, ()))), self._node_version[i])
        hit = self._memo.get(key)
        if hit is not None and hit[1] <= budget[0]:
            budget[0] -= hit[1]
            return hit[0]
        before = budget[0]
        best = self._smallest(None, None, req, i, k_max, budget, True, k_min, deficits)  # type: ignore[arg-type]
        if budget[0] >= 0:
            self._memo[key] = (best, before - budget[0])
        return best

    def _victims_of(self, rows: list[int]) -> tuple[Victim, ...]:
        ids = self._id
        return tuple([self.victim(ids[r]) for r in rows])

    def _row_key(self, rows: list[int]) -> tuple:
        """:func:`set_key` of the victims of unit ``rows``, from the per-row columns."""
        lender, prio, started, ids = zip(*[self._key_parts[r] for r in rows])
        return sum(lender), max(prio), sum(prio), -min(started), tuple(sorted(ids))

    def find(self, state: CycleState, profile: Profile, req: Request, cap: int) -> tuple[list[int], list[Victim]] | None:
        """Nodes (one per missing worker) and the victims that make room on them, or None."""
        if cap <= 0:
            return None
        static = profile.static_nodes(state, req)
        fitting = feasible(state, profile, req)
        missing = req.nodes - len(fitting)
        if missing <= 0:
            return None
        exact_job = self._counts_decide_job(state, req)
        if missing == 1 and req.nodes == 1:
            single = self._single(state, profile, req, static, exact_job)
            if single is not None:
                return [single[0]], [single[1]]
        budget = [COMBINATION_BUDGET]
        bound, enough = self.lower_bounds(req)
        mask = np.zeros(self.inv.n, bool)
        mask[static] = True
        mask[fitting] = False
        nodes = np.flatnonzero(mask & enough & (bound <= cap))
        nodes = nodes[np.argsort(bound[nodes], kind="stable")][:MAX_NODES_EXAMINED]  # by bound, then index
        inv = self.inv
        columns = zip(nodes.tolist(), bound[nodes].tolist(), (req.cpu_milli - inv.cpu_free[nodes]).tolist(),
                      (req.memory_mib - inv.mem_free[nodes]).tolist(), (req.gpus - inv.gpu_free[nodes]).tolist(),
                      ((inv.island_cap[nodes] < req.gpus) | (req.gpus < 2)).tolist())
        examined = [(i, b, (dc, dm, dg), exact_job and no_island and i not in self.shared_nodes)
                    for i, b, dc, dm, dg, no_island in columns]
        options = []
        sizes: list[int] = []
        for i, b, d, exact in examined:
            if len(options) >= missing and b > sizes[missing - 1]:
                break  # no later node can need fewer victims
            if exact:
                best = self._smallest_counted(req, i, cap, budget, b, d)
            else:
                best = self._smallest(state, profile, req, i, cap, budget, False, b, d)
            if best is not None:
                rows, key = best
                options.append((len(rows), key, i, rows))
                insort(sizes, len(rows))
            if budget[0] < 0:
                break
        if len(options) < missing:
            return None
        options.sort(key=lambda o: (o[0], o[1], o[2]))
        chosen = options[:missing]
        victims: dict[int, Victim] = {}
        for _, _, _, rows in chosen:
            for v in self._victims_of(rows):
                victims[v.job_id] = v
        if len(victims) > cap:
            return None
        return [o[2] for o in chosen], list(victims.values())


def _ts(t: datetime | None) -> float:
    return t.timestamp() if t is not None else 0.0


def _starts(*keys: np.ndarray) -> np.ndarray:
    """Where each run of equal values (equal in every one of ``keys``) begins in grouped arrays."""
    if len(keys[0]) == 0:
        return np.zeros(0, np.int64)
    change = np.zeros(len(keys[0]), bool)
    change[0] = True
    for k in keys:
        change[1:] |= k[1:] != k[:-1]
    return np.flatnonzero(change)
