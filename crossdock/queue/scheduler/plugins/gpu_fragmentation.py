"""GpuFragmentation: FGD packing score for GPU jobs, built on the measure in ``plugins.gpu_frag``.

For each candidate node it compares the node's fragmentation for the cycle's typical pods
before and after placing this worker (the device choice is the scheduler's: idle devices for
whole GPUs, the best-fit device for a share) and returns ``gpu_frag.fgd_score(Δ)``, Δ being the
frequency-weighted sum of the fragment rows' difference (exactly 0 where they are equal).

The typical pods are the cycle's pending demands (:func:`typical_of`). The per-node parts of the
measure are kept in a :class:`FragCache` that the inventory refreshes for each node it changes,
so scoring a job costs one update over the candidates, not a rebuild. Changed nodes are
recomputed lazily, in one batch, the next time a GPU job is scored.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from crossdock.queue.scheduler.framework import FEW_NODES, CycleState
from crossdock.queue.scheduler.inventory import Inventory
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


class FragCache:
    """Per-node fragmentation parts (``gpu_frag.frag_parts``), free shares largest first, and the
    rows of FGD's fragment per typical pod (``fragments``) and of the CPU-aware one
    (``cpu_fragments``, ``gpu_frag.both_fragments``), kept current."""

    def __init__(self, inv: Inventory, typical: gpu_frag.TypicalPods, node_model: np.ndarray):
        self.inv, self.typical = inv, typical
        self.access = gpu_frag.access_matrix(node_model, typical)
        left = self._left(np.arange(inv.n))
        self.total, self.cnt, self.below = gpu_frag.frag_parts(left, typical)
        self.sorted_left = gpu_frag.sorted_free(left)
        self.fragments, self.cpu_fragments = gpu_frag.both_fragments(
            self.total, self.cnt, self.below, self.sorted_left, inv.cpu_free, self.access, typical)
        self.fill_waste = typical.fill_waste.tolist()
        """``typical.fill_waste`` as a list, for scoring a few nodes."""
        self.need = np.maximum(typical.milli, 1).tolist()
        _, first, pod_set = np.unique(node_model, return_index=True, return_inverse=True)  # access goes by model
        self._pod_sets = [[(t, int(typical.num[t]), int(typical.cpu[t])) for t in np.flatnonzero(row).tolist()]
                          for row in self.access[first] & typical.uses_gpu]
        self._pod_set = pod_set.ravel().tolist()
        """Per node, its entry of ``_pod_sets`` (see :meth:`pods_of`)."""
        self._states: dict[tuple[int, ...], tuple[list[int], ...]] = {}
        """Node states settled this cycle, ``(*free shares largest first, free CPU, pod set)`` ->
        :meth:`_state_rows`: nodes of a kind pass through the same few states."""
        self.dirty: set[int] = set()
        inv.listeners.append(self.dirty.add)

    def _left(self, rows: np.ndarray) -> np.ndarray:
        inv = self.inv
        # take(): numpy copies rows of a 2-D array several times faster than with a[rows]
        return np.where(inv.dev_exists.take(rows, axis=0), np.maximum(inv.dev_free.take(rows, axis=0), 0), 0)

    def left_of(self, i: int) -> list[int]:
        """:meth:`_left` of one node, as a list."""
        inv = self.inv
        return [max(f, 0) if e else 0 for f, e in zip(inv.dev_free[i].tolist(), inv.dev_exists[i].tolist())]

    def pods_of(self, i: int) -> list[tuple[int, int, int]]:
        """``(t, num, cpu)`` per typical pod ``t`` asking for a GPU of node ``i``'s model, for
        ``gpu_frag.node_fragments``."""
        return self._pod_sets[self._pod_set[i]]

    def _state_rows(self, ordered: list[int], cpu_left: int, i: int) -> tuple[list[int], ...]:
        """``(prefix, cnt, below, FGD row, CPU-aware row)`` of node ``i`` with free shares
        ``ordered`` (largest first) and ``cpu_left`` free CPU, in Python ints
        (``gpu_frag.node_parts``, ``gpu_frag.node_fragments``), remembered per state."""
        key = (*ordered, cpu_left, self._pod_set[i])
        hit = self._states.get(key)
        if hit is None:
            prefix, cnt, below = gpu_frag.node_parts(ordered, self.need)
            hit = self._states[key] = (prefix, cnt, below, *gpu_frag.node_fragments(
                prefix[-1], cnt, below, prefix, cpu_left, self.pods_of(i)))
        return hit

    def weigh(self, rows: np.ndarray) -> np.ndarray:
        """The frequency-weighted sums of fragment rows (or of their differences): fragmentations."""
        return rows @ self.typical.freq

    def settle(self) -> None:
        """Recompute the rows of the nodes that changed since the last score, in one batch."""
        if not self.dirty:
            return
        rows = list(self.dirty)
        self.dirty.clear()
        if len(rows) <= FEW_NODES:
            self.settle_ints(rows)
        else:
            self.settle_arrays(np.array(rows, np.int64))

    def settle_arrays(self, rows: np.ndarray) -> None:
        left = self._left(rows)
        t, c, b = gpu_frag.frag_parts(left, self.typical)
        self.total[rows], self.cnt[rows], self.below[rows] = t, c, b
        self.sorted_left[rows] = ordered = gpu_frag.sorted_free(left)
        self.fragments[rows], self.cpu_fragments[rows] = gpu_frag.both_fragments(
            t, c, b, ordered, self.inv.cpu_free[rows], self.access.take(rows, axis=0), self.typical)

    def settle_ints(self, rows: list[int]) -> None:
        """:meth:`settle_arrays` node by node in Python ints: the same values."""
        for i in rows:
            self.sorted_left[i] = ordered = sorted(self.left_of(i), reverse=True)
            prefix, cnt, below, fgd, aware = self._state_rows(ordered, int(self.inv.cpu_free[i]), i)
            self.total[i], self.cnt[i], self.below[i] = prefix[-1], cnt, below
            self.fragments[i], self.cpu_fragments[i] = fgd, aware


@register
class GpuFragmentation:
    name = NAME

    def score(self, state: CycleState, req: Request, idx: np.ndarray) -> np.ndarray:
        cache: FragCache | None = state.extra.get("frag")
        if cache is None or not (req.gpus or req.gpu_share_milli) or len(idx) == 0:
            return np.zeros(len(idx), np.int64)
        cache.settle()
        typical = cache.typical
        total, cnt, below = cache.total[idx], cache.cnt.take(idx, axis=0), cache.below.take(idx, axis=0)
        if req.gpu_share_milli:
            left = cache._left(idx)
            chosen = np.where(left >= req.gpu_share_milli, left, FULL + 1).min(axis=1)
            after = gpu_frag.parts_after(total, cnt, below, typical, req.gpu_share_milli, 1, np.minimum(chosen, FULL))
        else:
            after = gpu_frag.parts_after(total, cnt, below, typical, FULL, req.gpus)
        cpu_left = state.inventory.cpu_free[idx] - req.cpu_milli
        after_rows = gpu_frag.fragments_from_parts(*after, cpu_left, cache.access.take(idx, axis=0), typical)
        return gpu_frag.fgd_score(cache.weigh(cache.fragments.take(idx, axis=0) - after_rows))
