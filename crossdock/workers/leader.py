"""The scheduling loop: one leader (a Redis lease) runs cycles, follows backends, expires records.

Each cycle: read the store and the backends' inventories -> ``build_snapshot`` and
``run_cycle`` (pure, in the core) -> commit every decision in one transaction -> send the
dispatch tasks ``dispatch_groups`` forms. A crash between commit and send leaves jobs SCHEDULED
without a dispatch claim; the follower resends them (one by one), and the dispatch claim makes
a duplicate harmless. Standbys wait for the lease. Every step survives the store or a backend
being away: it logs, backs off and resumes (:mod:`crossdock.workers.loops`), and records its
state for ``crossdock health``.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from typing import Callable, Mapping, Sequence

from crossdock.gcpause import collection_paused
from crossdock.observe import metrics
from crossdock.queue.assembly import Records, accrue_usage, build_snapshot, dependency_targets
from crossdock.queue.bursting import backlog_start, bursting_queues, estimates_view, to_estimate
from crossdock.queue.cycle import CycleResult, facts_of, order, run_cycle
from crossdock.queue.dispatch import dispatch_groups
from crossdock.queue.errors import LeaseLost, StoreUnavailable
from crossdock.queue.models import Job
from crossdock.queue.ports import EstimatesStart, Inventory, ScalesFleet
from crossdock.queue.snapshot import Node, Snapshot
from crossdock.queue.states import JobState, Reason
from crossdock.runtime import Runtime
from crossdock.workers.app import SendTask
from crossdock.workers.autoscaler import Autoscaler, Busy, capacity_reasons
from crossdock.workers.descheduler import Descheduler, live_destinations
from crossdock.workers.follow import UNAVAILABLE, Follower
from crossdock.workers.liveconfig import Switch
from crossdock.workers.loops import Part, resilient
from crossdock.workers.services import ServiceStep

log = logging.getLogger(__name__)

INVENTORY_REFRESH_SECONDS = 10.0
RETENTION_EVERY_SECONDS = 60.0
ARRIVAL_AUTOSCALE_SECONDS = 0.2


@dataclass
class CycleStats:
    admitted: int = 0
    cancelled: int = 0
    pending: int = 0
    seconds: float = 0.0


class Scheduler:
    def __init__(self, rt: Runtime, send: SendTask, holder: str | None = None,
                 fleets: Mapping[str, ScalesFleet] | None = None, busy: Busy | None = None,
                 clock: Callable[[], float] = time.time):
        self.rt, self.send = rt, send
        self.clock = clock
        """Epoch seconds for what a cycle stamps and measures (placement times, usage accrual, the
        inventory's age); the loop's own waits keep the machine's clock. A simulation drives it."""
        self.holder = holder or f"scheduler-{uuid.uuid4().hex[:8]}"
        self.follower = Follower(rt.store, rt.backends, send, self.holder,
                                 lambda: {p.backend for p in rt.config.pools.values()}, clock=clock,
                                 lease=self.lease)
        self.autoscaler = Autoscaler(rt, self.holder, self.snapshot, send, fleets, busy, clock=clock,
                                     nodes_changed=lambda kind: self._inventory.pop(kind, None))
        """Run as a step of the leader's turn (``fleets``: actuators by backend kind that the
        backends do not provide, the local fleet of ``crossdock up``)."""
        self.descheduler = Descheduler(rt, self.holder, self.snapshot)
        """Run as a step of the leader's turn, before the cycle (``descheduler.enabled``)."""
        self.services = ServiceStep(rt, self.holder, send)
        """Inference services: the controller's pass, run as a step of the leader's turn."""
        self._inventory: dict[str, tuple[float, Inventory]] = {}
        self._autoscaled_at = 0.0
        self._placed: set[int] = set()
        """Jobs placed at the last cycle (active, or admitted by it): those that leave it ended an attempt."""
        self.leader = False
        rt.switched_by_leader = True
        self.switch_config = Switch(rt, self.holder)
        """A new live config is taken at the top of a turn: a cycle boundary (``crossdock config apply``)."""
        self.parts = {name: Part(f"{self.holder} {name}") for name in ("loop", "cycle", "reconcile", "retention",
                                                                      "autoscale", "services", "deschedule", "config")}
        """Each step's state (running, backing off...) and last error, for ``crossdock health``."""

    # --- reading ---------------------------------------------------------------------------
    def inventory(self) -> Inventory:
        """Every backend's nodes and foreign allocations, each refreshed at most every few seconds
        (an unreachable backend keeps its last inventory)."""
        nodes, foreign, refreshed = [], [], False
        for kind in sorted({p.backend for p in self.rt.config.pools.values()}):
            cached = self._inventory.get(kind)
            if cached is None or not 0 <= self.clock() - cached[0] <= INVENTORY_REFRESH_SECONDS:  # or set back
                try:
                    with metrics.backend_call(kind, "inventory"):
                        cached = (self.clock(), self.rt.backends(kind).inventory())
                except UNAVAILABLE as exc:
                    log.warning("inventory of %s unavailable: %s", kind, exc)
                    cached = (self.clock(), cached[1] if cached else Inventory(()))
                self._inventory[kind] = cached
                refreshed = True
            nodes.extend(cached[1].nodes)
            foreign.extend(cached[1].foreign)
        if refreshed:
            self.rt.store.save_inventory(nodes)
        return Inventory(tuple(nodes), tuple(foreign))

    def snapshot(self, pending: list[Job], active: list[Job], read_only: bool = False) -> Snapshot:
        """``read_only``: write nothing (no usage accrued, no spent reservation dropped), for a dry run."""
        store, config = self.rt.store, self.rt.config
        inv = self.inventory()
        targets = dependency_targets(pending)
        wanted: set[int] = set(targets.ids)
        for job_id in targets.ids:
            wanted.update(store.array_ids(job_id))
        for user, name in targets.names:
            wanted.update(store.ids_by_name(user, name))
        known = {j.id for j in [*pending, *active]}
        missing = [i for i in wanted if i not in known]
        others = {j.id: facts_of(j) for j in store.get_many(missing)}
        others.update(store.history_facts(i for i in missing if i not in others))
        usage = store.usage()[0] if read_only else self.accrue(inv.nodes, active)
        destinations, spent = live_destinations(store.deschedule.destinations(), {j.id: j for j in [*pending, *active]})
        if spent and not read_only:
            store.deschedule.release(spent)
        return build_snapshot(Records(pending, active, inv.nodes, inv.foreign, frozenset(wanted), others,
                                      store.nominations(j.id for j in pending), usage, destinations,
                                      self.autoscaler.soft_tainted()), config)

    def accrue(self, nodes: Sequence[Node], active: list[Job]) -> dict[str, float]:
        """Charge the running jobs' fair-share usage since the last accrual, and save it."""
        store = self.rt.store
        usage, last = store.usage()
        now = self.clock()
        usage = accrue_usage(usage, last, now, nodes, active, self.rt.config)
        store.save_usage(usage, now)
        return usage

    def start_estimates(self, snap: Snapshot, pending: list[Job]) -> Snapshot:
        """The snapshot with the expected starts bursting routes by (:mod:`crossdock.queue.bursting`):
        for the first pending jobs of queues whose pools span backends, each pool's estimate from
        its backend when it ``EstimatesStart`` (its own cost is bounded), else from the pool's backlog."""
        config = self.rt.config
        if not bursting_queues(config):
            return snap
        wanted = to_estimate(order(pending), config)
        starts: dict[int, dict[str, float | None]] = {}
        for rank, (job, pools) in enumerate(wanted):
            by_pool = starts[job.id] = {}
            for pool in pools:
                kind = config.pools[pool].backend
                try:
                    backend = self.rt.backends(kind)
                    if self.rt.backends.capabilities(kind).estimates_start and isinstance(backend, EstimatesStart):
                        by_pool[pool] = backend.estimate_start(job, pool)
                    else:  # the jobs before it in this cycle may queue there too
                        by_pool[pool] = backlog_start(snap, pool, ahead=rank)
                except UNAVAILABLE as exc:
                    log.warning("start estimate of job %s in %s unavailable: %s", job.id, pool, exc)
                    by_pool[pool] = None
        return replace(snap, start_estimates=estimates_view(starts))

    def now(self) -> datetime:
        return datetime.fromtimestamp(self.clock(), timezone.utc)

    def _known_nodes(self) -> list[Node]:
        """The nodes of the last inventory, without asking any backend."""
        nodes = [n for _at, inv in self._inventory.values() for n in inv.nodes]
        return nodes or self.rt.store.inventory() or []

    # --- one cycle -------------------------------------------------------------------------
    def cycle_once(self) -> CycleStats:
        t0 = time.perf_counter()
        store = self.rt.store
        pending = store.get_many(store.pending_ids())
        if not pending:
            # Work that runs while nothing waits is charged too (the cached inventory is enough).
            active = store.get_many(store.active_ids())
            self.accrue(self._known_nodes(), active)
            self.observe_jobs([], active, ())
            return CycleStats(seconds=time.perf_counter() - t0)
        active = store.get_many(store.active_ids())
        t_read = time.perf_counter()
        snap = self.start_estimates(self.snapshot(pending, active), pending)
        t_snap = time.perf_counter()
        now = self.now()
        with collection_paused():
            result = run_cycle(snap, pending, self.rt.config, now)
        t_decided = time.perf_counter()
        jobs = {j.id: j for j in [*pending, *active]}
        self.commit(result, jobs, dict(snap.running_per_array))
        t_end = time.perf_counter()
        stats = CycleStats(len(result.admitted), len(result.cancelled), len(result.pending), t_end - t0)
        metrics.record_cycle(result, jobs, now, stats.seconds,
                             {"read_store": t_read - t0, "build_snapshot": t_snap - t_read, "commit": t_end - t_decided})
        self.observe_jobs(pending, active, [p.job_id for p in result.admitted])
        log.debug("cycle: %s admitted, %s pending, %.3fs (%s)", stats.admitted, stats.pending, stats.seconds,
                  {k: round(v, 4) for k, v in result.timings.items()})
        return stats

    def observe_jobs(self, pending: list[Job], active: list[Job], admitted: Sequence[int]) -> None:
        """Jobs by queue/state/backend from this cycle's reads, and the attempts that ended since
        the last cycle (placed then, gone from the active set now: one read of just those)."""
        metrics.record_jobs(pending, active)
        placed = {j.id for j in active}
        ended = self._placed - placed
        self._placed = placed | set(admitted)
        if ended:
            metrics.record_ended([j for j in self.rt.store.get_many(sorted(ended)) if j.state.terminal])

    def lease(self) -> str | None:
        """The lease this scheduler's writes are fenced by: its holder while it leads (a cycle run
        outside the loop, by a test or a tool, holds none and is not fenced)."""
        return self.holder if self.leader else None

    def _commit_moves(self, result: CycleResult, now: datetime) -> list:
        """The cycle's placements and cancels in one transaction, fenced by this leader's lease."""
        store = self.rt.store
        with store.pipeline(transaction=True, lease=self.lease()) as pipe:
            for p in result.admitted:
                store.transition(p.job_id, JobState.SCHEDULED, pipe=pipe, actor=self.holder, bump_attempt=True,
                                 fields={"nodes": list(p.nodes), "gpu_ids": list(p.gpu_ids), "pool": p.pool,
                                         "backend": p.backend, "reason": Reason.NONE, "scheduled_time": now,
                                         "alloc_cpu_milli": p.cpu_milli, "alloc_mem_mib": p.memory_mib})
            for job_id, reason in result.cancelled.items():
                store.transition(job_id, JobState.CANCELLED, pipe=pipe, actor=self.holder, reason=reason,
                                 fields={"end_time": now})
            return pipe.execute()

    def commit(self, result: CycleResult, jobs: dict[int, Job], running_per_array: dict[int, int] | None = None) -> None:
        store = self.rt.store
        now = self.now()
        try:
            outcomes = self._commit_moves(result, now)
        except LeaseLost as exc:  # paused past the lease: the next leader decides again
            log.warning("%s: this cycle's decisions dropped: %s", self.holder, exc)
            return
        moved = [p for p, (ok, _old) in zip(result.admitted, outcomes) if ok]
        for group in dispatch_groups(moved, jobs, running_per_array or {}, self.rt.backends.capabilities):
            if group.batch:
                self.send("crossdock.dispatch_batch", [[list(p) for p in zip(group.job_ids, group.attempts)]],
                          group.backend)
            elif group.array_job_id is None:
                self.send("crossdock.dispatch", [group.job_ids[0], group.attempt], group.backend)
            else:
                self.send("crossdock.dispatch_array",
                          [group.array_job_id, group.attempt, list(group.job_ids), group.throttle], group.backend)
        for pre in result.preemptions:
            victim = jobs.get(pre.victim_id)
            if victim is not None and victim.backend:
                # marked at once, so the next snapshot counts the victim as terminating
                store.request_preempt(pre.victim_id, pre.grace_seconds)
                preemptor = jobs.get(pre.preemptor_id)
                store.record_note(pre.victim_id, "preempting", self.holder, preemptor=pre.preemptor_id,
                                  reason=f"for job {preemptor.display_id if preemptor else pre.preemptor_id}")
                self.send("crossdock.preempt", [pre.victim_id, pre.grace_seconds, victim.attempts], victim.backend)
        store.update_nominations([p.job_id for p in result.admitted] + list(result.cancelled), result.nominations)
        store.save_expected_starts({r.job_id: (r.start, r.nodes) for r in result.reservations})
        # Only the reasons that changed: with thousands pending, rewriting each one every cycle
        # was most of the cycle's writes.
        reasons, explanations = capacity_reasons(result.pending, result.explanations or {}, self.autoscaler.waiting)
        changed = {i: r for i, r in reasons.items()
                   if (j := jobs.get(i)) is None or j.reason != r or (j.explanation or "") != (explanations.get(i) or "")}
        store.set_reasons(changed, explanations)

    def reconcile(self) -> None:
        self.follower.reconcile()

    def expire(self) -> int:
        cfg = self.rt.config.scheduler
        return self.rt.store.expire_finished(cfg.min_job_age_seconds, cfg.history_days * 86400)

    # --- the loop --------------------------------------------------------------------------
    def _wait_for_work(self, stop: threading.Event, interval: float, tick: float = 0.05, rest: float = 0.0) -> bool:
        """Sleep until the next cycle is due, or until there is new work: new jobs arrived (the
        pending index grew), or jobs ended while others wait (the active index shrank, so their
        capacity is free): a submission or a freed slot is acted on within ``tick`` s rather than
        up to ``interval`` s later; not before ``rest`` s (the last cycle's length, so that the
        loop keeps to half a core however often jobs end). True when woken by new jobs."""
        store = self.rt.store
        start = time.monotonic()
        deadline = start + interval
        seen_pending, seen_active = store.queue_counts()
        while not stop.wait(min(tick, max(deadline - time.monotonic(), 0))):
            if time.monotonic() >= deadline:
                return False
            pending, active = store.queue_counts()
            if pending > seen_pending:
                return True
            if pending and active < seen_active and time.monotonic() - start >= rest:
                return False
        return False

    def run(self, stop: threading.Event, reconcile_every: float = 2.0) -> None:
        """Schedule while leader, wait while standby, until ``stop``. A failing cycle, reconcile or
        retention step backs off on its own while the others go on; a failure to reach the lease
        or the pending index (the store is away) backs off the whole loop. Nothing escapes but a
        stop (see :mod:`crossdock.workers.loops`)."""
        due = {"reconcile": 0.0, "retention": 0.0, "autoscale": 0.0, "services": 0.0, "deschedule": 0.0}
        try:
            resilient(self.parts["loop"], stop, lambda: self._turn(stop, reconcile_every, due))
        finally:
            if self.leader:
                try:
                    self.rt.store.release_lease(self.holder)
                except StoreUnavailable as exc:  # the lease expires by itself
                    log.warning("%s could not release the lease: %s", self.holder, exc)
            self.leader = False

    def _turn(self, stop: threading.Event, reconcile_every: float, due: dict[str, float]) -> None:
        cfg = self.rt.config.scheduler
        was_leader, self.leader = self.leader, False  # not leader while the store cannot say so
        self.leader = self.rt.store.acquire_lease(self.holder, cfg.lease_seconds)
        metrics.set_leader(self.leader)
        if self.leader != was_leader:
            self._placed = set()
            if was_leader:
                metrics.forget_cycle_view()
            log.info("%s %s leadership", self.holder, "took" if self.leader else "lost")
        if not self.leader:
            self.parts["config"].call(self.rt.refresh_config)  # a standby follows the leader's switches
            stop.wait(cfg.lease_seconds / 3)
            return
        self.parts["config"].call(self.switch_config)
        cfg = self.rt.config.scheduler
        autoscale = [("autoscale", self.rt.config.autoscaler.interval_seconds, self.autoscaler.pass_once)
                     ] if self.autoscaler.wanted() else []
        deschedule = [("deschedule", self.rt.config.descheduler.interval_seconds, self.descheduler.pass_once)
                      ] if self.descheduler.wanted() else []
        follow = [("reconcile", reconcile_every, self.reconcile), ("retention", RETENTION_EVERY_SECONDS, self.expire)]
        serve = [("services", self.rt.config.services.interval_seconds, self.services.pass_once)
                 ] if self.services.wanted() else []
        # the autoscaler goes first: a backlog spike is answered before the cycle that admits
        # what fits now (a cycle over thousands of new jobs takes a second); the descheduler
        # too: a job blocked by scattered GPUs is moved for before the cycle would preempt for it
        self._steps(autoscale + deschedule, due)
        self._steps(serve, due)  # before the cycle: new replicas are placed in the same turn
        started = time.monotonic()
        self.parts["cycle"].call(self.cycle_once)
        took = time.monotonic() - started
        self._steps(follow, due)
        # The next cycle, or the next step if one is due sooner; a cycle that took longer than
        # the interval (thousands pending) is followed by as long a wait, so that the loop takes
        # at most half a core from the workers and supervisors that run the jobs it admits.
        soonest = min(due[step] for step, _every, _fn in autoscale + deschedule + serve + follow) - time.monotonic()
        if self._wait_for_work(stop, min(max(cfg.interval_seconds, took), max(soonest, 0.05)), rest=took):
            # new jobs: the autoscaler looks at once (at most every ARRIVAL_AUTOSCALE_SECONDS
            # while they keep arriving)
            due["autoscale"] = min(due["autoscale"], self._autoscaled_at + ARRIVAL_AUTOSCALE_SECONDS)
            due["deschedule"] = min(due["deschedule"], time.monotonic())

    def _steps(self, steps: list[tuple[str, float, Callable[[], object]]], due: dict[str, float]) -> None:
        """Run the steps that are due, each in its own part."""
        for step, every, fn in steps:
            if time.monotonic() >= due[step]:
                due[step] = time.monotonic() + every
                if step == "autoscale":
                    self._autoscaled_at = time.monotonic()
                self.parts[step].call(fn)

    def report(self) -> dict:
        """How this loop is doing, for ``crossdock health``."""
        return {"holder": self.holder, "role": "leader" if self.leader else "standby",
                "last_cycle_at": self.parts["cycle"].last_success_at,
                "parts": {name: part.report() for name, part in self.parts.items()}}
