"""ServiceSpread: the replicas of one inference service spread on hostname, at most one per node
where possible (a topology spread constraint on ``kubernetes.io/hostname`` with maxSkew 1 and
``whenUnsatisfiable: ScheduleAnyway``, the shape the issue asks for).

Keyed on ``JobSpec.service.name`` (``Request.service``); a job without one is never touched, so
the decisions for batch jobs are those of the profile alone. Two parts:

- a soft filter, :func:`prefer`: among the feasible nodes, those with the fewest replicas of the
  service — every feasible node when all hold as many (then a second replica shares a node
  rather than pending);
- a score, :func:`spread_scores`: 100 on nodes without a replica, less the more it has (kube's
  PodTopologySpread scoring, normalized in reverse), for tools that rank nodes for a replica.

Replica counts per node are the inventory's ``service_nodes``: from the snapshot's allocations,
kept up to date as replicas are placed, undone and released within a cycle.
"""

from __future__ import annotations

import numpy as np

from crossdock.queue.scheduler.framework import CycleState, normalize
from crossdock.queue.scheduler.registry import register
from crossdock.queue.scheduler.request import Request

NAME = "ServiceSpread"


def counts(state: CycleState, req: Request, idx: np.ndarray) -> np.ndarray:
    """Replicas of ``req``'s service on each node of ``idx`` (zeros for a batch job)."""
    on = state.inventory.service_nodes.get(req.service or "") if req.service is not None else None
    if not on:
        return np.zeros(len(idx), np.int64)
    return np.fromiter((on.get(int(i), 0) for i in idx), np.int64, len(idx))


def prefer(state: CycleState, req: Request, idx: np.ndarray) -> np.ndarray:
    """The nodes of ``idx`` with the fewest replicas of the service (all of ``idx`` for a batch job)."""
    if req.service is None or len(idx) == 0:
        return idx
    c = counts(state, req, idx)
    return idx[c == c.min()]


def spread_scores(state: CycleState, req: Request, idx: np.ndarray) -> np.ndarray:
    return normalize(counts(state, req, idx), reverse=True)


@register
class ServiceSpread:
    """Registered by name so a queue may weight it (``plugin_weights: {ServiceSpread: N}``);
    placement applies :func:`prefer` to every replica whatever the weights."""

    name = NAME

    def score(self, state: CycleState, req: Request, idx: np.ndarray) -> np.ndarray:
        return spread_scores(state, req, idx)
