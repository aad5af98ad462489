"""TaintToleration: a node's ``NoSchedule``/``NoExecute`` taints must each be tolerated (filter),
and a node with a ``PreferNoSchedule`` taint the job does not tolerate is taken last (score).

Taints are strings ``key[=value]:Effect`` (``nvidia.com/gpu=present:NoSchedule``); a job
tolerates with its own tolerations plus those of the node's pool. The score is kube-scheduler's
TaintToleration score without its normalisation (which the per-state score cache cannot do): 0
for a node without an untolerated ``PreferNoSchedule`` taint, −100 for one with any, weighted
:data:`~crossdock.queue.scheduler.registry.SOFT_TAINT_WEIGHT` in every placement so that it
outranks the resource scores, as kube-scheduler's weight 3 does against its own. The autoscaler
puts such a taint on the nodes it would like to retire
(:data:`crossdock.queue.snapshot.DELETION_CANDIDATE`), so that new work fills the others and
those empty on their own.
"""

from __future__ import annotations

import numpy as np

from crossdock.queue.scheduler.framework import CycleState
from crossdock.queue.scheduler.plugins._base import SimpleFilter
from crossdock.queue.scheduler.registry import register
from crossdock.queue.scheduler.request import Request, Toleration, pool_tolerations
from crossdock.queue.snapshot import SOFT_EFFECT, soft_taints

NAME = "TaintToleration"
MAX_NODE_SCORE = 100
HARD_EFFECTS = ("NoSchedule", "NoExecute")


def parse_taint(taint: str) -> tuple[str, str, str]:
    body, _, effect = taint.rpartition(":")
    if not body:
        body, effect = effect, "NoSchedule"
    key, _, value = body.partition("=")
    return key, value, effect


def tolerates(tolerations: tuple[Toleration, ...], taint: str, soft: bool = False) -> bool:
    """Whether ``tolerations`` tolerate ``taint``; a ``PreferNoSchedule`` taint counts only when
    ``soft`` (the score asks; the filter ignores it)."""
    key, value, effect = parse_taint(taint)
    if effect not in HARD_EFFECTS and not (soft and effect == SOFT_EFFECT):
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

    def score(self, state: CycleState, req: Request, idx: np.ndarray) -> np.ndarray:
        inv = state.inventory
        out = np.zeros(len(idx), np.int64)
        soft = inv.soft_tainted
        hits = np.flatnonzero(np.isin(idx, soft)) if len(soft) else ()
        for k in hits:
            node = inv.nodes[idx[k]]
            tol = req.tolerations + pool_tolerations(state.config, node.pool)
            if not all(tolerates(tol, t, soft=True) for t in soft_taints(node.taints)):
                out[k] = -MAX_NODE_SCORE
        return out
