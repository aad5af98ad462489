"""GpuSharing: fractions of one GPU go only to pools that declare GPU sharing."""

from __future__ import annotations

import numpy as np

from crossdock.queue.scheduler.framework import CycleState
from crossdock.queue.scheduler.plugins._base import SimpleFilter
from crossdock.queue.scheduler.registry import register
from crossdock.queue.scheduler.request import Request

NAME = "GpuSharing"


def sharing_nodes(state: CycleState) -> np.ndarray:
    inv = state.inventory
    declared = {name for name, p in state.config.pools.items() if p.gpu.sharing}
    by_pool = np.isin(inv.pool_id, [i for i, p in enumerate(inv.pool_names) if p in declared])
    return inv.sharing | by_pool


@register
class GpuSharing(SimpleFilter):
    name = NAME
    message = "node(s) didn't allow GPU sharing"

    def filter(self, state: CycleState, req: Request, idx: np.ndarray) -> np.ndarray | None:
        if req.gpu_share_milli == 0:
            return None
        return sharing_nodes(state)[idx]
