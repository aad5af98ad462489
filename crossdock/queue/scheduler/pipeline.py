"""The phases of one scheduling cycle, as methods of :class:`Cycle` (``cycle.run_cycle`` calls them).

Per job, in fair-share order: pre-filter (per-job limits, quota) → filter → score → reserve
(devices, quota) → admit; when no node fits: post-filter (preemption) for classes that may
preempt, else a backfill reservation for the first job blocked on resources; every job left
pending gets a reason and, when nodes were tried, kube-scheduler's explanation.
"""

from __future__ import annotations

import time
from datetime import datetime, timedelta
from typing import Sequence

import numpy as np

from crossdock.queue.config import ClusterConfig
from crossdock.queue.scheduler import backfill
from crossdock.queue.scheduler.decisions import CycleResult, Placement, Preemption, Reservation
from crossdock.queue.scheduler.fairshare import FairOrder, dominant_share
from crossdock.queue.scheduler.framework import CycleState
from crossdock.queue.scheduler.inventory import FULL, Assignment, Inventory
from crossdock.queue.scheduler.placement import assign_worker, place
from crossdock.queue.scheduler.plugins.gpu_fragmentation import FragCache, typical_of
from crossdock.queue.scheduler.plugins.reserved_capacity import NOMINATED, RESERVED
from crossdock.queue.scheduler.preemption import Preemptor
from crossdock.queue.scheduler.licenses import LicenseLedger
from crossdock.queue.scheduler.quota import QuotaLedger
from crossdock.queue.scheduler.profiles import profile_for
from crossdock.queue.scheduler.registry import Profile, explain
from crossdock.queue.scheduler.request import Request
from crossdock.queue.snapshot import Snapshot
from crossdock.queue.states import Reason


class Cycle:
    def __init__(self, snapshot: Snapshot, config: ClusterConfig, now: datetime, result: CycleResult):
        self.snapshot, self.config, self.now, self.result = snapshot, config, now, result
        self.phase_time = {"preempt": 0.0, "backfill": 0.0}

    # --- 3. snapshot -> inventory, quota ledger, holds ------------------------------------------
    def build(self, requests: Sequence[Request]) -> None:
        snap = self.snapshot
        inv = Inventory(snap.nodes)
        inv.load(snap.allocations)
        self.inv = inv
        self.state = CycleState(inv, self.config, self.now)
        model_of = {gid: inv.model[i] for i in range(inv.n) for gid in inv.dev_ids[i]}
        self.quota = QuotaLedger(self.config, snap.allocations, model_of)
        self._preemptor: Preemptor | None = None
        self.state.extra.update(quota=self.quota, licenses=LicenseLedger(self.config.licenses, snap.licenses_in_use),
                                preemptor=self.preemptor, profile_of=self.profile_of,
                                preemption_cap=self.config.scheduler.max_preemptions_per_cycle)
        self.nominated: dict[int, int] = {}
        self.nominated_by: dict[int, int] = {}
        pending_ids = {r.job_id: r for r in requests}
        for job_id, node in snap.nominations.items():
            if job_id in pending_ids and node in inv.index:
                i = inv.index[node]
                self.nominated[i] = max(self.nominated.get(i, -(2**62)), pending_ids[job_id].priority)
                self.nominated_by[job_id] = i
        self.terminating = {inv.index[a.node] for a in snap.allocations if a.terminating and a.node in inv.index}
        self.destined = self._hold_destinations(pending_ids) if snap.destinations else {}
        self.state.extra.update(nominated=self.nominated, reservations=[])
        models = sorted({m for m in inv.model if m})
        gpu_requests = [r for r in requests if r.gpus or r.gpu_share_milli]
        typical = typical_of(gpu_requests, models) if gpu_requests else None
        if typical is not None:
            node_model = np.array([models.index(m) if m else -1 for m in inv.model], np.int64)
            self.state.extra["frag"] = FragCache(inv, typical, node_model)
        self.capacity = (float(inv.cpu_alloc.sum()), float(inv.mem_alloc.sum()), float(inv.gpu_total.sum()))
        self.admitted_ends: list[tuple[datetime, Assignment]] = []
        self.ends: dict[float, datetime] = {}
        """Time limit (s) -> when a job admitted now ends."""
        self.failed: dict[tuple, tuple[int, dict[str, int]]] = {}
        self.reserved = False
        self.profiles: dict[tuple[str, str], Profile] = {}

    def _hold_destinations(self, pending: dict[int, Request]) -> dict[int, Assignment]:
        """Hold what each moved job needs on its reserved destination (Koordinator's
        ReservationFirst): a job still stopping holds what it holds now, a pending one its request."""
        inv = self.inv
        held: dict[int, Assignment] = {}
        holding: dict[int, list] = {}
        for a in self.snapshot.allocations:
            if a.job_id in self.snapshot.destinations:
                holding.setdefault(a.job_id, []).append(a)
        for job_id, node in sorted(self.snapshot.destinations.items()):
            i = inv.index.get(node)
            req = pending.get(job_id)
            if i is None or (req is None and job_id not in holding):
                continue
            if req is not None:
                if req.nodes != 1 or req.gpu_share_milli or req.mig_count:
                    continue
                cpu, mem, gpus = req.cpu_milli, req.memory_mib, req.gpus
            else:
                first = holding[job_id][0]
                cpu, mem, gpus = first.cpu_milli, first.memory_mib, len(first.gpu_ids)
            idle = np.flatnonzero(inv.dev_exists[i] & (inv.dev_free[i] == FULL))
            if inv.cpu_free[i] < cpu or inv.mem_free[i] < mem or len(idle) < gpus:
                continue  # taken since: the job goes wherever the cycle puts it
            held[job_id] = inv.take(i, cpu, mem, [(int(c), FULL) for c in idle[:gpus]], [], None)
        return held

    def _to_destination(self, req: Request, profile: Profile) -> list[Assignment] | None:
        """A moved job lands on its reserved destination when it fits there (its hold given back first)."""
        hold = self.destined.pop(req.job_id, None)
        if hold is None:
            return None
        self.inv.undo(hold)
        i = hold.node
        if len(profile.feasible(self.state, req, np.array([i], np.int64))) != 1:
            return None
        a = assign_worker(self.inv, req, i)
        return [a] if a is not None else None

    def profile_of(self, req: Request) -> Profile:
        """The profile ``req`` is scheduled with: its queue's placement and plugin weights."""
        profile = self.profiles.get((req.queue, req.placement))
        if profile is None:
            queue = self.config.queues.get(req.queue)
            profile = profile_for(req.placement, queue.plugin_weights if queue else None)
            self.profiles[(req.queue, req.placement)] = profile
        return profile

    def preemptor(self) -> Preemptor:
        """Built on first use: most cycles preempt nothing and skip indexing the running jobs."""
        if self._preemptor is None:
            borrowing = {q for q in self.config.queues if self.quota.borrowing(q)}
            self._preemptor = Preemptor(self.inv, self.snapshot.allocations, borrowing)
        return self._preemptor

    # --- 4. order --------------------------------------------------------------------------------
    def order(self, requests: Sequence[Request]) -> FairOrder:
        sums: dict[str, list[float]] = {}
        for a in self.snapshot.allocations:
            s = sums.setdefault(a.queue, [0.0, 0.0, 0.0])
            s[0] += a.cpu_milli
            s[1] += a.memory_mib
            s[2] += len(a.gpu_ids) + sum(a.gpu_share.values())
        running = {q: dominant_share(*s, self.capacity) for q, s in sums.items()}
        weights = {q: c.weight for q, c in self.config.queues.items()}
        self.fair = FairOrder(requests, self.snapshot.usage, running, weights, self.capacity)
        return self.fair

    # --- 5. one job --------------------------------------------------------------------------------
    def schedule(self, req: Request) -> Placement | None:
        """Admit ``req`` and return its placement, or record why it stays pending."""
        res = self.result
        profile = self.profile_of(req)
        for plugin in profile.pre_filters:
            status = plugin.pre_filter(self.state, req)
            if not status.ok:
                return self._pending(req, status.reason, status.message)
        own = self.nominated_by.pop(req.job_id, None)
        if own is not None:
            self.nominated.pop(own, None)
        if self.destined:
            landed = self._to_destination(req, profile)
            if landed:
                placement = self._admit(req, profile, landed)
                if placement is not None:
                    res.admitted.append(placement)
                return placement
        key = req.shape_key()
        cached = self.failed.get(key)
        if cached is None or cached[0] != self.inv.version:
            assignments = place(self.state, profile, req)
            if assignments:
                placement = self._admit(req, profile, assignments)
                if placement is not None:
                    res.admitted.append(placement)
                    return placement
                return None
            cached = (self.inv.version, profile.reasons(self.state, req))
            self.failed[key] = cached
        return self._blocked(req, profile, cached[1], own)

    def _admit(self, req: Request, profile: Profile, assignments: list[Assignment]) -> Placement | None:
        inv = self.inv
        picks = [a.node for a in assignments]
        failed = None
        for plugin in profile.permits:
            status = plugin.permit(self.state, req, picks)
            if not status.ok:
                failed = status
                break
        reserved: list = []
        if failed is None:
            for plugin in profile.reserves:
                status = plugin.reserve(self.state, req, assignments)
                if not status.ok:
                    failed = status
                    break
                reserved.append(plugin)
        if failed is not None:
            for plugin in reversed(reserved):
                plugin.unreserve(self.state, req, assignments)
            for a in reversed(assignments):
                inv.undo(a)
            self._pending(req, failed.reason, failed.message)
            return None
        self.fair.admitted(req)
        if req.time_limit_s:
            end = self.ends.get(req.time_limit_s)
            if end is None:
                end = self.ends[req.time_limit_s] = self.now + timedelta(seconds=req.time_limit_s)
            self.admitted_ends.extend([(end, a) for a in assignments])
        nodes = inv.nodes
        first = nodes[assignments[0].node]
        per_node = tuple([a.gpu_ids(inv) for a in assignments])
        gpu_ids = per_node[0] if len(per_node) == 1 else tuple([g for ids in per_node for g in ids])
        return Placement(req.job_id, first.pool, first.backend, tuple([nodes[a.node].name for a in assignments]),
                         gpu_ids, assignments[0].cpu_milli, assignments[0].memory_mib, per_node,
                         req.gpu_share_milli / 1000 if req.gpu_share_milli else None)

    def _blocked(self, req: Request, profile: Profile, reasons: dict[str, int], own: int | None) -> None:
        text = explain(reasons, self.inv.n)
        if own is not None and own in self.terminating:
            self.nominated[own] = max(self.nominated.get(own, req.priority), req.priority)
            self.nominated_by[req.job_id] = own
            self.result.nominations[req.job_id] = self.inv.nodes[own].name
            return self._pending(req, Reason.PREEMPTING, text + " Waiting for preempted jobs to leave.")
        if not self._ever_fits(profile, req):
            return self._pending(req, Reason.UNSCHEDULABLE, text)
        if self._preempt(req, profile):
            return None
        held_only = set(reasons) <= {NOMINATED, RESERVED} and bool(reasons)
        if held_only:
            return self._pending(req, Reason.PRIORITY, text)
        if not self.reserved:
            self._reserve(req, profile)
        return self._pending(req, Reason.RESOURCES, text)

    def _ever_fits(self, profile: Profile, req: Request) -> bool:
        key = ("ever", req.shape_key())
        hit = self.state.cache.get(key)
        if hit is None:
            inv = self.inv
            idx = profile.static_nodes(self.state, req)
            ok = (inv.cpu_alloc[idx] >= req.cpu_milli) & (inv.mem_alloc[idx] >= req.memory_mib)
            ok &= inv.gpu_total[idx] >= req.gpus
            if req.gpu_share_milli:
                ok &= inv.gpu_total[idx] > 0
            hit = self.state.cache[key] = int(ok.sum()) >= req.nodes
        return hit

    def _preempt(self, req: Request, profile: Profile) -> bool:
        t0 = time.perf_counter()
        status = next((s for s in (p.post_filter(self.state, req) for p in profile.post_filters) if s.ok), None)
        self.phase_time["preempt"] += time.perf_counter() - t0
        if status is None:
            return False
        victims = sorted(status.victims, key=lambda v: v.job_id)
        for v in victims:
            self.result.preemptions.append(Preemption(v.job_id, req.job_id, v.grace_seconds))
        self.preemptor().take(victims)
        self.state.extra["preemption_cap"] -= len(victims)
        for i in status.nominated:
            self.nominated[i] = max(self.nominated.get(i, req.priority), req.priority)
        self.result.nominations[req.job_id] = self.inv.nodes[status.nominated[0]].name
        self._pending(req, Reason.PREEMPTING, f"preempting {len(victims)} job(s) ("
                      + ", ".join(str(v.job_id) for v in victims) + ") on "
                      + ", ".join(self.inv.nodes[i].name for i in status.nominated))
        return True

    def _reserve(self, req: Request, profile: Profile) -> None:
        t0 = time.perf_counter()
        events = backfill.ending_events(self.state, list(self.snapshot.allocations), self.admitted_ends)
        found = backfill.earliest_start(self.state, profile, req, events)
        if found is not None:
            start, nodes = found
            self.reserved = True
            self.state.extra["reservations"].append((np.array(nodes, np.int64), start))
            self.result.reservations.append(Reservation(req.job_id, start, tuple(self.inv.nodes[i].name for i in nodes)))
        self.phase_time["backfill"] += time.perf_counter() - t0

    def _pending(self, req: Request, reason: str, text: str = "") -> None:
        self.result.pending[req.job_id] = reason
        if text:
            self.result.explanations[req.job_id] = text
        return None
