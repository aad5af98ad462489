"""Node resource scores with kube-scheduler's integers, as pure functions.

Admins reason about placement with the Kubernetes documentation, so for the same inputs these
functions return exactly what kube-scheduler's ``NodeResourcesFit`` scoring strategies
(``MostAllocated``, ``LeastAllocated``, ``RequestedToCapacityRatio``) and
``NodeResourcesBalancedAllocation`` return (``pkg/scheduler/framework/plugins/noderesources``):

- per resource, ``requested`` is what is already on the node plus this job's request;
- a resource with zero (or missing) allocatable is skipped;
- an extended resource (any name other than ``cpu``, ``memory``, ``ephemeral-storage``,
  e.g. ``nvidia.com/gpu``) that the job does not request is skipped;
- Most/Least: ``Σ score_r·w_r // Σ w_r`` with ``score_r = requested·100 // allocatable``
  (Go's truncating int64 division); Balanced: ``int((1 - std)·100)`` over the fractions
  (capped at 1), weights must be 1 as in kube; RequestedToCapacityRatio: the shape's scores
  (0–10) are scaled by 10, the broken-linear function is evaluated at
  ``requested·100 // allocatable`` (100 when over capacity), resources scoring 0 are left out
  of the weighted mean, and the mean is rounded half away from zero (``math.Round``).

Public API (also used by the simulator)::

    node_score(strategy, allocatable, requested, request, weights, shape=None) -> int
        strategy: "most_allocated" | "least_allocated" | "requested_to_capacity_ratio"
                  | "balanced_allocation"
        allocatable, requested (already on the node), request (this job): {resource: int}
        weights: {resource: int}, 1..100 (balanced: exactly 1); shape: [(utilization, score)]
        raises ValueError for an unknown strategy, bad weights or a bad shape.
    pairs_score(strategy, pairs, scaled_shape=None) -> int
        node_score from (requested incl. this job, allocatable, weight) per counted resource.
    validate_weights(weights, strategy) -> None
    validate_shape(shape) -> None
    broken_linear(shape_scaled, p) -> int          # kube's helper.BuildBrokenLinearFunction
    node_scores(strategy, allocatable, requested, request, weights, shape=None) -> np.ndarray
        the same integers for many nodes at once: allocatable and requested map a resource to
        an int64 array (one entry per node); request maps a resource to an int.
"""

from __future__ import annotations

import math
from typing import Mapping, Sequence

import numpy as np

MAX_NODE_SCORE = 100
MAX_CUSTOM_PRIORITY_SCORE = 10
MAX_UTILIZATION = 100
MIN_WEIGHT, MAX_WEIGHT = 1, 100

STRATEGIES = ("most_allocated", "least_allocated", "requested_to_capacity_ratio", "balanced_allocation")
NATIVE_RESOURCES = frozenset({"cpu", "memory", "ephemeral-storage"})
DEFAULT_WEIGHTS = {"cpu": 1, "memory": 1}


def is_extended(resource: str) -> bool:
    """kube's IsScalarResourceName, for our purposes: anything but the native resources."""
    return resource not in NATIVE_RESOURCES


def go_div(a: int, b: int) -> int:
    """Go's int64 division: truncates toward zero (Python's // floors)."""
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b > 0) else -q


def validate_weights(weights: Mapping[str, int], strategy: str) -> None:
    if not weights:
        raise ValueError("weights: at least one resource must be given, e.g. {'cpu': 1, 'memory': 1}")
    for name, w in weights.items():
        if not isinstance(w, int) or isinstance(w, bool):
            raise ValueError(f"weights.{name}: {w!r} is not an integer; use 1..100")
        if strategy == "balanced_allocation":
            if w != 1:
                raise ValueError(f"weights.{name}: {w} must be 1 for balanced_allocation (as in kube-scheduler)")
        elif not MIN_WEIGHT <= w <= MAX_WEIGHT:
            raise ValueError(f"weights.{name}: {w} is not in the valid range [1, 100]")


def validate_shape(shape: Sequence[tuple[int, int]] | None) -> None:
    if not shape:
        raise ValueError("shape: at least one (utilization, score) point must be specified")
    prev = None
    for i, point in enumerate(shape):
        if len(point) != 2:
            raise ValueError(f"shape[{i}]: {point!r} is not a (utilization, score) pair")
        u, s = point
        if not isinstance(u, int) or not isinstance(s, int) or isinstance(u, bool) or isinstance(s, bool):
            raise ValueError(f"shape[{i}]: {point!r} must hold integers")
        if not 0 <= u <= MAX_UTILIZATION:
            raise ValueError(f"shape[{i}].utilization: {u} is not in the valid range [0, 100]")
        if not 0 <= s <= MAX_CUSTOM_PRIORITY_SCORE:
            raise ValueError(f"shape[{i}].score: {s} is not in the valid range [0, 10]")
        if prev is not None and u <= prev:
            raise ValueError(f"shape[{i}].utilization: {u}; utilization values must be sorted in increasing order")
        prev = u


def scale_shape(shape: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    """Shape scores 0–10 onto kube's 0–100 node-score range."""
    factor = MAX_NODE_SCORE // MAX_CUSTOM_PRIORITY_SCORE
    return [(int(u), int(s) * factor) for u, s in shape]


def broken_linear(shape: Sequence[tuple[int, int]], p: int) -> int:
    """kube's BuildBrokenLinearFunction on an already scaled shape, with Go integer division."""
    for i, (u, s) in enumerate(shape):
        if p <= u:
            if i == 0:
                return s
            u0, s0 = shape[i - 1]
            return s0 + go_div((s - s0) * (p - u0), u - u0)
    return shape[-1][1]


def _most(requested: int, capacity: int) -> int:
    requested = min(requested, capacity)
    return requested * MAX_NODE_SCORE // capacity


def _least(requested: int, capacity: int) -> int:
    if requested > capacity:
        return 0
    return (capacity - requested) * MAX_NODE_SCORE // capacity


def _pairs(allocatable: Mapping[str, int], requested: Mapping[str, int], request: Mapping[str, int],
           weights: Mapping[str, int]) -> list[tuple[int, int, int]]:
    """(requested incl. this job, allocatable, weight) per scored resource, in weights' order."""
    out = []
    for name, weight in weights.items():
        pod = int(request.get(name, 0))
        if pod == 0 and is_extended(name):
            continue
        alloc = int(allocatable.get(name, 0))
        if alloc == 0:
            continue
        out.append((int(requested.get(name, 0)) + pod, alloc, weight))
    return out


def node_score(strategy: str, allocatable: Mapping[str, int], requested: Mapping[str, int],
               request: Mapping[str, int], weights: Mapping[str, int] | None,
               shape: Sequence[tuple[int, int]] | None = None) -> int:
    """kube-scheduler's score (0–100) of one node for one job; see the module docstring."""
    if strategy not in STRATEGIES:
        raise ValueError(f"strategy: unknown {strategy!r}; use one of {', '.join(STRATEGIES)}")
    weights = dict(DEFAULT_WEIGHTS if weights is None else weights)
    validate_weights(weights, strategy)
    if strategy == "requested_to_capacity_ratio":
        validate_shape(shape)
    pairs = _pairs(allocatable, requested, request, weights)
    return pairs_score(strategy, pairs, scale_shape(shape or ()) if strategy == "requested_to_capacity_ratio" else None)


def pairs_score(strategy: str, pairs: Sequence[tuple[int, int, int]],
                scaled_shape: Sequence[tuple[int, int]] | None = None) -> int:
    """:func:`node_score` from (requested incl. the job, allocatable, weight) of each resource that
    counts (allocatable > 0; extended resources only when requested), unchecked; the shape scaled."""
    if strategy == "balanced_allocation":
        return _balanced([min(req / alloc, 1.0) for req, alloc, _ in pairs])
    if strategy == "requested_to_capacity_ratio":
        scaled = scaled_shape or ()
        total = wsum = 0
        for req, alloc, w in pairs:
            p = MAX_UTILIZATION if req > alloc else req * MAX_UTILIZATION // alloc
            s = broken_linear(scaled, p)
            if s > 0:
                total += s * w
                wsum += w
        return 0 if wsum == 0 else _go_round(total / wsum)
    one = _most if strategy == "most_allocated" else _least
    total = wsum = 0
    for req, alloc, w in pairs:
        total += one(req, alloc) * w
        wsum += w
    return 0 if wsum == 0 else total // wsum


def _go_round(x: float) -> int:
    """Go's math.Round: half away from zero (Python's round() is half to even)."""
    return int(math.floor(x + 0.5)) if x >= 0 else -int(math.floor(-x + 0.5))


def _balanced(fractions: Sequence[float]) -> int:
    if len(fractions) == 2:
        std = abs((fractions[0] - fractions[1]) / 2)
    elif len(fractions) > 2:
        mean = sum(fractions) / len(fractions)
        std = math.sqrt(sum((f - mean) * (f - mean) for f in fractions) / len(fractions))
    else:
        std = 0.0
    return int((1 - std) * MAX_NODE_SCORE)


# --- many nodes at once -----------------------------------------------------------------------

def node_scores(strategy: str, allocatable: Mapping[str, np.ndarray], requested: Mapping[str, np.ndarray],
                request: Mapping[str, int], weights: Mapping[str, int] | None,
                shape: Sequence[tuple[int, int]] | None = None, validate: bool = True) -> np.ndarray:
    """:func:`node_score` for every node at once (int64 arrays in, one int64 array out).

    ``validate=False`` skips checking weights and shape (for callers that checked them once).
    """
    if strategy not in STRATEGIES:
        raise ValueError(f"strategy: unknown {strategy!r}; use one of {', '.join(STRATEGIES)}")
    weights = DEFAULT_WEIGHTS if weights is None else weights
    if validate:
        validate_weights(weights, strategy)
        if strategy == "requested_to_capacity_ratio":
            validate_shape(shape)
    n = len(next(iter(allocatable.values())))
    cols = []
    for name, w in weights.items():
        pod = int(request.get(name, 0))
        if pod == 0 and is_extended(name):
            continue
        alloc = allocatable.get(name)
        if alloc is None:
            continue
        req = requested[name] + pod if name in requested else np.full(n, pod, np.int64)
        cols.append((req, alloc, w))
    return weighted_scores(strategy, cols, n, scale_shape(shape or ()) if shape else None)


def weighted_scores(strategy: str, cols: Sequence[tuple[np.ndarray, np.ndarray, int]], n: int,
                    scaled_shape: Sequence[tuple[int, int]] | None = None) -> np.ndarray:
    """The per-node score from (requested incl. the job, allocatable, weight) columns of the
    resources that count (the caller drops extended resources the job does not request)."""
    if strategy == "balanced_allocation":
        return _balanced_many(list(cols), n)
    if not cols:
        return np.zeros(n, np.int64)
    return matrix_scores(strategy, np.stack([c[0] for c in cols]), np.stack([c[1] for c in cols]),
                         np.array([c[2] for c in cols], np.int64), scaled_shape)


def matrix_scores(strategy: str, req: np.ndarray, alloc: np.ndarray, weights: np.ndarray,
                  scaled_shape: Sequence[tuple[int, int]] | None = None) -> np.ndarray:
    """:func:`weighted_scores` on (resources × nodes) matrices of requested-incl.-job and allocatable
    (not for balanced_allocation)."""
    w = weights[:, None]
    present = alloc > 0
    safe = np.maximum(alloc, 1)
    if strategy == "most_allocated":
        s = np.minimum(req, safe) * MAX_NODE_SCORE // safe
    elif strategy == "least_allocated":
        s = np.maximum(safe - req, 0) * MAX_NODE_SCORE // safe
    else:
        p = np.minimum(req, safe) * MAX_UTILIZATION // safe
        linear = list(scaled_shape or ()) == [(0, 0), (MAX_UTILIZATION, MAX_NODE_SCORE)]
        s = p if linear else _broken_linear_many(scaled_shape or (), p)
        present &= s > 0
    wp = w * present
    total = (s * wp).sum(axis=0)
    wsum = wp.sum(axis=0)
    if strategy == "requested_to_capacity_ratio":
        mean = total / np.maximum(wsum, 1)
        return np.where(wsum == 0, 0, np.floor(mean + 0.5)).astype(np.int64)
    return np.where(wsum == 0, 0, total // np.maximum(wsum, 1))


def _broken_linear_many(shape: Sequence[tuple[int, int]], p: np.ndarray) -> np.ndarray:
    out = np.full(p.shape, shape[-1][1], np.int64)
    done = np.zeros(p.shape, bool)
    for i, (u, s) in enumerate(shape):
        hit = ~done & (p <= u)
        if i == 0:
            val = np.full(p.shape, s, np.int64)
        else:
            u0, s0 = shape[i - 1]
            num = (s - s0) * (p - u0)
            val = s0 + np.sign(num) * (np.abs(num) // (u - u0))
        out = np.where(hit, val, out)
        done |= hit
    return out


def _balanced_many(cols: list[tuple[np.ndarray, np.ndarray, int]], n: int) -> np.ndarray:
    fracs = []
    masks = []
    for req, alloc, _ in cols:
        present = alloc > 0
        fracs.append(np.where(present, np.minimum(req / np.where(present, alloc, 1), 1.0), 0.0))
        masks.append(present)
    if not fracs:
        return np.full(n, MAX_NODE_SCORE, np.int64)
    f = np.vstack(fracs)
    m = np.vstack(masks)
    count = m.sum(axis=0)
    mean = f.sum(axis=0) / np.maximum(count, 1)
    var = (np.where(m, (f - mean) ** 2, 0.0)).sum(axis=0) / np.maximum(count, 1)
    std = np.where(count == 2, np.abs(_two_diff(f, m)) / 2, np.where(count > 2, np.sqrt(var), 0.0))
    return ((1 - std) * MAX_NODE_SCORE).astype(np.int64)


def _two_diff(f: np.ndarray, m: np.ndarray) -> np.ndarray:
    """first minus second present fraction per column (used when exactly two are present)."""
    order = np.argsort(~m, axis=0, kind="stable")
    first = np.take_along_axis(f, order[:1], axis=0)[0]
    second = np.take_along_axis(f, order[1:2], axis=0)[0] if f.shape[0] > 1 else np.zeros(f.shape[1])
    return first - second
