"""GpuFragmentation: FGD packing score for GPU jobs, built on the measure in ``plugins.gpu_frag``.

For each candidate node it compares the node's fragmentation for the cycle's typical pods
before and after placing this worker (the device choice is the scheduler's: first idle devices
for whole GPUs, the best-fit device for a share) and returns ``gpu_frag.fgd_score(Δ)``.
The typical pods are the cycle's pending demands (``state.extra["typical"]``, built by
:func:`typical_of`).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from crossdock.queue.scheduler.framework import CycleState
from crossdock.queue.scheduler.plugins import gpu_frag
from crossdock.queue.scheduler.registry import register
from crossdock.queue.scheduler.request import Request

NAME = "GpuFragmentation"
FULL = 1000


def model_bits(models: frozenset[str], model_names: Sequence[str]) -> int:
    if not models:
        return gpu_frag.ANY_MODEL
    return sum(1 << k for k, m in enumerate(model_names) if m in models)


def typical_of(requests: Sequence[Request], model_names: Sequence[str]) -> gpu_frag.TypicalPods | None:
    if not requests:
        return None
    cpu = np.array([r.cpu_milli for r in requests], np.int64)
    milli = np.array([r.gpu_share_milli or (FULL if r.gpus else 0) for r in requests], np.int64)
    num = np.array([1 if r.gpu_share_milli else r.gpus for r in requests], np.int64)
    spec = np.array([model_bits(r.models, model_names) for r in requests], np.int64)
    return gpu_frag.typical_pods(cpu, milli, num, spec)


@register
class GpuFragmentation:
    name = NAME

    def score(self, state: CycleState, req: Request, idx: np.ndarray) -> np.ndarray:
        typical = state.extra.get("typical")
        if typical is None or not (req.gpus or req.gpu_share_milli) or len(idx) == 0:
            return np.zeros(len(idx), np.int64)
        inv = state.inventory
        left = np.where(inv.dev_exists[idx], np.maximum(inv.dev_free[idx], 0), 0)
        access = state.extra["access"][idx]
        cpu_left = inv.cpu_free[idx]
        total, cnt, below = gpu_frag.frag_parts(left, typical)
        before = gpu_frag.frag_from_parts(total, cnt, below, cpu_left, access, typical)
        if req.gpu_share_milli:
            cand = np.where(left >= req.gpu_share_milli, left, FULL + 1).min(axis=1)
            after_parts = gpu_frag.parts_after(total, cnt, below, typical, req.gpu_share_milli, 1,
                                               np.minimum(cand, FULL))
        else:
            after_parts = gpu_frag.parts_after(total, cnt, below, typical, FULL, req.gpus)
        after = gpu_frag.frag_from_parts(*after_parts, cpu_left - req.cpu_milli, access, typical)
        return gpu_frag.fgd_score(before - after)
