"""Nodes that may serve either side (a Slurm partition or a Kubernetes pool): when one should move.

From the one backlog, each side's unmet GPU demand is known (the GPUs of its pending jobs that fit
no node of the side now). A side that has waited so for ``settle_s`` is given shared nodes of a
side that waits for nothing, or its own nodes lent to a side that waits too (reclaimed, as
Kueue's cohorts reclaim lent quota), as many as cover its waiting GPUs (less what is on its way):
an idle one moves at once; a busy one is drained first (no new work there: Slurm's DRAIN, a
Kubernetes cordon), the least used first, and moves once nothing runs there, so nothing running
is interrupted. A drain is called off when its target no longer waits, or when its side starts to wait (unless
the node goes home).
A node that moved stays put for ``hold_s``, and a side must have waited ``settle_s`` first: a
burst shorter than that moves nothing, and nodes do not flap. The caller drains, moves (leave the
source, join the target) and records each step with its reason.

Pure: views in, a :class:`Plan` out (:func:`plan_moves`); the simulator
(:mod:`crossdock.sim.shared`) runs it over a day's trace.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Sequence


@dataclass(frozen=True, slots=True)
class SharedNode:
    name: str
    side: str
    """Where it serves now (or, on its way, where it goes)."""
    gpus: int
    used: int = 0
    """GPUs its side's jobs hold there."""
    draining_to: str | None = None
    """Drained for that side: no new work, moves once empty."""
    moved_at: float | None = None
    """When it last changed sides (None: never)."""
    arriving: bool = False
    """Moved, not yet joined: counts as capacity coming to its side."""
    home: str | None = None
    """The side it belongs to (None: to neither): lent elsewhere, it is reclaimed when home waits."""

    def lent_to_another(self) -> bool:
        return self.home is not None and self.home != self.side


@dataclass(frozen=True, slots=True)
class SideNeed:
    waiting_gpus: int
    """GPUs of the side's pending jobs that fit no node of the side now."""
    waiting_since: float | None
    """Since when that has been above zero (None: it is not)."""


@dataclass(frozen=True, slots=True)
class Move:
    node: str
    source: str
    target: str
    reason: str


@dataclass(frozen=True)
class Plan:
    moves: list[Move] = field(default_factory=list)
    """Idle nodes to move now (drained ones that emptied included)."""
    drains: list[Move] = field(default_factory=list)
    """Busy nodes to drain for their target."""
    undrain: list[str] = field(default_factory=list)
    """Drains called off: the node takes its side's work again."""


def plan_moves(nodes: Sequence[SharedNode], needs: Mapping[str, SideNeed], now: float, *, settle_s: float,
               hold_s: float) -> Plan:
    plan = Plan()

    def waits(side: str) -> int:
        return needs.get(side, SideNeed(0, None)).waiting_gpus

    coming: dict[str, int] = {}
    for n in nodes:
        if n.draining_to is None:
            if n.arriving:
                coming[n.side] = coming.get(n.side, 0) + n.gpus
        elif not waits(n.draining_to) or (waits(n.side) and n.home != n.draining_to):
            plan.undrain.append(n.name)
        elif n.used == 0:
            plan.moves.append(Move(n.name, n.side, n.draining_to, f"drained for {n.draining_to}, now empty"))
        else:
            coming[n.draining_to] = coming.get(n.draining_to, 0) + n.gpus
    takers = sorted((side for side, need in needs.items()
                     if need.waiting_gpus > 0 and need.waiting_since is not None and now - need.waiting_since >= settle_s),
                    key=lambda side: (-needs[side].waiting_gpus, needs[side].waiting_since, side))
    candidates = sorted((n for n in nodes if n.draining_to is None and not n.arriving
                         and (n.moved_at is None or now - n.moved_at >= hold_s)),
                        key=lambda n: (n.used, n.name))  # idle first, then the soonest empty
    for side in takers:
        need = needs[side]
        short = need.waiting_gpus - coming.get(side, 0)
        # a side that waits itself gives only what it borrowed from this one (reclaimed, as Kueue's
        # cohorts reclaim lent quota); one that waits for nothing gives any shared node
        mine_back = [n for n in candidates if n.side != side and n.home == side and n.lent_to_another()]
        others = [n for n in candidates if n.side != side and not waits(n.side) and n not in mine_back]
        for node in mine_back + others:
            if short <= 0:
                break
            candidates.remove(node)
            short -= node.gpus
            why = (f"{side} has waited {now - need.waiting_since:.0f} s for {need.waiting_gpus} GPUs; "
                   + (f"{node.name} is its own, lent to {node.side}" if node.home == side
                      else f"{node.side} waits for none"))
            (plan.moves if node.used == 0 else plan.drains).append(Move(node.name, node.side, side, why))
    return plan
