"""Feeds kube-scheduler's resource scores (``scoring.node_scores``) from the inventory arrays."""

from __future__ import annotations

import numpy as np

from crossdock.queue.scheduler.framework import CycleState
from crossdock.queue.scheduler.request import Request
from crossdock.queue.scheduler.scoring import node_scores, validate_shape, validate_weights

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
    inv = state.inventory
    allocatable = {"cpu": inv.cpu_alloc[idx], "memory": inv.mem_alloc[idx], GPU: inv.gpu_total[idx]}
    requested = {"cpu": inv.cpu_used[idx], "memory": inv.mem_used[idx], GPU: inv.gpu_total[idx] - inv.gpu_free[idx]}
    request = {"cpu": req.cpu_milli, "memory": req.memory_mib, GPU: req.gpus}
    weights = resource_weights(state, req, strategy, shape)
    return node_scores(strategy, allocatable, requested, request, weights, shape, validate=False)
