"""MigProfile: a job asking for MIG slices runs only on nodes partitioned with that profile."""

from __future__ import annotations

import numpy as np

from crossdock.queue.scheduler.framework import CycleState
from crossdock.queue.scheduler.plugins._base import SimpleFilter
from crossdock.queue.scheduler.registry import register
from crossdock.queue.scheduler.request import Request

NAME = "MigProfile"


@register
class MigProfile(SimpleFilter):
    name = NAME

    def filter(self, state: CycleState, req: Request, idx: np.ndarray) -> np.ndarray | None:
        if not req.mig:
            return None
        homes = {i for i, p in state.inventory.slice_home.values() if p == req.mig}
        return np.array([i in homes for i in idx], bool)

    def message_for(self, req: Request) -> str:
        return f"node(s) didn't have MIG profile {req.mig}"
