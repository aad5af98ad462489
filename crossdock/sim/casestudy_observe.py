"""What the case study measures on a running simulation (read-only, every sample).

- CPU each job gets: per node, :func:`contention.cfs_shares` over the jobs' real use (their
  request divided by the setup's ``cpu_request_ratio``), weighted by their requests, capped by
  their limits; an inference replica wants what its threads use when busy (demand / ``rho0``).
- Inference P99: :func:`contention.inference_p99_ms` of every running replica at every sample,
  then the 99th percentile over those (replica, sample) pairs, each carrying the same load.
- Node CPU spread: max − min of the real CPU utilisation of the nodes of one pool (one node
  shape) that run work, time-averaged; the table shows the worst pool (the whole cluster's
  spread, across node shapes, is kept as ``node_cpu_spread_cluster_pct``).
- GPU utilisation: allocated GPUs, each counted busy in the proportion of the CPU its job
  asked for that it got (a training job fed at half its CPU keeps its GPUs half busy).
- Training blocked by fragmentation: training jobs seen pending while their pools held at least
  their GPU count idle in total, just not on one node.
- All-reduce efficiency: :func:`contention.allreduce_efficiency` of where the workers of each
  multi-worker job ran (a gang on one node, or workers placed one by one), averaged over the
  jobs whose workers all ran.
"""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING, Any

import numpy as np

from crossdock.sim import contention
from crossdock.sim.scenario import build_nodes
from crossdock.sim.trace import MILLI

if TYPE_CHECKING:  # pragma: no cover
    from crossdock.sim.casestudy import CaseSetup, CaseStudy
    from crossdock.sim.dynamic import DynamicResult, _Sim

TRAINING, LARGE, DISTRIBUTED, INFERENCE = "training", "training-large", "distributed", "inference"


class Observer:
    def __init__(self, cs: "CaseStudy", setup: "CaseSetup", gang_of: list[int]):
        self.cs, self.setup = cs, setup
        self.cpu = cs.models.cpu
        burst = cs.workloads[INFERENCE].burst if INFERENCE in cs.workloads else None
        self.burst = burst
        self.p99: list[float] = []
        self.spread: list[float] = []
        self.busy: list[float] = []
        self.blocked: set[int] = set()
        self.gang_of = gang_of
        self.node_of: dict[int, int] = {}
        """Where each worker of a multi-worker job was last seen running."""
        _, index = build_nodes(cs.scenario())
        self.pool_of = {int(n): p for p, idx in index.items() for n in idx}
        self.pool_spread: dict[str, list[float]] = defaultdict(list)

    def _in_burst(self, now: float) -> bool:
        b = self.burst
        return b is not None and (now / 3600) % b.every_hours < b.length_minutes / 60

    def __call__(self, sim: "_Sim", now: float) -> None:
        st = sim.state
        by_node: dict[int, list[Any]] = defaultdict(list)
        for job in sim.running.values():
            by_node[job.node].append(job)
            if job.klass == DISTRIBUTED:
                self.node_of[job.id] = job.node
        burst = self.cpu.burst_demand if self._in_burst(now) else 1.0
        utils, busy, by_pool = [], 0.0, defaultdict(list)
        for node, jobs in by_node.items():
            demand, weight, limit, parallel = [], [], [], []
            for j in jobs:
                c = self.setup.classes[j.klass]
                req = j.req.cpu / 1000
                use = req / c.cpu_request_ratio
                lim = np.inf if c.cpu_limit_ratio is None else req * c.cpu_limit_ratio
                d = use * burst if j.klass == INFERENCE else use
                demand.append(d)
                parallel.append(d / self.cpu.rho0 if j.klass == INFERENCE else d)
                weight.append(req)
                limit.append(lim)
            got = contention.cfs_shares(st.cpu_cap[node] / 1000, np.array(parallel), np.array(weight), np.array(limit))
            utils.append(float(got.sum()) / (st.cpu_cap[node] / 1000) * 100)
            by_pool[self.pool_of[node]].append(utils[-1])
            for j, g, d, p, lim in zip(jobs, got, demand, parallel, limit):
                if j.klass == INFERENCE:
                    self.p99.append(contention.inference_p99_ms(
                        float(g), d, None if np.isinf(lim) else lim, p, base_ms=self.cpu.base_p99_ms,
                        rho0=self.cpu.rho0, period_ms=self.cpu.period_ms, timeout_ms=self.cpu.timeout_ms))
                if j.req.num:
                    busy += j.req.gpu_total / MILLI * min(1.0, float(g) / max(p, 1e-9))
        self.spread.append(max(utils) - min(utils) if utils else 0.0)
        for pool, values in by_pool.items():
            self.pool_spread[pool].append(max(values) - min(values))
        self.busy.append(busy / max(st.total_gpu_milli / MILLI, 1) * 100)
        whole = (st.gpu_left == MILLI).sum(axis=1)
        for j in sim.pending:
            if j.klass in (TRAINING, LARGE, DISTRIBUTED) and j.id not in self.blocked and j.nodes is not None:
                if whole[j.nodes].sum() >= j.req.num and not len(st.feasible(j.req, j.nodes)):
                    self.blocked.add(j.id)

    def row(self, result: "DynamicResult") -> dict[str, Any]:
        horizon = result.horizon_h * 3600
        waits: dict[str, list[float]] = defaultdict(list)
        for j in result.jobs:  # a job still waiting at the end counts with the wait it has had
            waits[j.klass].append((j.start if j.start is not None else horizon) - j.arrival)
        gangs: dict[int, list[int]] = defaultdict(list)
        for j in result.jobs:
            if j.klass == DISTRIBUTED:
                gangs[self.gang_of[j.id]].append(j.id)
        d, m = self.cs.distributed, self.cs.models.allreduce
        effs, unplaced = [], 0
        for ids in gangs.values():
            if not all(i in self.node_of for i in ids):
                unplaced += 1
                continue
            per_node: dict[int, int] = defaultdict(int)
            for i in ids:
                per_node[self.node_of[i]] += d.workers // len(ids)
            effs.append(contention.allreduce_efficiency(
                list(per_node.values()), compute_to_comm=m.compute_to_comm, nvlink_speedup=m.nvlink_speedup,
                comm_efficiency=m.comm_efficiency) * 100)
        by_pool = {p: round(float(np.mean(v)), 1) for p, v in sorted(self.pool_spread.items())}
        moved = float(result.extra.get("migration_lost_gpu_hours", 0.0))
        lost = result.lost_gpu_hours + moved
        return {
            "gpu_utilisation_pct": round(float(np.mean(self.busy)) if self.busy else 0.0, 1),
            "gpu_allocated_pct": round(result.summary()["gpu_util_pct_avg"], 1),
            "inference_p99_ms": round(float(np.percentile(self.p99, 99)), 1) if self.p99 else None,
            "node_cpu_spread_pct": max(by_pool.values(), default=0.0),
            "node_cpu_spread_by_pool_pct": by_pool,
            "node_cpu_spread_cluster_pct": round(float(np.mean(self.spread)) if self.spread else 0.0, 1),
            "training_blocked_by_fragmentation": len(self.blocked),
            "allreduce_efficiency_pct": round(float(np.mean(effs)), 1) if effs else None,
            "distributed_jobs_never_run": unplaced,
            "gpu_hours_lost": round(lost, 1),
            "gpu_hours_lost_to_preemption": round(float(result.lost_gpu_hours), 1),
            "gpu_hours_lost_to_migration": round(moved, 1),
            "preemptions": result.preemptions,
            "migrations": result.migrations,
            "wait_p95_s": {c: round(float(np.percentile(w, 95)), 1) for c, w in sorted(waits.items())},
        }
