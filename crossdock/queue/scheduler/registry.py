"""Plugins registered by name, the plugin names every profile runs, and :class:`Profile`.

Plugin modules register themselves (``@register``) when :mod:`crossdock.queue.scheduler.plugins`
imports them; this module imports no plugin, so that the plugins may import it.
:mod:`crossdock.queue.scheduler.profiles` imports the plugins and builds the profile a queue's
config selects (``profile_for``).

A queue's ``placement`` picks the score plugins (``binpack``: the crossdock GPU score
``CrossdockGpu`` — FGD with a CPU-aware fragmentation term, see ``plugins.gpu_frag`` — weighted
101 so that RequestedToCapacityRatio with the bin-packing shape only breaks its ties; ``spread``:
LeastAllocated; ``most-requested``:
MostAllocated; ``balanced``: BalancedAllocation). Its ``plugin_weights`` may re-weight any
score plugin by name (0 turns it off) and weight resources for the resource scores with the
keys ``cpu``, ``memory`` and ``nvidia.com/gpu``. Every profile runs every filter, in
:data:`FILTERS` order (a node's first failing filter is the reason it is counted under), and
the pre-filters, reserve, permit and post-filter plugins named in :data:`PRE_FILTERS`,
:data:`RESERVES`, :data:`PERMITS` and :data:`POST_FILTERS`.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from crossdock.queue.scheduler.framework import CycleState
from crossdock.queue.scheduler.request import Request

REGISTRY: dict[str, type] = {}


def register(cls: type) -> type:
    REGISTRY[cls.name] = cls
    return cls


def create(name: str) -> Any:
    """A new instance of the plugin registered as ``name`` (its module must have been imported:
    importing :mod:`crossdock.queue.scheduler.plugins` registers every plugin)."""
    try:
        return REGISTRY[name]()
    except KeyError:
        raise ValueError(f"unknown scheduler plugin {name!r}; registered: {', '.join(sorted(REGISTRY))}") from None


FILTERS = ("NodeUnschedulable", "PoolMembership", "NodeList", "NodeSelector", "NodeFeatures", "TaintToleration", "GpuModel",
           "GpuSharing", "MigProfile", "NodeResourcesFit", "GpuTopology", "AntiAffinity", "ReservedCapacity")
PRE_FILTERS = ("PerJobLimits", "Quota", "Licenses")
RESERVES = ("Quota", "Licenses")
PERMITS = ("Coscheduling",)
POST_FILTERS = ("DefaultPreemption",)
SOFT_TAINT_WEIGHT = 1000
"""TaintToleration's weight: its −100 for a node with an untolerated ``PreferNoSchedule`` taint
outweighs every resource score (binpack's largest sum is 101·100 + 100)."""
PLACEMENT_SCORES: dict[str, dict[str, int]] = {
    "binpack": {"CrossdockGpu": 101, "RequestedToCapacityRatio": 1, "TaintToleration": SOFT_TAINT_WEIGHT},
    "spread": {"LeastAllocated": 1, "TaintToleration": SOFT_TAINT_WEIGHT},
    "most-requested": {"MostAllocated": 1, "TaintToleration": SOFT_TAINT_WEIGHT},
    "balanced": {"BalancedAllocation": 1, "TaintToleration": SOFT_TAINT_WEIGHT},
}


def passing(filters: list[Any], state: CycleState, req: Request, idx: np.ndarray) -> np.ndarray:
    """The nodes among ``idx`` that pass every filter of ``filters``, in order (a filter that
    does not apply returns None)."""
    for f in filters:
        if len(idx) == 0:
            break
        mask = f.filter(state, req, idx)
        if mask is not None:
            idx = idx[mask]
    return idx


class Profile:
    """The filters and weighted scores one placement strategy runs."""

    def __init__(self, filters: list[Any], scores: list[tuple[Any, int]], pre_filters: list[Any] = (),
                 reserves: list[Any] = (), permits: list[Any] = (), post_filters: list[Any] = ()):
        self.pre_filters, self.reserves = list(pre_filters), list(reserves)
        self.permits, self.post_filters = list(permits), list(post_filters)
        self.filters = filters
        self.static_filters = [f for f in filters if f.static]
        self.dynamic_filters = [f for f in filters if not f.static]
        self.scores = scores

    def static_nodes(self, state: CycleState, req: Request) -> np.ndarray:
        """Indexes of the nodes that pass every static filter (cached per request shape)."""
        key = ("static", req.static_key())
        hit = state.cache.get(key)
        if hit is None:
            state.cache[key] = hit = passing(self.static_filters, state, req, np.arange(state.inventory.n))
        return hit

    def feasible(self, state: CycleState, req: Request, idx: np.ndarray | None = None) -> np.ndarray:
        """Indexes of the nodes (among ``idx``, default all) that may hold one worker now."""
        return passing(self.dynamic_filters, state, req, self.static_nodes(state, req) if idx is None else idx)

    def reasons(self, state: CycleState, req: Request) -> dict[str, int]:
        """``{message: nodes}``, each failing node counted under its first failing filter."""
        idx = np.arange(state.inventory.n)
        out: dict[str, int] = {}
        for f in self.filters:
            if len(idx) == 0:
                break
            for message, count in f.reasons(state, req, idx).items():
                out[message] = out.get(message, 0) + count
            mask = f.filter(state, req, idx)
            if mask is not None:
                idx = idx[mask]
        return out

    def score(self, state: CycleState, req: Request, idx: np.ndarray) -> np.ndarray:
        total = np.zeros(len(idx), np.int64)
        for plugin, weight in self.scores:
            total += weight * plugin.score(state, req, idx)
        return total


def explain(reasons: Mapping[str, int], total: int, tail: str = "") -> str:
    """kube-scheduler's FitError text: ``0/N nodes are available: <count> <reason>, ….``"""
    parts = sorted(f"{count} {message}" for message, count in reasons.items())
    text = f"0/{total} nodes are available"
    text += (": " + ", ".join(parts) + ".") if parts else "."
    return text + (f" {tail}" if tail else "")
