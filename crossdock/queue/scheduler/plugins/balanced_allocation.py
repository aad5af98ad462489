"""BalancedAllocation: favours nodes whose CPU, memory and GPU fill evenly (kube NodeResourcesBalancedAllocation); placement balanced."""

from __future__ import annotations

import numpy as np

from crossdock.queue.scheduler.framework import CycleState
from crossdock.queue.scheduler.plugins._resources import resource_scores
from crossdock.queue.scheduler.registry import register
from crossdock.queue.scheduler.request import Request

NAME = "BalancedAllocation"


@register
class BalancedAllocation:
    name = NAME

    def score(self, state: CycleState, req: Request, idx: np.ndarray) -> np.ndarray:
        return resource_scores(state, req, idx, "balanced_allocation")
