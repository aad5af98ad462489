"""What a descheduling plan returns: the moves it would make, and the candidates it left, with why."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Migration:
    """One job to evict. ``to_nodes`` is where the defragmenter reserved its new place (the job is
    nominated there so the next cycle lands it there); None: the scheduler chooses (a strategy)."""

    job_id: int
    attempt: int
    from_nodes: tuple[str, ...]
    to_nodes: tuple[str, ...] | None
    strategy: str
    reason: str
    """Why, for people: ``makes room for job 42 (8 GPUs) on n3``, ``node n1 under 20% nvidia.com/gpu``."""
    for_job: int | None = None
    """The pending job this move makes room for (defragmentation)."""
    gpus: int = 0
    """GPUs the job holds (for GPU-hours lost to migration)."""


@dataclass(frozen=True)
class Skipped:
    """A candidate the plan considered and left where it is."""

    job_id: int
    strategy: str
    why: str
    """``priority 500 ≥ threshold 500``, ``budget train-pdb has no disruption left``, ``moved 40 s ago
    (cooldown 600 s)``, ``service replica``…"""


@dataclass(frozen=True)
class DeschedulePlan:
    migrations: tuple[Migration, ...] = ()
    skipped: tuple[Skipped, ...] = ()
    unblocked: tuple[int, ...] = ()
    """Pending jobs that fit once the migrations are done (defragmentation)."""


@dataclass(frozen=True)
class MoveRecord:
    """What the descheduler remembers of one job: how often it moved it, when last, from where."""

    count: int
    last_at: float
    """Epoch seconds of the last move."""
    from_nodes: tuple[str, ...] = ()


def plan_report(plan: DeschedulePlan) -> dict:
    """The plan as JSON-able data (``crossdock deschedule --dry-run --json``)."""
    return {"migrations": [{"job": m.job_id, "attempt": m.attempt, "from": list(m.from_nodes),
                            "to": list(m.to_nodes) if m.to_nodes is not None else None, "strategy": m.strategy,
                            "reason": m.reason, "for_job": m.for_job, "gpus": m.gpus} for m in plan.migrations],
            "skipped": [{"job": s.job_id, "strategy": s.strategy, "why": s.why} for s in plan.skipped],
            "unblocked": list(plan.unblocked)}
