"""Static packing: place a tuned pod sequence one by one, no departures, and record after each
pod the arrived GPU request, the GPU allocation and the fragmentation (FGD paper, §6).

The curve has one point per whole arrived percent, computed as the FGD artifact's analysis
does (``experiments/analysis/merge_*_discrete``): the mean over the pods whose arrived percent
rounds to that integer; when none does, the mean over those within ±1; when none does either,
the previous point carried forward.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from crossdock.backends.simulator.cluster import ClusterState, pod_req
from crossdock.backends.simulator.policies import get_policy
from crossdock.backends.simulator.sampling import sample_workload
from crossdock.backends.simulator.trace import NodeTable, PodTable
from crossdock.queue.scheduler.plugins import gpu_frag
from crossdock.queue.scheduler.plugins.gpu_frag import TypicalPods

CURVE_MAX_PCT = 130


@dataclass
class StaticResult:
    policy: str
    seed: int
    tune: float
    nodes: int
    gpus: int
    pods: int
    failed_pods: int
    failed_gpu_milli: int
    arrived_pct: np.ndarray = field(repr=False)
    allocated_pct: np.ndarray = field(repr=False)
    fragmentation_pct: np.ndarray = field(repr=False)
    wall_s: float = 0.0
    sampling: str = "trace"
    pod_list: str = ""

    def curve(self, max_pct: int = CURVE_MAX_PCT) -> list[dict[str, float]]:
        return discrete_curve(self.arrived_pct, self.allocated_pct, self.fragmentation_pct, max_pct)

    def at(self, pct: int) -> dict[str, float]:
        point = self.curve(max(pct, 0))[pct]
        return {"allocated_pct": point["allocated_pct"], "fragmentation_pct": point["fragmentation_pct"]}

    def to_json(self) -> dict[str, Any]:
        return {"policy": self.policy, "seed": self.seed, "tune": self.tune, "nodes": self.nodes,
                "gpus": self.gpus, "failed_pods": self.failed_pods, "curve": self.curve(),
                "at_100": self.at(100)}


def discrete_curve(arrived: np.ndarray, allocated: np.ndarray, frag: np.ndarray,
                   max_pct: int = CURVE_MAX_PCT) -> list[dict[str, float]]:
    bucket = np.round(arrived)
    out: list[dict[str, float]] = []
    last = (0.0, 0.0)
    for k in range(max_pct + 1):
        sel = bucket == k
        if not sel.any():
            sel = (bucket >= k - 1) & (bucket <= k + 1)
        if sel.any():
            last = (round(float(allocated[sel].mean()), 2), round(float(frag[sel].mean()), 2))
        out.append({"arrived_pct": float(k), "allocated_pct": last[0], "fragmentation_pct": last[1]})
    return out


def workload_typical(pods: PodTable) -> TypicalPods:
    """The typical pods of a pod list (its 95 % most frequent shapes)."""
    return gpu_frag.typical_pods(pods.cpu, pods.gpu_milli, pods.num_gpu, pods.spec)


def run_static(nodes: NodeTable, pods: PodTable, policy: str, seed: int = 42, tune: float = 1.3,
               sampling: str = "trace", typical: TypicalPods | None = None,
               ties: str = "fixed") -> StaticResult:
    """One static packing run. ``pods`` must use ``nodes.models`` for its GPU-model masks."""
    t0 = time.perf_counter()
    pods = pods.with_models(nodes.models)
    choose = get_policy(policy)
    sample_rng, sched_rng = (np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(2))
    order = sample_workload(pods, nodes.total_gpu_milli, tune, sample_rng, sampling)
    typical = typical if typical is not None else workload_typical(pods)
    state = ClusterState(nodes, typical)
    if ties == "fixed":
        state.tie_rank = sched_rng.permutation(len(nodes))
    elif ties != "random":
        raise ValueError(f"unknown tie-breaking {ties!r}; choose fixed or random")
    total = state.total_gpu_milli
    n = len(order)
    arrived = np.empty(n)
    allocated = np.empty(n)
    frag = np.empty(n)
    arrived_milli = 0
    failed = failed_milli = 0
    for k, i in enumerate(order.tolist()):
        pod = pod_req(pods, i)
        arrived_milli += pod.gpu_total
        cand = state.feasible(pod)
        if len(cand) == 0:
            failed += 1
            failed_milli += pod.gpu_total
        else:
            node, gpus = choose(state, pod, cand, sched_rng)
            state.place(node, pod, gpus)
        arrived[k] = arrived_milli
        allocated[k] = state.allocated_milli()
        frag[k] = state.frag_milli()
    scale = 100.0 / total
    return StaticResult(policy, seed, tune, len(nodes), total // 1000, n, failed, failed_milli,
                        arrived * scale, allocated * scale, frag * scale, time.perf_counter() - t0,
                        sampling, pods.source)
