"""The simulated cluster: free CPU, memory and per-GPU shares of every node as numpy arrays,
with the fragmentation caches (FGD's and the CPU-aware one) kept current one node at a time.

Filtering follows the reference simulator: a pod fits a node when its CPU and memory requests
fit (kube's NodeResourcesFit) and, for GPU pods, the node has a GPU model the pod accepts and
``num_gpu`` GPUs each with ``gpu_milli`` free (the Open-Gpu-Share filter).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from crossdock.sim.trace import MAX_GPUS_PER_NODE, MILLI, NodeTable, PodTable
from crossdock.queue.scheduler.plugins import gpu_frag
from crossdock.queue.scheduler.plugins.gpu_frag import TypicalPods


@dataclass(frozen=True, slots=True)
class PodReq:
    """One pod's request, as the placement code needs it."""

    cpu: int
    mem: int
    num: int
    milli: int
    spec: int
    index: int = -1

    @property
    def sharing(self) -> bool:
        return self.num == 1 and 0 < self.milli < MILLI

    @property
    def gpu_total(self) -> int:
        return self.num * self.milli

    @property
    def score_cpu(self) -> int:
        """CPU as kube-scheduler scores it (a zero request counts as 100 milli)."""
        return self.cpu if self.cpu > 0 else gpu_frag.DEFAULT_CPU_MILLI


def pod_req(pods: PodTable, i: int) -> PodReq:
    return PodReq(int(pods.cpu[i]), int(pods.mem[i]), int(pods.num_gpu[i]), int(pods.gpu_milli[i]),
                  int(pods.spec[i]), i)


class ClusterState:
    """Mutable free capacity of every node. ``gpu_left[n, g]`` is the free milli-GPU of GPU g
    of node n (0 for GPUs the node does not have)."""

    def __init__(self, nodes: NodeTable, typical: TypicalPods | None = None):
        self.nodes = nodes
        n = len(nodes)
        self.cpu_cap = nodes.cpu.astype(np.int64)
        self.cpu_left = self.cpu_cap.copy()
        self.mem_left = nodes.mem.astype(np.int64).copy()
        self.gpu_count = nodes.gpus.astype(np.int64)
        self.gpu_left = np.zeros((n, MAX_GPUS_PER_NODE), np.int64)
        for g in range(MAX_GPUS_PER_NODE):
            self.gpu_left[self.gpu_count > g, g] = MILLI
        self.model = nodes.model.astype(np.int64)
        self.total_gpu_milli = int(self.gpu_count.sum()) * MILLI
        self.typical = typical
        self.tie_rank: np.ndarray | None = None
        """Optional (N,) ranks: among equally scored nodes the lowest rank wins."""
        if typical is not None:
            self.access = gpu_frag.access_matrix(self.model, typical)
            self.total, self.cnt, self.below = gpu_frag.frag_parts(self.gpu_left, typical)
            self.sorted_left = gpu_frag.sorted_free(self.gpu_left)
            self.fragments, self.cpu_fragments = gpu_frag.both_fragments(
                self.total, self.cnt, self.below, self.sorted_left, self.cpu_left, self.access, typical)
            """(N, T) rows of both measures per node (``gpu_frag.both_fragments``), as the live
            scheduler's ``FragCache`` keeps them."""
            self.frag = self.fragments @ typical.freq
            self.pressure = gpu_frag.model_pressure(self.access, typical)

    # --- queries ---------------------------------------------------------------------------
    def allocated_milli(self) -> int:
        return self.total_gpu_milli - int(self.gpu_left.sum())

    def frag_milli(self) -> float:
        return float(self.frag.sum()) if self.typical is not None else 0.0

    def model_ok(self, spec: int, idx=slice(None)) -> np.ndarray:
        """Whether each node (of ``idx``) has a GPU model the mask ``spec`` accepts."""
        model = self.model[idx]
        return (model >= 0) & (((spec >> np.maximum(model, 0)) & 1) == 1)

    def feasible(self, pod: PodReq, among: np.ndarray | None = None) -> np.ndarray:
        """Indices of the nodes ``pod`` fits on now (optionally only those in ``among``)."""
        idx = slice(None) if among is None else among
        ok = (self.cpu_left[idx] >= pod.cpu) & (self.mem_left[idx] >= pod.mem)
        if pod.num > 0:
            ok &= self.model_ok(pod.spec, idx)
            ok &= np.count_nonzero(self.gpu_left[idx] >= pod.milli, axis=1) >= pod.num
        hits = np.flatnonzero(ok)
        return hits if among is None else np.asarray(among)[hits]

    def whole_gpus(self, node: int, num: int) -> tuple[int, ...]:
        """The first ``num`` fully free GPUs of ``node``, by index."""
        free = np.flatnonzero(self.gpu_left[node] == MILLI)
        return tuple(int(g) for g in free[:num])

    def best_fit_gpu(self, node: int, milli: int) -> int:
        """The GPU with the least free share that still holds ``milli`` (lowest index on ties)."""
        left = self.gpu_left[node]
        cand = np.where(left >= milli, left, MILLI + 1)
        return int(np.argmin(cand))

    # --- changes ---------------------------------------------------------------------------
    def place(self, node: int, pod: PodReq, gpus: tuple[int, ...]) -> None:
        self.cpu_left[node] -= pod.cpu
        self.mem_left[node] -= pod.mem
        for g in gpus:
            if self.gpu_left[node, g] < pod.milli:
                raise ValueError(f"GPU {g} of node {self.nodes.names[node]} has "
                                 f"{self.gpu_left[node, g]} milli free, pod needs {pod.milli}")
            self.gpu_left[node, g] -= pod.milli
        self._refresh(node)

    def release(self, node: int, pod: PodReq, gpus: tuple[int, ...]) -> None:
        self.cpu_left[node] += pod.cpu
        self.mem_left[node] += pod.mem
        for g in gpus:
            self.gpu_left[node, g] += pod.milli
        self._refresh(node)

    def _refresh(self, node: int) -> None:
        if self.typical is None:
            return
        sl = slice(node, node + 1)
        t, c, b = gpu_frag.frag_parts(self.gpu_left[sl], self.typical)
        self.total[node], self.cnt[node], self.below[node] = t[0], c[0], b[0]
        self.sorted_left[sl] = ordered = gpu_frag.sorted_free(self.gpu_left[sl])
        fgd, aware = gpu_frag.both_fragments(t, c, b, ordered, self.cpu_left[sl], self.access[sl], self.typical)
        self.fragments[node], self.cpu_fragments[node] = fgd[0], aware[0]
        self.frag[node] = (fgd @ self.typical.freq)[0]
