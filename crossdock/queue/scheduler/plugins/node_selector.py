"""NodeSelector: every ``key=value`` the job selects must be among the node's labels."""

from __future__ import annotations

import numpy as np

from crossdock.queue.scheduler.framework import CycleState
from crossdock.queue.scheduler.plugins._base import SimpleFilter
from crossdock.queue.scheduler.registry import register
from crossdock.queue.scheduler.request import Request

NAME = "NodeSelector"


def matches(labels, selector) -> bool:
    return all(labels.get(k) == v for k, v in selector)


@register
class NodeSelector(SimpleFilter):
    name = NAME
    message = "node(s) didn't match the job's node affinity/selector"

    def filter(self, state: CycleState, req: Request, idx: np.ndarray) -> np.ndarray | None:
        if not req.node_selector:
            return None
        nodes = state.inventory.nodes
        return np.array([matches(nodes[i].labels, req.node_selector) for i in idx], bool)
