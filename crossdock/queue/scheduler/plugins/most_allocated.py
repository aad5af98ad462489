"""MostAllocated: favours the fullest nodes (kube NodeResourcesFit MostAllocated); placement most-requested."""

from __future__ import annotations

import numpy as np

from crossdock.queue.scheduler.framework import CycleState
from crossdock.queue.scheduler.plugins._resources import resource_scores
from crossdock.queue.scheduler.registry import register
from crossdock.queue.scheduler.request import Request

NAME = "MostAllocated"


@register
class MostAllocated:
    name = NAME

    def score(self, state: CycleState, req: Request, idx: np.ndarray) -> np.ndarray:
        return resource_scores(state, req, idx, "most_allocated")
