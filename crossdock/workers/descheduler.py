"""The descheduler step: moves running work so that blocked jobs start, decided by the pure core.

One pass (the scheduling leader runs it as a step of its turn, before the cycle, every
``descheduler.interval_seconds`` and at once when new jobs arrive, so that a job blocked by
scattered GPUs is moved for rather than preempted for):

1. read the pending and active jobs and the leader's snapshot, the moves made before (budget,
   cooldown) and the disruption budgets backends report (``ReportsDisruptionBudgets``);
2. :func:`crossdock.queue.deschedule.plan.plan` decides (pure); the plan is saved for
   ``crossdock deschedule``; a dry run (``descheduler.dry_run``) records ``migration_planned``
   events and stops there;
3. act, reservation first: each move's destination is recorded (the next cycles hold it for the
   moved job and land it there) and the blocked job it serves is nominated to the node being
   freed, then the job is evicted through its backend (``EvictsJobs``) with its grace period; a
   budget's refusal (Kubernetes' 429) drops the reservation and waits for a later pass — it is never
   retried at once; a job its backend no longer has is left to the follower;
4. every move is an event (``migrated``, reason ``Migrated``, from, to, why) in the job's stream.
"""

from __future__ import annotations

import logging
from datetime import datetime, timezone
from typing import Any, Callable

from crossdock.queue.deschedule.migration import DeschedulePlan, Migration, plan_report
from crossdock.queue.deschedule.plan import plan
from crossdock.queue.models import Job
from crossdock.queue.ports import Eviction, EvictsJobs, ReportsDisruptionBudgets
from crossdock.queue.snapshot import Snapshot
from crossdock.queue.states import JobState
from crossdock.workers.loops import EXPECTED

log = logging.getLogger(__name__)


def live_destinations(records: dict[int, tuple[str, int]], jobs: dict[int, Job]) -> tuple[dict[int, str], list[int]]:
    """The reserved destinations that still apply (the moved job is pending, or its evicted attempt
    is still stopping), and the job ids whose reservation is spent (placed again, or gone)."""
    live, spent = {}, []
    for job_id, (node, attempt) in records.items():
        job = jobs.get(job_id)
        if job is not None and (job.state is JobState.PENDING
                                or (job.state.active and job.attempts == attempt and job.preempt_requested)):
            live[job_id] = node
        else:
            spent.append(job_id)
    return live, spent


class Descheduler:
    def __init__(self, rt: Any, holder: str, snapshot: Callable[[list[Job], list[Job]], Snapshot],
                 nominate: Callable[[dict[int, str]], None] | None = None):
        self.rt, self.holder, self.snapshot = rt, holder, snapshot
        self.nominate = nominate or (lambda noms: rt.store.update_nominations([], noms))

    def wanted(self) -> bool:
        return self.rt.config.descheduler.enabled

    def budgets(self) -> list:
        out = []
        for kind in sorted({p.backend for p in self.rt.config.pools.values()}):
            try:
                backend = self.rt.backends(kind)
                if isinstance(backend, ReportsDisruptionBudgets):
                    out.extend(backend.disruption_budgets())
            except EXPECTED as exc:
                log.warning("disruption budgets of %s unavailable: %s", kind, exc)
        return out

    def plan_once(self) -> tuple[DeschedulePlan, dict[int, Job]]:
        store, config = self.rt.store, self.rt.config
        pending = store.get_many(store.pending_ids())
        active = store.get_many(store.active_ids())
        snap = self.snapshot(pending, active)
        result = plan(snap, pending, active, config, datetime.now(timezone.utc), store.deschedule.history(),
                      self.budgets())
        return result, {j.id: j for j in [*pending, *active]}

    def pass_once(self) -> DeschedulePlan:
        store, cfg = self.rt.store, self.rt.config.descheduler
        result, jobs = self.plan_once()
        done: list[Migration] = []
        failed_for: set[int] = set()
        for m in [] if cfg.dry_run else result.migrations:
            if m.for_job is not None and m.for_job in failed_for:
                continue  # a move it needed did not happen: the rest would not unblock it now
            if self._move(m, jobs):
                done.append(m)
            elif m.for_job is not None:
                failed_for.add(m.for_job)
                store.update_nominations([m.for_job], {})
        report = plan_report(result)
        report.update(dry_run=cfg.dry_run, evicted=[m.job_id for m in done])
        store.deschedule.save_plan(report)
        if cfg.dry_run:
            for m in result.migrations:
                store.deschedule.record("migration_planned", m, self.holder)
        return result

    def _move(self, m: Migration, jobs: dict[int, Job]) -> bool:
        store, config = self.rt.store, self.rt.config
        job = jobs.get(m.job_id)
        if job is None or not job.backend:
            return False
        try:
            backend = self.rt.backends(job.backend)
        except EXPECTED as exc:
            log.warning("descheduler: backend %s of job %s unavailable: %s", job.backend, job.id, exc)
            return False
        if not (self.rt.backends.capabilities(job.backend).evicts and isinstance(backend, EvictsJobs)):
            log.info("descheduler: %s cannot evict; job %s stays", job.backend, job.id)
            return False
        # reservation first: the destination and the blocked job's node are held before anything stops
        if m.to_nodes:
            store.deschedule.reserve(job.id, m.to_nodes[0], job.attempts)
        if m.for_job is not None:
            self.nominate({m.for_job: m.from_nodes[0]})
        pc = config.priority_classes.get(job.priority_class)
        grace = config.descheduler.gracePeriodSeconds
        grace = grace if grace is not None else (pc.grace_seconds if pc else 30)
        try:
            outcome = backend.evict(job, grace)
        except EXPECTED as exc:
            log.warning("descheduler: evicting job %s failed: %s", job.id, exc)
            outcome = None
        if outcome is Eviction.EVICTED:
            store.deschedule.record("migrated", m, self.holder, store.deschedule.history())
            log.info("job %s migrated from %s (%s): %s", job.id, ",".join(m.from_nodes), m.strategy, m.reason)
            return True
        store.deschedule.release([job.id])
        if outcome is Eviction.REFUSED_BY_BUDGET:
            store.deschedule.record("eviction_refused", m, self.holder)
        return False
