"""NodeResourcesFit: free CPU, memory, GPUs (whole, a share of one device, or MIG slices) and,
on nodes that have a pod limit (Kubernetes' ``allocatable.pods``), room for one more worker.

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
    sel = slice(None) if len(idx) == inv.n else idx  # every node: skip the gather
    checks = [("Insufficient cpu", inv.cpu_free[sel] >= req.cpu_milli),
              ("Insufficient memory", inv.mem_free[sel] >= req.memory_mib)]
    if inv.pod_limited:
        checks.append(("Too many pods", inv.pods_used[sel] < inv.pods_alloc[sel]))
    if req.gpus:
        checks.append((f"Insufficient {GPU}", inv.gpu_free[sel] >= req.gpus))
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
    checks = _checks(inv, req, idx)
    out = checks[0][1] & checks[1][1]
    for _, ok in checks[2:]:
        out &= ok
    return out


@register
class NodeResourcesFit:
    name = NAME
    static = False
    local = True

    def filter(self, state: CycleState, req: Request, idx: np.ndarray) -> np.ndarray | None:
        return fits(state.inventory, req, idx)

    def reasons(self, state: CycleState, req: Request, idx: np.ndarray) -> dict[str, int]:
        out: dict[str, int] = {}
        for message, ok in _checks(state.inventory, req, idx):
            n = int((~ok).sum())
            if n:
                out[message] = n
        return out
