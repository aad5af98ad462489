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

from crossdock.sim.cluster import ClusterState, pod_req
from crossdock.sim.policies import get_policy
from crossdock.sim.sampling import sample_workload
from crossdock.sim.trace import NodeTable, PodTable
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


PUBLISHED_MEDIANS = {"random": 86.3, "dotprod": 90.6, "packing": 91.8, "bestfit": 92.9, "fgd": 95.2}
"""GPU allocation (%) at 100 % arrived on openb_pod_list_default, medians over seeds 42–51, as
published by the FGD authors (expected_results of their artifact)."""


def parse_seeds(text: str) -> list[int]:
    """``"42-51"``, ``"42,43,50"`` or a mix (``"1-3,7"``) -> sorted unique seeds."""
    seeds: set[int] = set()
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        lo, sep, hi = part.partition("-")
        try:
            a = int(lo)
            b = int(hi) if sep else a
        except ValueError:
            raise ValueError(f"seeds: {part!r} is not N or N-M") from None
        if b < a:
            raise ValueError(f"seeds: {part!r} is a descending range; write {b}-{a}")
        seeds.update(range(a, b + 1))
    if not seeds:
        raise ValueError("seeds: none given; write e.g. 42-51")
    return sorted(seeds)


def _grid_task(args: tuple) -> StaticResult:
    nodes, pods, policy, seed, tune, sampling, ties = args
    return run_static(nodes, pods, policy, seed, tune, sampling, ties=ties)


def run_grid(nodes: NodeTable, pods: PodTable, policies: list[str], seeds: list[int], tune: float = 1.3,
             sampling: str = "trace", ties: str = "fixed", jobs: int = 1) -> dict[str, list[StaticResult]]:
    """Every policy × seed; ``jobs`` > 1 runs them in that many processes."""
    for p in policies:
        get_policy(p)
    tasks = [(nodes, pods, p, s, tune, sampling, ties) for p in policies for s in seeds]
    if jobs > 1:
        from concurrent.futures import ProcessPoolExecutor

        with ProcessPoolExecutor(max_workers=jobs) as pool:
            results = list(pool.map(_grid_task, tasks))
    else:
        results = [_grid_task(t) for t in tasks]
    out: dict[str, list[StaticResult]] = {p: [] for p in policies}
    for r in results:
        out[r.policy].append(r)
    return out


def summarize(grid: dict[str, list[StaticResult]], at: int = 100) -> list[dict[str, Any]]:
    """Median (and min/max) over seeds of allocation and fragmentation at ``at`` % arrived."""
    rows = []
    for policy, runs in grid.items():
        alloc = [r.at(at)["allocated_pct"] for r in runs]
        frag = [r.at(at)["fragmentation_pct"] for r in runs]
        rows.append({"policy": policy, "seeds": [r.seed for r in runs],
                     "allocated_pct_median": round(float(np.median(alloc)), 2),
                     "allocated_pct_min": min(alloc), "allocated_pct_max": max(alloc),
                     "fragmentation_pct_median": round(float(np.median(frag)), 2),
                     "failed_pods_median": float(np.median([r.failed_pods for r in runs])),
                     "wall_s_median": round(float(np.median([r.wall_s for r in runs])), 2),
                     "published_allocated_pct": PUBLISHED_MEDIANS.get(policy)})
    return rows
