"""PoolMembership: a job runs only in the pools (node pools / partitions) its queue allows."""

from __future__ import annotations

import numpy as np

from crossdock.queue.scheduler.framework import CycleState
from crossdock.queue.scheduler.plugins._base import SimpleFilter
from crossdock.queue.scheduler.registry import register
from crossdock.queue.scheduler.request import Request

NAME = "PoolMembership"


def pool_mask(state: CycleState, pools: tuple[str, ...]) -> np.ndarray:
    inv = state.inventory
    allowed = np.array([p in pools for p in inv.pool_names], bool)
    return allowed[inv.pool_id]


@register
class PoolMembership(SimpleFilter):
    name = NAME
    message = "node(s) didn't match the job's pools"

    def filter(self, state: CycleState, req: Request, idx: np.ndarray) -> np.ndarray | None:
        return pool_mask(state, req.pools)[idx]
