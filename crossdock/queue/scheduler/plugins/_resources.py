"""Feeds kube-scheduler's resource scores (``scoring.node_scores``) from the inventory arrays."""

from __future__ import annotations

import numpy as np

from crossdock.queue.scheduler.framework import CycleState
from crossdock.queue.scheduler.request import Request
from crossdock.queue.scheduler.scoring import node_scores

GPU = "nvidia.com/gpu"
RESOURCES = ("cpu", "memory", GPU)


def resource_weights(state: CycleState, req: Request, strategy: str) -> dict[str, int]:
    """Per-resource weights from the queue's ``plugin_weights`` (keys cpu, memory, nvidia.com/gpu)."""
    queue = state.config.queues.get(req.queue)
    given = queue.plugin_weights if queue else {}
    if strategy == "balanced_allocation":
        return dict.fromkeys(RESOURCES, 1)
    return {r: int(given.get(r, 1)) for r in RESOURCES}


def resource_scores(state: CycleState, req: Request, idx: np.ndarray, strategy: str,
                    shape: list[tuple[int, int]] | None = None) -> np.ndarray:
    inv = state.inventory
    allocatable = {"cpu": inv.cpu_alloc[idx], "memory": inv.mem_alloc[idx], GPU: inv.gpu_total[idx]}
    requested = {"cpu": inv.cpu_used[idx], "memory": inv.mem_used[idx], GPU: inv.gpu_total[idx] - inv.gpu_free[idx]}
    request = {"cpu": req.cpu_milli, "memory": req.memory_mib, GPU: req.gpus}
    return node_scores(strategy, allocatable, requested, request, resource_weights(state, req, strategy), shape)
