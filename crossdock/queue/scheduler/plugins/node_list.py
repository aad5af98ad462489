"""NodeList: Slurm's ``--nodelist`` (only these nodes) and ``--exclude`` (never these)."""

from __future__ import annotations

import numpy as np

from crossdock.queue.scheduler.framework import CycleState
from crossdock.queue.scheduler.plugins._base import SimpleFilter
from crossdock.queue.scheduler.registry import register
from crossdock.queue.scheduler.request import Request

NAME = "NodeList"


@register
class NodeList(SimpleFilter):
    name = NAME
    message = "node(s) didn't match the job's node list"

    def filter(self, state: CycleState, req: Request, idx: np.ndarray) -> np.ndarray | None:
        if not req.nodelist and not req.exclude:
            return None
        names = state.inventory.nodes
        return np.array([(not req.nodelist or names[i].name in req.nodelist) and names[i].name not in req.exclude
                         for i in idx], bool)
