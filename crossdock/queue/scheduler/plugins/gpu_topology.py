"""GpuTopology: a multi-GPU worker that fits in one NVLink island must get one island's GPUs."""

from __future__ import annotations

import numpy as np

from crossdock.queue.scheduler.framework import CycleState
from crossdock.queue.scheduler.inventory import Inventory
from crossdock.queue.scheduler.plugins._base import SimpleFilter
from crossdock.queue.scheduler.registry import register
from crossdock.queue.scheduler.request import Request

NAME = "GpuTopology"


def island_fits(inv: Inventory, req: Request, idx: np.ndarray) -> np.ndarray:
    if req.gpus < 2:
        return np.ones(len(idx), bool)
    cap = inv.island_cap[idx]
    return (cap == 0) | (req.gpus > cap) | (inv.island_free[idx] >= req.gpus)


@register
class GpuTopology(SimpleFilter):
    name = NAME
    static = False
    local = True

    def filter(self, state: CycleState, req: Request, idx: np.ndarray) -> np.ndarray | None:
        return island_fits(state.inventory, req, idx) if req.gpus >= 2 else None

    def message_for(self, req: Request) -> str:
        return f"node(s) had no NVLink island with {req.gpus} free GPUs"
