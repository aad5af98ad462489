"""NodeFeatures: a job's ``--constraint`` features, through the node's pool's ``features`` map.

Each feature a pool maps stands for node labels (``features: {a100: {gpu.model: A100}}``); a node
has the feature when it carries all of them. A pool without a map (a Slurm partition) leaves the
features to its backend, which knows its nodes' own.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from crossdock.queue.scheduler.framework import CycleState
from crossdock.queue.scheduler.plugins._base import SimpleFilter
from crossdock.queue.scheduler.registry import register
from crossdock.queue.scheduler.request import Request

NAME = "NodeFeatures"


def has_features(labels: Mapping[str, str], features: Mapping[str, Mapping[str, str]] | None,
                 terms: tuple[tuple[str, ...], ...]) -> bool:
    """Every term (an or of features) has one feature whose labels the node carries."""
    if features is None:
        return True
    return all(any(f in features and all(labels.get(k) == v for k, v in features[f].items()) for f in term)
               for term in terms)


@register
class NodeFeatures(SimpleFilter):
    name = NAME
    message = "node(s) didn't have the job's --constraint features"

    def filter(self, state: CycleState, req: Request, idx: np.ndarray) -> np.ndarray | None:
        if not req.features:
            return None
        nodes, pools = state.inventory.nodes, state.config.pools
        return np.array([has_features(nodes[i].labels, getattr(pools.get(nodes[i].pool), "features", None),
                                      req.features) for i in idx], bool)
