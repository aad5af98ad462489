"""Placement policies: the FGD paper's baselines and crossdock's strategies.

Every policy scores the feasible nodes for one pod and returns the node with the highest score;
like kube-scheduler's ``selectHost`` a tie is broken uniformly at random. It also chooses the
GPUs (which GPU a share goes on matters for fragmentation).

Baselines, as configured in the FGD artifact (``experiments/run_scripts``, score weight 1000,
all default kube-scheduler scores disabled):

=============  =====================================================  ======================
policy         node score                                             GPU for a share
=============  =====================================================  ======================
``random``     a random feasible node                                 random fitting GPU
``dotprod``    ``int(100·(1 - (cpu_free·cpu_req/128000² +              tightest fitting GPU
               gpu_free·gpu_req/8000²)/2))`` (Tetris dot product)
``packing``    GPU packing: shared GPUs > free GPUs on a used node >  tightest fitting GPU
               free GPUs on an idle node (``GpuPackingScore``)
``bestfit``    ``int(100·(1 - Σ ½·(free - req)/max_spec))``            tightest fitting GPU
``fgd``        ``int(100·sigmoid(Δfrag/1000))``                       the GPU with the best
                                                                      score
=============  =====================================================  ======================

crossdock's strategies: ``crossdock`` (the default GPU policy, :func:`gpu_frag.crossdock_score`),
and the live scheduler's placements, scored with ``crossdock.queue.scheduler.scoring`` over CPU,
memory and whole GPUs: ``binpack`` (the crossdock score weighted 101, RequestedToCapacityRatio
with the bin-packing shape breaking its ties, as ``registry.PLACEMENT_SCORES`` defines it),
``most-requested`` (MostAllocated) and ``spread`` (LeastAllocated).
"""

from __future__ import annotations

from typing import Callable, Mapping

import numpy as np

from crossdock.sim.cluster import ClusterState, PodReq
from crossdock.sim.trace import MAX_GPUS_PER_NODE, MILLI
from crossdock.queue.scheduler.plugins import gpu_frag
from crossdock.queue.scheduler.registry import PLACEMENT_SCORES

MAX_SPEC_CPU = 128_000
MAX_SPEC_GPU = 8_000
Choice = tuple[int, tuple[int, ...]]
Policy = Callable[[ClusterState, PodReq, np.ndarray, np.random.Generator], Choice]

PAPER_POLICIES = ("random", "dotprod", "packing", "bestfit", "fgd")


def pick_max(scores: np.ndarray, cand: np.ndarray, state: ClusterState, rng: np.random.Generator) -> int:
    """Index (into ``cand``) of the highest score. Ties go to the node first in
    ``state.tie_rank`` (the FGD artifact's scheduler keeps the first best node of a node list
    shuffled once per seed) or, without a rank, uniformly at random (upstream selectHost)."""
    best = np.flatnonzero(scores == scores.max())
    if len(best) == 1:
        return int(best[0])
    if state.tie_rank is not None:
        return int(best[np.argmin(state.tie_rank[cand[best]])])
    return int(best[rng.integers(len(best))])


def _gpus_for(state: ClusterState, node: int, pod: PodReq, share_gpu: int | None = None) -> tuple[int, ...]:
    if pod.num == 0:
        return ()
    if pod.sharing:
        return (state.best_fit_gpu(node, pod.milli) if share_gpu is None else share_gpu,)
    return state.whole_gpus(node, pod.num)


# --- paper baselines ---------------------------------------------------------------------
def random_policy(state: ClusterState, pod: PodReq, cand: np.ndarray, rng: np.random.Generator) -> Choice:
    node = int(cand[rng.integers(len(cand))])
    if pod.sharing:
        fits = np.flatnonzero(state.gpu_left[node] >= pod.milli)
        return node, (int(fits[rng.integers(len(fits))]),)
    return node, _gpus_for(state, node, pod)


def dotprod_scores(state: ClusterState, pod: PodReq, cand: np.ndarray) -> np.ndarray:
    cpu_free = state.cpu_left[cand].astype(np.float64)
    gpu_free = state.gpu_left[cand].sum(axis=1).astype(np.float64)
    dot = (cpu_free / MAX_SPEC_CPU) * (pod.score_cpu / MAX_SPEC_CPU) + (gpu_free / MAX_SPEC_GPU) * (pod.gpu_total / MAX_SPEC_GPU)
    score = np.trunc(100 * (1 - dot / 2)).astype(np.int64)
    # the reference gives MinNodeScore when the node has less CPU free than the scored request
    return np.where(cpu_free >= pod.score_cpu, score, 0)


def dotprod_policy(state: ClusterState, pod: PodReq, cand: np.ndarray, rng: np.random.Generator) -> Choice:
    node = int(cand[pick_max(dotprod_scores(state, pod, cand), cand, state, rng)])
    return node, _gpus_for(state, node, pod)


def packing_scores(state: ClusterState, pod: PodReq, cand: np.ndarray) -> np.ndarray:
    """``GpuPackingScore``: 50..100 when the pod fits on partly used GPUs, 33..50 when it needs
    free GPUs of a used node, 0..33 on an idle node; CPU-only pods score 0 everywhere."""
    if pod.milli <= 0:
        return np.zeros(len(cand), np.int64)
    left = state.gpu_left[cand]
    count = state.gpu_count[cand]
    full = (left == MILLI).sum(axis=1)
    idle = full == count
    score = np.maximum(33 - full, full)  # case 3: the whole node is free
    if pod.sharing:
        fits = np.where(left >= pod.milli, left, MILLI + 1)
        tight = fits.min(axis=1)
        uses_full = tight == MILLI
        case1 = np.maximum(100 - (tight * 100 // MILLI) // 10, 50)
        case2 = np.full(len(cand), max(50 - 1, 33))
        busy = np.where(uses_full, case2, case1)
    else:
        busy = np.full(len(cand), max(50 - pod.num, 33))
    return np.where(idle, score, busy).astype(np.int64)


def packing_policy(state: ClusterState, pod: PodReq, cand: np.ndarray, rng: np.random.Generator) -> Choice:
    node = int(cand[pick_max(packing_scores(state, pod, cand), cand, state, rng)])
    return node, _gpus_for(state, node, pod)


def bestfit_scores(state: ClusterState, pod: PodReq, cand: np.ndarray) -> np.ndarray:
    cpu_free = state.cpu_left[cand].astype(np.float64)
    gpu_free = state.gpu_left[cand].sum(axis=1).astype(np.float64)
    waste = 0.5 * (cpu_free - pod.score_cpu) / MAX_SPEC_CPU + 0.5 * (gpu_free - pod.gpu_total) / MAX_SPEC_GPU
    return np.trunc((1 - waste) * 100).astype(np.int64)


def bestfit_policy(state: ClusterState, pod: PodReq, cand: np.ndarray, rng: np.random.Generator) -> Choice:
    node = int(cand[pick_max(bestfit_scores(state, pod, cand), cand, state, rng)])
    return node, _gpus_for(state, node, pod)


# --- fragmentation-aware -----------------------------------------------------------------
def share_candidates(state: ClusterState, cand: np.ndarray, milli: int) -> tuple[np.ndarray, np.ndarray]:
    """(row into ``cand``, GPU index) for every distinct free share that holds ``milli`` on each
    candidate node; of GPUs with the same free share only the lowest index is kept."""
    left = state.gpu_left[cand]
    ok = left >= milli
    for g in range(1, MAX_GPUS_PER_NODE):
        ok[:, g] &= ~(left[:, :g] == left[:, g:g + 1]).any(axis=1)
    return np.nonzero(ok)


def frag_options(state: ClusterState, pod: PodReq, cand: np.ndarray):
    """Every placement option of ``pod`` on the candidates and its FGD parts after placing:
    (row into cand, GPU index or -1, node, parts after = (total, cnt, below))."""
    if state.typical is None:
        raise ValueError("fragmentation-aware policies need the workload's typical pods")
    if pod.sharing:
        rows, gpus = share_candidates(state, cand, pod.milli)
        nodes = cand[rows]
        left = state.gpu_left[nodes, gpus]
    else:
        rows, gpus, nodes, left = np.arange(len(cand)), np.full(len(cand), -1), cand, None
    after = gpu_frag.parts_after(state.total[nodes], state.cnt[nodes], state.below[nodes], state.typical,
                                 pod.milli, pod.num, left)
    return rows, gpus, nodes, after


def frag_delta(state: ClusterState, pod: PodReq, cand: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Fragmentation decrease for each placement option: returns (row into cand, GPU index or
    -1, Δ = frag_before - frag_after in milli-GPU)."""
    rows, gpus, nodes, after = frag_options(state, pod, cand)
    frag_after = gpu_frag.frag_from_parts(*after, state.cpu_left[nodes] - pod.score_cpu, state.access[nodes],
                                          state.typical)
    return rows, gpus, state.frag[nodes] - frag_after


def _best_option(cand_len: int, rows: np.ndarray, gpus: np.ndarray, score: np.ndarray,
                 sharing: bool) -> tuple[np.ndarray, np.ndarray]:
    """Per candidate node: its best option's score and GPU (first GPU index on ties)."""
    if not sharing:
        return score, np.full(cand_len, -1)
    table = np.full((cand_len, MAX_GPUS_PER_NODE), -np.inf)
    table[rows, gpus] = score
    gpu = table.argmax(axis=1)
    return table[np.arange(cand_len), gpu], gpu


def fgd_policy(state: ClusterState, pod: PodReq, cand: np.ndarray, rng: np.random.Generator) -> Choice:
    rows, gpus, delta = frag_delta(state, pod, cand)
    node_score, node_gpu = _best_option(len(cand), rows, gpus, gpu_frag.fgd_score(delta).astype(np.float64), pod.sharing)
    k = pick_max(node_score, cand, state, rng)
    node = int(cand[k])
    return node, _gpus_for(state, node, pod, int(node_gpu[k]) if pod.sharing else None)


def crossdock_scores(state: ClusterState, pod: PodReq, cand: np.ndarray) -> np.ndarray:
    """The live ``CrossdockGpu`` plugin's score per candidate node, with its functions
    (:func:`gpu_frag.fragments_after`, :func:`gpu_frag.crossdock_node_scores`): a share is
    scored on the GPU it takes there, the best-fit one (:meth:`ClusterState.best_fit_gpu`)."""
    share = pod.milli if pod.sharing else 0
    after = gpu_frag.fragments_after(state.total[cand], state.cnt[cand], state.below[cand], state.sorted_left[cand],
                                     state.cpu_left[cand] - pod.score_cpu, state.access[cand], state.typical,
                                     0 if share else pod.num, share, state.gpu_left[cand] if share else None)
    in_use = (state.gpu_left[cand].sum(axis=1) < state.gpu_count[cand] * MILLI) | (state.cpu_left[cand] < state.cpu_cap[cand])
    cpu_aware = pod.num == 0 or not (state.pressure[state.model_ok(pod.spec)] > 0).any()
    return gpu_frag.crossdock_node_scores(state.fragments[cand], state.cpu_fragments[cand], after, in_use,
                                          state.typical, share, cpu_aware).astype(np.float64)


def crossdock_policy(state: ClusterState, pod: PodReq, cand: np.ndarray, rng: np.random.Generator) -> Choice:
    """crossdock's default GPU placement (:func:`gpu_frag.crossdock_score`)."""
    node = int(cand[pick_max(crossdock_scores(state, pod, cand), cand, state, rng)])
    return node, _gpus_for(state, node, pod)


# --- kube resource strategies (crossdock placements) ---------------------------------------
GPU_RESOURCE = "nvidia.com/gpu"
EQUAL_WEIGHTS = {"cpu": 1, "memory": 1, GPU_RESOURCE: 1}


def kube_scores(state: ClusterState, pod: PodReq, cand: np.ndarray, strategy: str,
                shape: list[tuple[int, int]] | None = None, weights: Mapping[str, int] | None = None) -> np.ndarray:
    """kube-scheduler's NodeResourcesFit scores over CPU, memory and whole GPUs, from the
    scheduling core (``crossdock.queue.scheduler.scoring``). A GPU counts as requested once any
    share of it is used; a share asks for no whole GPU. ``weights``: per resource, 1 where not given."""
    from crossdock.queue.scheduler.scoring import node_scores

    busy = state.gpu_count[cand] - (state.gpu_left[cand] == MILLI).sum(axis=1)
    alloc = {"cpu": state.cpu_cap[cand], "memory": state.nodes.mem[cand], GPU_RESOURCE: state.gpu_count[cand]}
    used = {"cpu": state.cpu_cap[cand] - state.cpu_left[cand], "memory": state.nodes.mem[cand] - state.mem_left[cand],
            GPU_RESOURCE: busy}
    request = {"cpu": pod.cpu, "memory": pod.mem, GPU_RESOURCE: pod.num if pod.milli >= MILLI else 0}
    return node_scores(strategy, alloc, used, request, {**EQUAL_WEIGHTS, **(weights or {})}, shape)


BINPACK_SHAPE = [(0, 0), (100, 10)]


CROSSDOCK_WEIGHT = PLACEMENT_SCORES["binpack"][gpu_frag.CROSSDOCK_PLUGIN]
"""The live ``binpack`` profile's weight on the crossdock GPU score: one step of it outweighs
any resource score (0–100), so those only break its ties."""


def _kube_policy(strategy: str, with_crossdock: bool = False, weights: Mapping[str, int] | None = None) -> Policy:
    def policy(state: ClusterState, pod: PodReq, cand: np.ndarray, rng: np.random.Generator) -> Choice:
        shape = BINPACK_SHAPE if strategy == "requested_to_capacity_ratio" else None
        score = kube_scores(state, pod, cand, strategy, shape, weights).astype(np.float64)
        if with_crossdock:
            score = score + CROSSDOCK_WEIGHT * crossdock_scores(state, pod, cand)
        node = int(cand[pick_max(score, cand, state, rng)])
        return node, _gpus_for(state, node, pod)
    return policy


KUBE_STRATEGIES = {"binpack": ("requested_to_capacity_ratio", True), "most-requested": ("most_allocated", False),
                   "spread": ("least_allocated", False)}
"""The placements that score resources: (kube-scheduler strategy, with the crossdock GPU score)."""
POLICIES: dict[str, Policy] = {
    "random": random_policy,
    "dotprod": dotprod_policy,
    "packing": packing_policy,
    "bestfit": bestfit_policy,
    "fgd": fgd_policy,
    "crossdock": crossdock_policy,
    **{name: _kube_policy(*how) for name, how in KUBE_STRATEGIES.items()},
}
CROSSDOCK_POLICIES = ("crossdock", "binpack", "most-requested", "spread")


def weight_errors(name: str, weights: Mapping[str, int]) -> list[str]:
    """What is wrong with resource ``weights`` for the placement ``name`` (a live queue's rules)."""
    from crossdock.queue.scheduler.scoring import validate_weights

    if name not in KUBE_STRATEGIES:
        return [f"plugin_weights: {name!r} scores no resources; resource weights apply to {', '.join(KUBE_STRATEGIES)}"]
    errors = [f"plugin_weights.{k}: unknown resource; choose among {', '.join(EQUAL_WEIGHTS)}"
              for k in weights if k not in EQUAL_WEIGHTS]
    try:
        validate_weights({**EQUAL_WEIGHTS, **weights}, KUBE_STRATEGIES[name][0])
    except ValueError as exc:
        errors.append(f"plugin_{exc}")
    return errors


def get_policy(name: str, weights: Mapping[str, int] | None = None) -> Policy:
    """The policy ``name``; with resource ``weights``, a kube strategy weighted so."""
    if weights:
        return _kube_policy(*KUBE_STRATEGIES[name], weights=weights)
    try:
        return POLICIES[name]
    except KeyError:
        raise ValueError(f"unknown policy {name!r}; choose one of {', '.join(POLICIES)}") from None
