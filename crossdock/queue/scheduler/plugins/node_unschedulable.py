"""NodeUnschedulable: cordoned or drained nodes take no new work."""

from __future__ import annotations

import numpy as np

from crossdock.queue.scheduler.framework import CycleState
from crossdock.queue.scheduler.plugins._base import SimpleFilter
from crossdock.queue.scheduler.registry import register
from crossdock.queue.scheduler.request import Request

NAME = "NodeUnschedulable"


@register
class NodeUnschedulable(SimpleFilter):
    name = NAME
    message = "node(s) were unschedulable"

    def filter(self, state: CycleState, req: Request, idx: np.ndarray) -> np.ndarray | None:
        return state.inventory.schedulable[idx]
