"""Bursting: which pool a pending job of a queue whose pools span several backends goes to, by
expected start (``sbatch -M``'s rule: the earliest expected initiation), with hysteresis.

Each pool's expected start comes from its backend (``EstimatesStart``: Slurm's ``sbatch
--test-only``/``squeue --start``) or from :func:`expected_start` (Kubernetes: the jobs ahead over
the pool's throughput, plus a node's provisioning time when it needs one). The job stays with its
*incumbent* — the pool it was routed to last pass, or the first of its queue's pools — unless
another is sooner by at least the margin (``autoscaler.burst_margin_seconds``), so estimates that
wobble never move it back and forth. The result is one pool per job: a job never goes to two.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping, Sequence


@dataclass(frozen=True)
class Route:
    pool: str
    start: float | None
    """The chosen pool's expected start (seconds from now); None: unknown."""
    reason: str


def expected_start(ahead: int, throughput_per_second: float, *, fits_now: bool = False,
                   provision_seconds: float = 0.0) -> float | None:
    """Seconds until a job starts in a pool: 0 when it fits now; else the ``ahead`` jobs before it
    drained at ``throughput_per_second`` plus ``provision_seconds`` (a node to add first); None
    when nothing drains and no node is coming."""
    if fits_now:
        return 0.0
    if throughput_per_second > 0:
        return ahead / throughput_per_second + provision_seconds
    return provision_seconds if provision_seconds > 0 else None


def route(starts: Mapping[str, float | None], order: Sequence[str], *, current: str | None = None,
          margin: float = 60.0) -> Route:
    """The pool for one job. ``starts``: pool → expected start (None: unknown); ``order``: the
    queue's pools (the first is the incumbent of a job not routed yet); ``current``: the pool
    chosen last pass."""
    if not order:
        raise ValueError("order: a queue has at least one pool; pass the queue's pools")
    incumbent = current if current in order else order[0]
    known = [(s, k, p) for k, p in enumerate(order) if (s := starts.get(p)) is not None and math.isfinite(s)]
    mine = starts.get(incumbent)
    if not known:
        return Route(incumbent, None, "no pool has an estimate; staying")
    best_start, _, best = min(known)
    if mine is None or not math.isfinite(mine):
        return Route(best, best_start, f"{incumbent} has no estimate; {best} starts in {best_start:.0f} s")
    gain = mine - best_start
    if best != incumbent and gain > 0 and gain >= margin:
        return Route(best, best_start, f"{best} starts {gain:.0f} s sooner than {incumbent} (margin {margin:.0f} s)")
    return Route(incumbent, mine, f"staying with {incumbent}: no pool is {margin:.0f} s sooner")


def route_all(starts: Mapping[int, Mapping[str, float | None]], order: Sequence[str], *,
              current: Mapping[int, str] | None = None, margin: float = 60.0) -> dict[int, Route]:
    """:func:`route` for each job: job id → its one route."""
    current = current or {}
    return {job: route(s, order, current=current.get(job), margin=margin) for job, s in starts.items()}
