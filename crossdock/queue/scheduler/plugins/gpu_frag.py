"""GPU fragmentation: the measure and the node scores built on it, as pure numpy functions.

Fragmentation follows "Beware of Fragmentation: Scheduling GPU-Sharing Workloads with
Fragmentation Gradient Descent" (USENIX ATC'23) and its simulator
(hkust-adsl/kubernetes-scheduler-simulator, ``pkg/utils/frag.go``):

- The *typical pods* of a workload are its most frequent pod shapes (CPU request, GPU milli per
  GPU, GPU count, allowed GPU models) covering 95 % of its pods, with their frequencies.
- The fragmentation of a node w.r.t. one typical pod ``t`` is the unallocated GPU capacity that
  ``t`` could not use: all of it when ``t`` cannot run on the node (it asks for no GPU, lacks
  CPU, GPUs or the model), else the capacity of the GPUs whose free share is below ``t``'s
  per-GPU request.
- A node's fragmentation is the frequency-weighted sum over typical pods; the cluster's is the
  sum over nodes (in milli-GPU).

The scores compare a node before and after a candidate placement (``Δ = frag_before -
frag_after``, higher is better; the live plugins weigh the difference of the two
:func:`both_fragments` rows, so a node that a placement leaves as it was gets exactly 0 whatever
other nodes share the call, on which the last bit of a float product can depend):

- :func:`fgd_score` is the FGD authors' integer score, ``int(100·sigmoid(Δ/1000))``.
- :func:`crossdock_score` is crossdock's default GPU placement score: for a GPU share first how
  well its GPU's remnant can still be filled (:func:`fill_waste`), then FGD combined with a
  CPU-aware fragmentation (:func:`cpu_aware_frag`) where no model-constrained demand competes,
  then a packing tier among the ties (see its docstring).

Inputs are arrays over nodes (or over candidate placements), so scoring a job against thousands
of nodes is a handful of vectorized operations. Only the standard library and numpy are used.

Public API::

    typical_pods(cpu, gpu_milli, num_gpu, spec, popularity=0.95) -> TypicalPods
    access_matrix(model, typical) -> bool (N, T)          # may node n run typical pod t's model?
    frag_parts(gpu_left, typical) -> (total, cnt, below)   # per-node caches, see FragParts
    fragments_from_parts(total, cnt, below, cpu_left, access, typical) -> int (N, T)
    frag_from_parts(total, cnt, below, cpu_left, access, typical) -> float (N,)
    node_frag(gpu_left, cpu_left, model, typical) -> float (N,)
    parts_after(total, cnt, below, typical, milli, num, left=None) -> (total', cnt', below')
    fgd_score(delta) -> int array
    sorted_free(gpu_left) -> int (N, G)                      # free milli per GPU, largest first
    cpu_aware_frag(sorted_left, cpu_left, access, typical) -> float (N,)
    both_fragments(total, cnt, below, sorted_left, cpu_left, access, typical) -> int (N, T) each
    node_parts(ordered, need) -> (prefix, cnt, below)             # one node, Python ints
    node_parts_after(total, cnt, below, need, milli, num, left=0) -> (total', cnt', below')
    node_fragments(total, cnt, below, prefix, cpu_left, pods) -> (FGD row, CPU-aware row)
    model_pressure(access, typical) -> float (N,)
    packing_tier(node_in_use, gpu_shared=None) -> int array
    fill_sizes(typical, min_share=FILL_SHARE) -> tuple of ints   # a whole GPU and the common shares
    fill_waste(sizes) -> int (MILLI + 1,)                    # least remainder of each free share
    crossdock_score(delta, tier, cpu_aware_delta=None, fill_increase=None) -> int array
    fragments_after(total, cnt, below, sorted_left, cpu_left, access, typical, gpus=0, share=0, left=None)
        -> (FGD rows, CPU-aware rows, chosen share or None)   # after one worker lands
    crossdock_node_scores(fragments, cpu_fragments, after, in_use, typical, share=0, cpu_aware=True)
        -> int array   # the CrossdockGpu plugin's score (crossdock.sim calls it too)
    fgd_score_of(delta) -> int; crossdock_scores_of(...) -> list of ints   # the same, a few placements
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass
from functools import cached_property, lru_cache
from itertools import accumulate
from typing import Sequence

import numpy as np

NAME = "GpuFragmentation"
MILLI = 1000
DEFAULT_CPU_MILLI = 100
"""kube-scheduler counts a container without a CPU request as 100 milli-CPU when scoring."""
ANY_MODEL = (1 << 62) - 1


@dataclass(frozen=True)
class TypicalPods:
    """Pod shapes of a workload with their frequencies (``freq`` sums to 1).

    ``spec`` is a bit mask over the cluster's GPU model list (``ANY_MODEL``: any model)."""

    cpu: np.ndarray
    milli: np.ndarray
    num: np.ndarray
    spec: np.ndarray
    freq: np.ndarray

    def __len__(self) -> int:
        return len(self.freq)

    @property
    def uses_gpu(self) -> np.ndarray:
        return self.milli > 0

    @cached_property
    def fill_waste(self) -> np.ndarray:
        """:func:`fill_waste` of this workload's :func:`fill_sizes`."""
        return fill_waste(fill_sizes(self))


def typical_pods(cpu: np.ndarray, gpu_milli: np.ndarray, num_gpu: np.ndarray, spec: np.ndarray,
                 popularity: float = 0.95) -> TypicalPods:
    """The most frequent pod shapes covering ``popularity`` of the pods, renormalized.

    Shapes are ranked by count, ties by the larger (CPU, GPU milli, GPU count, model mask) as in
    the reference simulator; CPU requests of 0 count as 100 milli-CPU.
    """
    cpu = np.where(np.asarray(cpu) <= 0, DEFAULT_CPU_MILLI, np.asarray(cpu)).astype(np.int64)
    num = np.asarray(num_gpu, np.int64)
    milli = np.where(num > 0, np.asarray(gpu_milli, np.int64), 0)
    spec = np.where(num > 0, np.asarray(spec, np.int64), ANY_MODEL)
    if len(cpu) == 0:
        raise ValueError("typical_pods: the workload has no pods")
    keys = np.stack([cpu, milli, num, spec], axis=1)
    shapes, counts = np.unique(keys, axis=0, return_counts=True)
    order = sorted(range(len(shapes)), key=lambda i: (counts[i], *shapes[i].tolist()), reverse=True)
    total = counts.sum()
    chosen, cum = [], 0
    for i in order:
        if cum >= popularity * total:
            break
        chosen.append(i)
        cum += counts[i]
    sel = shapes[chosen]
    freq = counts[chosen].astype(np.float64)
    return TypicalPods(sel[:, 0].copy(), sel[:, 1].copy(), sel[:, 2].copy(), sel[:, 3].copy(), freq / freq.sum())


def access_matrix(model: np.ndarray, typical: TypicalPods) -> np.ndarray:
    """(N, T) booleans: node n has GPUs of a model typical pod t accepts."""
    model = np.asarray(model, np.int64)
    has = model >= 0
    bits = (typical.spec[None, :] >> np.where(has, model, 0)[:, None]) & 1
    return has[:, None] & (bits == 1)


def frag_parts(gpu_left: np.ndarray, typical: TypicalPods) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-node caches the fragmentation is computed from.

    ``gpu_left`` is (N, G) free milli-GPU per GPU (absent GPUs hold 0). Returns ``total`` (N,)
    free milli-GPU, ``cnt`` (N, T) GPUs with at least typical pod t's per-GPU request free, and
    ``below`` (N, T) free milli-GPU on the other GPUs.
    """
    left = np.asarray(gpu_left, np.int64)
    total = left.sum(axis=1)
    ge = left[:, None, :] >= np.maximum(typical.milli, 1)[None, :, None]
    cnt = ge.sum(axis=2)
    below = total[:, None] - (left[:, None, :] * ge).sum(axis=2)
    return total, cnt, below


def fragments_from_parts(total: np.ndarray, cnt: np.ndarray, below: np.ndarray, cpu_left: np.ndarray,
                         access: np.ndarray, typical: TypicalPods) -> np.ndarray:
    """(N, T) ints: per node (or candidate state) and typical pod, the free milli-GPU counted as
    fragment, from the node's caches (before the frequency weighting)."""
    fits = (typical.uses_gpu[None, :] & access & (cnt >= typical.num[None, :])
            & (np.asarray(cpu_left)[:, None] >= typical.cpu[None, :]))
    return np.where(fits, below, np.asarray(total)[:, None])


def frag_from_parts(total: np.ndarray, cnt: np.ndarray, below: np.ndarray, cpu_left: np.ndarray,
                    access: np.ndarray, typical: TypicalPods) -> np.ndarray:
    """Fragmentation (milli-GPU, float) of each node (or candidate state) from its caches."""
    return fragments_from_parts(total, cnt, below, cpu_left, access, typical) @ typical.freq


def node_frag(gpu_left: np.ndarray, cpu_left: np.ndarray, model: np.ndarray, typical: TypicalPods) -> np.ndarray:
    """Fragmentation of each node (milli-GPU)."""
    total, cnt, below = frag_parts(gpu_left, typical)
    return frag_from_parts(total, cnt, below, cpu_left, access_matrix(model, typical), typical)


def parts_after(total: np.ndarray, cnt: np.ndarray, below: np.ndarray, typical: TypicalPods,
                milli: int, num: int, left: np.ndarray | None = None
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The caches after placing a pod, without rebuilding them from the GPU list.

    - ``num == 0``: a CPU-only pod leaves the GPU caches as they are.
    - whole GPUs (``milli == 1000``): ``num`` fully free GPUs become fully used.
    - a GPU share (``num == 1``, ``milli < 1000``) taken from a GPU with ``left`` free (one
      candidate per row): that GPU drops to ``left - milli``.
    """
    if num == 0:
        return total, cnt, below
    if milli >= MILLI:
        return total - MILLI * num, cnt - num, below
    if left is None:
        raise ValueError("parts_after: a GPU share needs the free milli-GPU of the chosen GPU (left)")
    left = np.asarray(left, np.int64)[:, None]
    need = np.maximum(typical.milli, 1)[None, :]
    was = left >= need
    now = (left - milli) >= need
    crossed = was & ~now
    return total - milli, cnt - crossed, below - milli + was * left - now * (left - milli)


def fgd_score(delta: np.ndarray) -> np.ndarray:
    """The FGD authors' score: ``int64(sigmoid(Δ/1000)·100)``, 0..100 (Go truncation; the
    value is never negative, so the cast truncates)."""
    return (1.0 / (1.0 + np.exp(-(np.asarray(delta, np.float64) / 1000.0))) * 100).astype(np.int64)


@lru_cache(maxsize=1 << 14)
def fgd_score_of(delta: float) -> int:
    """:func:`fgd_score` of one Δ, remembered: numpy's own sigmoid (``math.exp`` may differ in the
    last bit), computed once per value; a cycle's Δ values repeat."""
    return int(fgd_score(np.array([delta]))[0])


FILL_SHARE = 0.03
"""A GPU share size counts as a filler when it makes up at least this fraction of the typical
pods' GPU shares (by frequency)."""


def fill_sizes(typical: TypicalPods, min_share: float = FILL_SHARE) -> tuple[int, ...]:
    """The per-GPU sizes that fill a GPU's free share: a whole GPU, and each GPU share size
    (one-GPU typical pods asking less than a GPU) making up at least ``min_share`` of the typical
    shares' frequency. Rare sizes are left out on purpose: the trace's 160-milli pods are too few
    to fill the 190-milli remnants its 810-milli pods leave, and counting them would hide those
    remnants."""
    share = (typical.num == 1) & (typical.milli > 0) & (typical.milli < MILLI)
    sizes = typical.milli[share]
    freq = typical.freq[share]
    total = freq.sum()
    kept = {int(m) for m in np.unique(sizes) if freq[sizes == m].sum() >= min_share * total}
    return tuple(sorted(kept | {MILLI}))


def fill_waste(sizes: Sequence[int]) -> np.ndarray:
    """(MILLI + 1,) ints: ``w[g]`` is the least a free share of ``g`` milli-GPU can be brought
    down to by filling it with any number of pods of ``sizes`` (an unbounded knapsack's
    remainder). ``w[g] = 0`` when sizes add up to exactly ``g``; ``w[g] = g`` when none fits."""
    w = list(range(MILLI + 1))  # Python ints: numpy's per-element access would cost more than the loop
    steps = [s for s in sorted(set(sizes)) if 0 < s <= MILLI]
    for g in range(1, MILLI + 1):
        for s in steps:
            if s > g:
                break
            if w[g - s] < w[g]:
                w[g] = w[g - s]
    return np.array(w, np.int64)


def sorted_free(gpu_left: np.ndarray) -> np.ndarray:
    """Free milli-GPU of each node's GPUs, largest first (absent GPUs hold 0)."""
    return -np.sort(-np.asarray(gpu_left, np.int64), axis=1)


def cpu_aware_frag(sorted_left: np.ndarray, cpu_left: np.ndarray, access: np.ndarray,
                   typical: TypicalPods) -> np.ndarray:
    """Fragmentation (milli-GPU) that also counts the GPUs a node's free CPU cannot feed.

    FGD's measure calls every GPU with room for typical pod ``t`` usable as soon as one ``t``
    fits the node's CPU. On GPU-dense nodes the CPU runs out first: a node with 3 free GPUs and
    12 free cores can host one 11-core ``t``, so two of those GPUs are stranded. Here the
    GPUs usable by ``t`` are the largest ``min(cnt_t, ⌊cpu_left / cpu_t⌋ · num_t)`` of those
    with room for it (none when ``t`` does not fit at all), and the rest of the free GPU
    capacity is ``t``'s fragment; weighted by frequency and summed as in FGD.

    ``sorted_left`` is :func:`sorted_free` of the nodes (or candidate states). Callers that
    also need FGD's measure use :func:`both_fragments`, which shares the fit test.
    """
    left = np.asarray(sorted_left, np.int64)
    _, cnt, _ = frag_parts(left, typical)
    return both_fragments(left.sum(axis=1), cnt, None, left, cpu_left, access, typical)[1] @ typical.freq


def both_fragments(total: np.ndarray, cnt: np.ndarray, below: np.ndarray | None, sorted_left: np.ndarray,
                   cpu_left: np.ndarray, access: np.ndarray, typical: TypicalPods
                   ) -> tuple[np.ndarray | None, np.ndarray]:
    """FGD's fragment rows (:func:`fragments_from_parts`; None without ``below``) and
    :func:`cpu_aware_frag`'s, before the frequency weighting, sharing their fit test: (N, T)
    ints per measure, the free milli-GPU each counts as fragment per typical pod."""
    cpu = np.asarray(cpu_left, np.int64)[:, None]
    fits = typical.uses_gpu[None, :] & access & (cnt >= typical.num[None, :]) & (cpu >= typical.cpu[None, :])
    fgd = None if below is None else np.where(fits, below, total[:, None])
    prefix = np.zeros((len(sorted_left), sorted_left.shape[1] + 1), np.int64)
    np.cumsum(sorted_left, axis=1, out=prefix[:, 1:])
    usable_gpus = np.where(fits, np.minimum(cnt, (cpu // typical.cpu[None, :]) * typical.num[None, :]), 0)
    usable = prefix[np.arange(len(prefix))[:, None], usable_gpus]
    return fgd, np.asarray(total)[:, None] - usable


def node_parts(ordered: Sequence[int], need: Sequence[int]) -> tuple[list[int], list[int], list[int]]:
    """One node's :func:`frag_parts` in Python ints, from its :func:`sorted_free` row: the row's
    prefix sums (``prefix[-1]`` is ``total``), ``cnt`` and ``below``. ``need`` is
    ``max(typical.milli, 1)``. For scoring one node, where numpy's per-call cost dominates."""
    prefix = [0, *accumulate(ordered)]
    descending = [-x for x in ordered]
    cnt = [bisect_right(descending, -x) for x in need]  # the GPUs with x free lead the row
    return prefix, cnt, [prefix[-1] - prefix[c] for c in cnt]


def node_parts_after(total: int, cnt: list[int], below: list[int], need: Sequence[int], milli: int, num: int,
                     left: int = 0) -> tuple[int, list[int], list[int]]:
    """:func:`parts_after` for one node in Python ints (``left``: the chosen GPU's free share)."""
    if num == 0:
        return total, cnt, below
    if milli >= MILLI:
        return total - MILLI * num, [c - num for c in cnt], below
    after = left - milli  # a typical pod needing x fits that GPU still (x <= after), no longer, or never (x > left)
    return (total - milli, [c - 1 if after < x <= left else c for c, x in zip(cnt, need)],
            [b if x <= after else b - milli + left if x <= left else b - milli for b, x in zip(below, need)])


def node_fragments(total: int, cnt: Sequence[int], below: Sequence[int], prefix: Sequence[int], cpu_left: int,
                   pods: Sequence[tuple[int, int, int]]) -> tuple[list[int], list[int]]:
    """One node's (or candidate state's) rows of :func:`both_fragments`, in Python ints: per
    typical pod, the free milli-GPU FGD counts as fragment and the part the CPU-aware measure
    counts. ``prefix`` holds the prefix sums of its :func:`sorted_free` row; ``pods`` is
    ``(t, num, cpu)`` for each typical pod ``t`` that asks for a GPU of a model the node has (for
    the others, all the free capacity is fragment)."""
    fgd = [total] * len(cnt)
    aware = fgd.copy()
    for t, num, cpu in pods:
        c = cnt[t]
        if c >= num and cpu_left >= cpu:
            fgd[t] = below[t]
            fed = cpu_left // cpu * num  # min() costs more than the test
            aware[t] = total - prefix[c if c < fed else fed]
    return fgd, aware


def model_pressure(access: np.ndarray, typical: TypicalPods) -> np.ndarray:
    """Per node, the frequency of the typical pods that ask for a GPU model subset and may use
    the node's model: 0 where no model-constrained demand competes for the node."""
    constrained = typical.uses_gpu & (typical.spec != ANY_MODEL)
    return np.asarray(access, np.float64) @ (typical.freq * constrained)


def packing_tier(node_in_use: np.ndarray, gpu_shared: np.ndarray | None = None) -> np.ndarray:
    """0..3: +1 when the node already runs something, +2 when a GPU share lands on a GPU that
    is already shared. Used only to order placements FGD scores the same."""
    tier = np.asarray(node_in_use, np.int64).copy()
    if gpu_shared is not None:
        tier += 2 * np.asarray(gpu_shared, np.int64)
    return tier


def crossdock_score(delta: np.ndarray, tier: np.ndarray, cpu_aware_delta: np.ndarray | None = None,
                    fill_increase: np.ndarray | None = None) -> np.ndarray:
    """crossdock's default GPU placement score (higher is better).

    With ``cpu_aware_delta`` (the decrease of :func:`cpu_aware_frag`), both measures must
    agree: ``min(F, C)·10⁴ + (F + C)·10 + tier`` with ``F``, ``C`` their :func:`fgd_score`.
    A placement FGD likes but that strands GPUs without CPU (or the reverse) loses to one both
    accept. Without it, ``F·10 + tier``. The caller passes it for CPU-only jobs (their FGD Δ
    is 0 on almost every node, so FGD alone cannot steer them off GPU-dense nodes) and for GPU
    jobs when no model-constrained demand competes for the models they accept
    (:func:`model_pressure` is 0 on all those nodes): where pods that accept only some models
    compete, FGD's own model term decides, as measured on the GPU-model-constrained traces.

    The :func:`packing_tier` orders what is left tied ("joins a shared GPU, then a node in
    use"), which packs on purpose and keeps idle nodes whole for multi-GPU jobs; ties left are
    the caller's (a fixed node order).

    For a GPU share, ``fill_increase`` comes first: how much the :func:`fill_waste` of the GPU
    it lands on grows (``w[free - share] - w[free]``, -1000..1000), least first, as
    ``(1000 - fill_increase)·10⁷`` on top of the rest (which stays below 10⁷). FGD asks whether
    the next typical pod fits a remnant; this asks whether the workload's common shares can
    still fill it to the brim: a 320-milli share goes into a GPU with 350 free (30 left, as a
    650-milli pod would leave) before one with 530 free (210 left, which no common share fits).
    """
    tier = np.asarray(tier, np.int64)
    if cpu_aware_delta is None:
        score = fgd_score(delta) * 10 + tier
    else:
        f, c = fgd_score(np.stack([delta, cpu_aware_delta]))
        score = np.minimum(f, c) * 10_000 + (f + c) * 10 + tier
    if fill_increase is not None:
        score = score + (MILLI - np.asarray(fill_increase, np.int64)) * 10_000_000
    return score


def crossdock_scores_of(delta: Sequence[float], tier: Sequence[int], cpu_aware_delta: Sequence[float] | None = None,
                        fill_increase: Sequence[int] | None = None) -> list[int]:
    """:func:`crossdock_score` of a few placements in Python ints (the same values), without
    numpy's per-call cost."""
    f = [fgd_score_of(d) for d in delta]
    if cpu_aware_delta is None:
        score = [x * 10 + t for x, t in zip(f, tier)]
    else:
        c = [fgd_score_of(d) for d in cpu_aware_delta]
        score = [min(x, y) * 10_000 + (x + y) * 10 + t for x, y, t in zip(f, c, tier)]
    if fill_increase is not None:
        score = [s + (MILLI - x) * 10_000_000 for s, x in zip(score, fill_increase)]
    return score


def fragments_after(total: np.ndarray, cnt: np.ndarray, below: np.ndarray, sorted_left: np.ndarray,
                    cpu_left: np.ndarray, access: np.ndarray, typical: TypicalPods, gpus: int = 0, share: int = 0,
                    left: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """Both measures' fragment rows (:func:`both_fragments`) of each node after one worker lands
    where the scheduler puts it: ``gpus`` whole GPUs on idle devices, or a GPU ``share`` on the
    best-fit device of ``left`` ((N, G) free milli-GPU per device; lowest index on ties).
    ``cpu_left`` is the nodes' free CPU after placing. Returns (FGD rows, CPU-aware rows, for a
    share the chosen device's free share before it lands, else None)."""
    chosen = None
    if share:
        rows = np.arange(len(total))
        pick = np.where(left >= share, left, MILLI + 1).argmin(axis=1)
        chosen = left[rows, pick]
        total, cnt, below = parts_after(total, cnt, below, typical, share, 1, chosen)
        left = left.copy()
        left[rows, pick] -= share
        sorted_left = sorted_free(left)
    elif gpus:  # whole GPUs leave the idle devices, the largest entries
        total, cnt, below = parts_after(total, cnt, below, typical, MILLI, gpus)
        sorted_left = np.concatenate([sorted_left[:, gpus:], np.zeros((len(total), gpus), np.int64)], axis=1)
    fgd, aware = both_fragments(total, cnt, below, sorted_left, cpu_left, access, typical)
    return fgd, aware, chosen


def crossdock_node_scores(fragments: np.ndarray, cpu_fragments: np.ndarray,
                          after: tuple[np.ndarray, np.ndarray, np.ndarray | None], in_use: np.ndarray,
                          typical: TypicalPods, share: int = 0, cpu_aware: bool = True) -> np.ndarray:
    """:func:`crossdock_score` of placing one worker on each node: ``fragments`` and
    ``cpu_fragments`` are the nodes' :func:`both_fragments` rows now, ``after`` is
    :func:`fragments_after`, ``in_use`` whether each node runs something. Δ weighs the rows'
    difference, so a node the placement leaves as it was scores exactly Δ = 0. ``cpu_aware``:
    whether the CPU-aware term counts (see :func:`crossdock_score`)."""
    fgd_after, aware_after, chosen = after
    delta = (fragments - fgd_after) @ typical.freq
    aware = (cpu_fragments - aware_after) @ typical.freq if cpu_aware else None
    shared = fill = None
    if chosen is not None:
        waste = typical.fill_waste
        shared, fill = chosen < MILLI, waste[chosen - share] - waste[chosen]
    return crossdock_score(delta, packing_tier(in_use, shared), aware, fill)


CROSSDOCK_PLUGIN = "CrossdockGpu"


class ModelCompetition:
    """Per cycle: whether model-constrained demand (:func:`model_pressure` > 0) may use a node
    of the models a job accepts, cached per model set."""

    def __init__(self, frag):
        self.frag_cache = frag
        pressed = model_pressure(frag.access, frag.typical) > 0
        self.pressed = np.bincount(frag.inv.model_id, pressed, len(frag.inv.model_names)) > 0
        """Per model (``Inventory.model_names``): whether any node of the model is under pressure."""
        self._hits: dict[frozenset[str], bool] = {}

    def competed(self, inv, models: frozenset[str]) -> bool:
        hit = self._hits.get(models)
        if hit is None:
            hit = self._hits[models] = any(self.pressed[k] for k, m in enumerate(inv.model_names)
                                           if m and (not models or m in models))
        return hit


def _register_plugin() -> None:
    """Register :func:`crossdock_score` as the score plugin ``CrossdockGpu`` in the live
    scheduler's registry (``crossdock.queue.scheduler.registry``).

    It reads the cycle's fragmentation cache (``state.extra["frag"]``, a ``FragCache`` built for
    the cycle's typical pods, which keeps both measures per node) and places devices as the
    scheduler does (whole GPUs on idle devices, a share on its best-fit device). It scores
    CPU-only jobs too: on GPU nodes their CPU decides whether GPUs stay usable. Values run
    0..1,002,003, and up to 2·10¹⁰ for a share (:func:`crossdock_score`); the ``binpack``
    profile weights it so that resource scores only break its ties.
    """
    from crossdock.queue.scheduler.framework import FEW_NODES
    from crossdock.queue.scheduler.registry import register

    class CrossdockGpu:
        name = CROSSDOCK_PLUGIN

        def score(self, state, req, idx: np.ndarray) -> np.ndarray:
            cache = state.extra.get("frag")
            if cache is None or len(idx) == 0:
                return np.zeros(len(idx), np.int64)
            cache.settle()
            if len(idx) <= FEW_NODES:
                return np.array(self.score_ints(state, req, cache, idx), np.int64)
            inv = state.inventory
            in_use = (inv.gpu_free[idx] < inv.gpu_total[idx]) | (inv.cpu_used[idx] > 0)
            return crossdock_node_scores(cache.fragments.take(idx, axis=0), cache.cpu_fragments.take(idx, axis=0),
                                         self.after_arrays(state, req, cache, idx), in_use, cache.typical,
                                         req.gpu_share_milli, self.cpu_aware(state, req, cache))

        def score_ints(self, state, req, cache, idx: np.ndarray) -> list[int]:
            """:meth:`score` of a few nodes in Python ints, but for the weighing (numpy's dot
            products, so that a node's Δ is the same float in either path)."""
            fgd_after, aware_after, chosen = self.after_ints(state, req, cache, idx)
            delta = cache.weigh(cache.fragments.take(idx, axis=0) - fgd_after).tolist()
            cpu_aware = (cache.weigh(cache.cpu_fragments.take(idx, axis=0) - aware_after).tolist()
                         if self.cpu_aware(state, req, cache) else None)
            inv = state.inventory
            tier = [int(inv.gpu_free[i] < inv.gpu_total[i] or inv.cpu_used[i] > 0) for i in idx.tolist()]
            fill = None
            if chosen is not None:
                waste, share = cache.fill_waste, req.gpu_share_milli
                tier = [t + 2 * (c < MILLI) for t, c in zip(tier, chosen)]
                fill = [waste[c - share] - waste[c] for c in chosen]
            return crossdock_scores_of(delta, tier, cpu_aware, fill)

        @staticmethod
        def after_arrays(state, req, cache, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
            """:func:`fragments_after` of the nodes ``idx`` from the cycle's cache."""
            # take(): numpy copies rows of a 2-D array several times faster than with a[idx]
            return fragments_after(cache.total[idx], cache.cnt.take(idx, axis=0), cache.below.take(idx, axis=0),
                                   cache.sorted_left.take(idx, axis=0), state.inventory.cpu_free[idx] - req.cpu_milli,
                                   cache.access.take(idx, axis=0), cache.typical, req.gpus,
                                   req.gpu_share_milli, cache._left(idx) if req.gpu_share_milli else None)

        @staticmethod
        def after_ints(state, req, cache, idx: np.ndarray) -> tuple[list[list[int]], list[list[int]], list[int] | None]:
            """:meth:`after_arrays` node by node in Python ints (lists): the same values, without
            numpy's per-call cost (most calls score one to a few nodes)."""
            cpu_free, share = state.inventory.cpu_free, req.gpu_share_milli
            fgd, aware, chosen = [], [], []
            for i in idx.tolist():
                total, cnt, below = int(cache.total[i]), cache.cnt[i].tolist(), cache.below[i].tolist()
                ordered = cache.sorted_left[i].tolist()
                if share:
                    left = cache.left_of(i)
                    pick = min(range(len(left)), key=lambda c: left[c] if left[c] >= share else MILLI + 1)
                    total, cnt, below = node_parts_after(total, cnt, below, cache.need, share, 1, left[pick])
                    chosen.append(left[pick])
                    left[pick] -= share
                    ordered = sorted(left, reverse=True)
                elif req.gpus:
                    total, cnt, below = node_parts_after(total, cnt, below, cache.need, MILLI, req.gpus)
                    ordered = ordered[req.gpus:] + [0] * req.gpus
                f, a = node_fragments(total, cnt, below, [0, *accumulate(ordered)], int(cpu_free[i]) - req.cpu_milli,
                                      cache.pods_of(i))
                fgd.append(f)
                aware.append(a)
            return fgd, aware, chosen if share else None

        @staticmethod
        def cpu_aware(state, req, cache) -> bool:
            """Whether the CPU-aware term counts: always for CPU-only jobs; for GPU jobs when no
            model-constrained demand competes for the models they accept."""
            if not (req.gpus or req.gpu_share_milli):
                return True
            competition = state.extra.get("model_competition")
            if competition is None or competition.frag_cache is not cache:
                competition = state.extra["model_competition"] = ModelCompetition(cache)
            return not competition.competed(state.inventory, req.models)

    register(CrossdockGpu)


_register_plugin()
