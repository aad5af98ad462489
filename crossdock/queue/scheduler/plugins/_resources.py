"""Feeds kube-scheduler's resource scores (``scoring.node_scores``) from the inventory arrays."""

from __future__ import annotations

import numpy as np

from crossdock.queue.scheduler.framework import FEW_NODES, CycleState
from crossdock.queue.scheduler.request import Request
from crossdock.queue.scheduler.scoring import (matrix_scores, pairs_score, scale_shape, validate_shape,
                                               validate_weights, weighted_scores)

GPU = "nvidia.com/gpu"
RESOURCES = ("cpu", "memory", GPU)


def resource_weights(state: CycleState, req: Request, strategy: str,
                     shape: list[tuple[int, int]] | None = None) -> dict[str, int]:
    """Per-resource weights from the queue's ``plugin_weights`` (keys cpu, memory, nvidia.com/gpu),
    validated once per cycle (a bad weight raises ValueError naming it)."""
    key = ("weights", req.queue, strategy)
    hit = state.cache.get(key)
    if hit is None:
        queue = state.config.queues.get(req.queue)
        given = queue.plugin_weights if queue else {}
        if strategy == "balanced_allocation":
            hit = dict.fromkeys(RESOURCES, 1)
        else:
            hit = {r: int(given.get(r, 1)) for r in RESOURCES}
        validate_weights(hit, strategy)
        if shape is not None:
            validate_shape(shape)
        state.cache[key] = hit
    return hit


def resource_scores(state: CycleState, req: Request, idx: np.ndarray, strategy: str,
                    shape: list[tuple[int, int]] | None = None) -> np.ndarray:
    """``scoring.node_scores`` over cpu, memory and nvidia.com/gpu, fed straight from the arrays."""
    inv = state.inventory
    w = resource_weights(state, req, strategy, shape)
    rows = 3 if req.gpus else 2  # an extended resource the job does not request is skipped, as in kube
    # take(): numpy copies columns of a 2-D array several times faster than with a[:, idx]
    used, allocatable = inv.res_used[:rows].take(idx, axis=1), inv.res_alloc[:rows].take(idx, axis=1)
    pod = (req.cpu_milli, req.memory_mib, req.gpus)[:rows]
    if len(idx) <= FEW_NODES and strategy != "balanced_allocation":  # same integers (balanced: floats)
        weights = (w["cpu"], w["memory"], w[GPU])[:rows]
        scaled = scale_shape(shape) if shape else None
        return np.array([pairs_score(strategy, [(u + p, a, wr) for u, a, p, wr in zip(us, al, pod, weights) if a > 0],
                                     scaled) for us, al in zip(used.T.tolist(), allocatable.T.tolist())], np.int64)
    requested = used + np.array(pod)[:, None]
    if strategy == "balanced_allocation":
        cols = [(requested[r], allocatable[r], 1) for r in range(rows)]
        return weighted_scores(strategy, cols, len(idx))
    weights = np.array([w["cpu"], w["memory"], w[GPU]][:rows], np.int64)
    return matrix_scores(strategy, requested, allocatable, weights, scale_shape(shape) if shape else None)
