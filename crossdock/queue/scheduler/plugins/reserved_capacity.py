"""ReservedCapacity: keeps lower-priority jobs off capacity held for someone else.

Two holds live in ``state.extra``, both written by the cycle:
- ``"nominated"``: node index -> priority of the preemptor whose victims are leaving it; only
  jobs of at least that priority may use the node;
- ``"reservations"``: (node index array, start time) of the backfill reservation; a job may use
  those nodes only if its time limit ends it before the reservation's start.
"""

from __future__ import annotations

from datetime import timedelta

import numpy as np

from crossdock.queue.scheduler.framework import CycleState
from crossdock.queue.scheduler.registry import register
from crossdock.queue.scheduler.request import Request

NAME = "ReservedCapacity"
NOMINATED = "node(s) were nominated for a higher-priority job"
RESERVED = "node(s) were reserved for a higher-priority job (backfill)"


def _checks(state: CycleState, req: Request, idx: np.ndarray) -> list[tuple[str, np.ndarray]]:
    out = []
    nominated: dict[int, int] = state.extra.get("nominated", {})
    if nominated:
        held = [i for i, prio in nominated.items() if prio > req.priority]
        if held:
            out.append((NOMINATED, ~np.isin(idx, held)))
    reservations = state.extra.get("reservations", [])
    for nodes, start in reservations:
        ends = state.now + timedelta(seconds=req.time_limit_s) if req.time_limit_s else None
        if ends is None or ends > start:
            out.append((RESERVED, ~np.isin(idx, nodes)))
    return out


@register
class ReservedCapacity:
    name = NAME
    static = False

    def filter(self, state: CycleState, req: Request, idx: np.ndarray) -> np.ndarray | None:
        checks = _checks(state, req, idx)
        if not checks:
            return None
        ok = checks[0][1]
        for _, mask in checks[1:]:
            ok = ok & mask
        return ok

    def reasons(self, state: CycleState, req: Request, idx: np.ndarray) -> dict[str, int]:
        out: dict[str, int] = {}
        ok = np.ones(len(idx), bool)
        for message, mask in _checks(state, req, idx):
            n = int((ok & ~mask).sum())
            if n:
                out[message] = out.get(message, 0) + n
            ok &= mask
        return out
