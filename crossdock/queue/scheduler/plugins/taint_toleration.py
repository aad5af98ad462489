"""TaintToleration: a node's ``NoSchedule``/``NoExecute`` taints must each be tolerated.

Taints are strings ``key[=value]:Effect`` (``nvidia.com/gpu=present:NoSchedule``); a job
tolerates with its own tolerations plus those of the node's pool.
"""

from __future__ import annotations

import numpy as np

from crossdock.queue.scheduler.framework import CycleState
from crossdock.queue.scheduler.plugins._base import SimpleFilter
from crossdock.queue.scheduler.registry import register
from crossdock.queue.scheduler.request import Request, Toleration, pool_tolerations

NAME = "TaintToleration"
HARD_EFFECTS = ("NoSchedule", "NoExecute")


def parse_taint(taint: str) -> tuple[str, str, str]:
    body, _, effect = taint.rpartition(":")
    if not body:
        body, effect = effect, "NoSchedule"
    key, _, value = body.partition("=")
    return key, value, effect


def tolerates(tolerations: tuple[Toleration, ...], taint: str) -> bool:
    key, value, effect = parse_taint(taint)
    if effect not in HARD_EFFECTS:
        return True
    for t_key, op, t_value, t_effect in tolerations:
        if t_effect and t_effect != effect:
            continue
        if op == "Exists" and (not t_key or t_key == key):
            return True
        if op == "Equal" and t_key == key and t_value == value:
            return True
    return False


@register
class TaintToleration(SimpleFilter):
    name = NAME
    message = "node(s) had untolerated taint(s)"

    def filter(self, state: CycleState, req: Request, idx: np.ndarray) -> np.ndarray | None:
        inv = state.inventory
        tainted = inv.tainted
        hits = np.flatnonzero(np.isin(idx, tainted)) if len(tainted) else ()
        if not len(hits):
            return None
        out = np.ones(len(idx), bool)
        for k in hits:
            node = inv.nodes[idx[k]]
            tol = req.tolerations + pool_tolerations(state.config, node.pool)
            out[k] = all(tolerates(tol, t) for t in node.taints)
        return out
