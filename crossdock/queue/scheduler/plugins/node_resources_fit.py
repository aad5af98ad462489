"""NodeResourcesFit: free CPU, memory and GPUs (whole, a share of one device, or MIG slices).

``fits(inv, req, idx)`` is the pure predicate that preemption and tests reuse. An exclusive job
needs an idle node. Messages are kube-scheduler's ("Insufficient nvidia.com/gpu"); a node short
of several resources counts once for each, as in kube.
"""

from __future__ import annotations

import numpy as np

from crossdock.queue.scheduler.framework import CycleState
from crossdock.queue.scheduler.inventory import Inventory
from crossdock.queue.scheduler.registry import register
from crossdock.queue.scheduler.request import Request

NAME = "NodeResourcesFit"
GPU = "nvidia.com/gpu"


def _checks(inv: Inventory, req: Request, idx: np.ndarray) -> list[tuple[str, np.ndarray]]:
    checks = [("Insufficient cpu", inv.cpu_alloc[idx] - inv.cpu_used[idx] >= req.cpu_milli),
              ("Insufficient memory", inv.mem_alloc[idx] - inv.mem_used[idx] >= req.memory_mib)]
    if req.gpus:
        checks.append((f"Insufficient {GPU}", inv.gpu_free[idx] >= req.gpus))
    if req.gpu_share_milli:
        checks.append((f"Insufficient {GPU} (share)", inv.share_top[idx] >= req.gpu_share_milli))
    if req.mig_count:
        free = inv.mig_free.get(req.mig or "")
        ok = free[idx] >= req.mig_count if free is not None else np.zeros(len(idx), bool)
        checks.append((f"Insufficient nvidia.com/mig-{req.mig}", ok))
    if req.exclusive:
        idle = (inv.cpu_used[idx] == 0) & (inv.mem_used[idx] == 0) & (inv.gpu_free[idx] == inv.gpu_total[idx])
        checks.append(("node(s) were not idle (exclusive job)", idle))
    return checks


def fits(inv: Inventory, req: Request, idx: np.ndarray) -> np.ndarray:
    out = np.ones(len(idx), bool)
    for _, ok in _checks(inv, req, idx):
        out &= ok
    return out


@register
class NodeResourcesFit:
    name = NAME
    static = False

    def filter(self, state: CycleState, req: Request, idx: np.ndarray) -> np.ndarray:
        return fits(state.inventory, req, idx)

    def reasons(self, state: CycleState, req: Request, idx: np.ndarray) -> dict[str, int]:
        out: dict[str, int] = {}
        for message, ok in _checks(state.inventory, req, idx):
            n = int((~ok).sum())
            if n:
                out[message] = n
        return out
