"""GpuModel: a job that names GPU models (one, or any of a set) runs only on nodes with one of them."""

from __future__ import annotations

import numpy as np

from crossdock.queue.scheduler.framework import CycleState
from crossdock.queue.scheduler.plugins._base import SimpleFilter
from crossdock.queue.scheduler.registry import register
from crossdock.queue.scheduler.request import Request

NAME = "GpuModel"


def wants_gpu(req: Request) -> bool:
    return req.gpus > 0 or req.gpu_share_milli > 0 or req.mig_count > 0


@register
class GpuModel(SimpleFilter):
    name = NAME

    def filter(self, state: CycleState, req: Request, idx: np.ndarray) -> np.ndarray | None:
        if not req.models or not wants_gpu(req):
            return None
        inv = state.inventory
        return np.isin(inv.model_id[idx], [k for k, m in enumerate(inv.model_names) if m in req.models])

    def message_for(self, req: Request) -> str:
        return f"node(s) didn't have GPU model {req.gpu_models_label}"
