"""AntiAffinity: at most one worker of a job (or task of an array) per node when it asks so.

The classic fix for GPU workers crowding one NVLink domain or one host's network card.
"""

from __future__ import annotations

import numpy as np

from crossdock.queue.scheduler.framework import CycleState
from crossdock.queue.scheduler.plugins._base import SimpleFilter
from crossdock.queue.scheduler.registry import register
from crossdock.queue.scheduler.request import Request

NAME = "AntiAffinity"


@register
class AntiAffinity(SimpleFilter):
    name = NAME
    static = False
    local = True
    message = "node(s) didn't satisfy the job's anti-affinity rules"

    def filter(self, state: CycleState, req: Request, idx: np.ndarray) -> np.ndarray | None:
        taken = state.inventory.group_nodes.get(req.group) if req.anti_affinity else None
        if not taken:
            return None
        return ~np.isin(idx, list(taken))
