"""RequestedToCapacityRatio: kube's documented bin packing, score rising with utilization.

The default shape ``[(0, 0), (100, 10)]`` is the one the Kubernetes docs give for bin packing;
placement ``binpack`` uses it together with ``GpuFragmentation``.
"""

from __future__ import annotations

import numpy as np

from crossdock.queue.scheduler.framework import CycleState
from crossdock.queue.scheduler.plugins._resources import resource_scores
from crossdock.queue.scheduler.registry import register
from crossdock.queue.scheduler.request import Request

NAME = "RequestedToCapacityRatio"
BINPACK_SHAPE = [(0, 0), (100, 10)]


@register
class RequestedToCapacityRatio:
    name = NAME
    shape = BINPACK_SHAPE

    def score(self, state: CycleState, req: Request, idx: np.ndarray) -> np.ndarray:
        return resource_scores(state, req, idx, "requested_to_capacity_ratio", self.shape)
