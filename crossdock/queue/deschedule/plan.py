"""One descheduling plan: defragmentation first (it serves jobs that wait), then the enabled
upstream strategies in upstream's order, all under one evictor (rules, budgets, caps). The plan is
data: the dry run prints it, the leader's descheduler step carries it out."""

from __future__ import annotations

from datetime import datetime
from typing import Mapping, Sequence

from crossdock.queue.config import ClusterConfig
from crossdock.queue.deschedule.budgets import BudgetLedger, DisruptionBudget, declared_budgets
from crossdock.queue.deschedule.defrag import defragment
from crossdock.queue.deschedule.evictor import Evictor
from crossdock.queue.deschedule.migration import DeschedulePlan, Migration, MoveRecord, Skipped
from crossdock.queue.deschedule.strategies import STRATEGIES
from crossdock.queue.deschedule.view import View
from crossdock.queue.models import Job
from crossdock.queue.snapshot import Snapshot


def plan(snapshot: Snapshot, pending: Sequence[Job], active: Sequence[Job], config: ClusterConfig, now: datetime,
         history: Mapping[int, MoveRecord] | None = None, reported: Sequence[DisruptionBudget] = ()) -> DeschedulePlan:
    """What the descheduler would move now, and what it left, with why. ``history``: the moves made
    before (budget and cooldown); ``reported``: budgets backends report (PodDisruptionBudgets),
    besides the config's ``descheduler.budgets``."""
    cfg = config.descheduler
    view = View(snapshot, pending, active, config, now, history)
    budgets = [*declared_budgets(cfg.budgets), *reported]
    evictor = Evictor(config, BudgetLedger(budgets, view.subjects), now)
    skipped: list[Skipped] = []
    migrations: list[Migration] = []
    unblocked: list[int] = []
    if cfg.defrag.enabled:
        migrations, unblocked = defragment(view, evictor, skipped)
    for name, strategy in STRATEGIES.items():
        args = getattr(cfg.strategies, name)
        if args.enabled:
            migrations.extend(strategy(view, evictor, args, skipped))
    moved = {m.job_id for m in migrations}
    seen: set[tuple[int, str]] = set()
    kept = []
    for s in skipped:
        if s.job_id not in moved and (s.job_id, s.strategy) not in seen:
            seen.add((s.job_id, s.strategy))
            kept.append(s)
    return DeschedulePlan(tuple(migrations), tuple(kept), tuple(unblocked))
