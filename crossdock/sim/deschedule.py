"""The descheduler in the simulator: the live policy (:func:`crossdock.queue.deschedule.plan.plan`)
run every few simulated minutes on the simulated cluster, its moves carried out at once.

Each run turns the simulation's state into what the live leader hands the policy — nodes with
their GPU devices, one allocation per running job, the running and the waiting jobs as job
records, a config with one queue per workload class — and applies the plan: every moved job
stops (its progress since the last checkpoint is lost, counted as GPU-hours lost to migration)
and starts again at once on its reserved destination; the blocked job it made room for then
starts on the freed node.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any, Mapping

import numpy as np

from crossdock.queue.config import ClusterConfig, parse_config
from crossdock.queue.deschedule.migration import MoveRecord
from crossdock.queue.deschedule.plan import plan
from crossdock.queue.models import GpuRequest, Job, JobSpec
from crossdock.queue.snapshot import Allocation, GpuDevice, Node, Snapshot
from crossdock.queue.states import JobState
from crossdock.sim.trace import MILLI

if TYPE_CHECKING:  # pragma: no cover
    from crossdock.sim.dynamic import SimJob, _Sim

EPOCH = datetime(2026, 1, 1, tzinfo=timezone.utc)
PLACEMENT = {"crossdock": "binpack", "spread": "spread", "most-requested": "most-requested"}


def sim_config(classes: Mapping[str, Mapping[str, Any]], pools: list[str], descheduler: Mapping[str, Any]) -> ClusterConfig:
    """``classes``: class -> {priority, preemptible, pools, placement}."""
    return parse_config({
        "priority_classes": {c: {"value": v["priority"], "preemptible": v["preemptible"]} for c, v in classes.items()},
        "pools": {p: {"backend": "sim"} for p in pools},
        "queues": {c: {"priority_class": c, "pools": list(v["pools"]),
                       "placement": PLACEMENT.get(v.get("placement", "crossdock"), "binpack")} for c, v in classes.items()},
        "scheduler": {"default_mem_per_cpu_mib": 0},
        "descheduler": {"enabled": True, **descheduler},
    })


class SimDescheduler:
    def __init__(self, config: ClusterConfig, pool_of_node: list[str], interval_s: float, evict_only: bool = False):
        self.config, self.interval = config, interval_s
        self.evict_only = evict_only
        """Carry a move out as the upstream descheduler does: evict the job and let it queue again
        (no destination kept, no node held for a blocked job)."""
        self.pool_of_node = pool_of_node
        self.next_at = 0.0
        self.records: dict[int, Job] = {}
        self.history: dict[int, MoveRecord] = {}
        self.lost_gpu_hours = 0.0
        self.runs = 0

    def _nodes(self, sim: "_Sim") -> tuple[Node, ...]:
        t = sim.state.nodes
        out = []
        for i, name in enumerate(t.names):
            model = t.models[t.model[i]] if t.model[i] >= 0 else "GPU"
            devs = tuple(GpuDevice(f"{name}:{g}", g, model) for g in range(int(t.gpus[i])))
            out.append(Node(name, self.pool_of_node[i], "sim", int(t.cpu[i]), int(t.mem[i]), devs, gpu_sharing=True))
        return tuple(out)

    def _record(self, job: "SimJob") -> Job:
        rec = self.records.get(job.id)
        if rec is None:
            r = job.req
            gpus = None
            if r.num:
                gpus = GpuRequest(count=1, share=r.milli / MILLI) if r.milli < MILLI else GpuRequest(count=r.num)
            spec = JobSpec(command=["sim"], cpus_per_task=max(1, -(-r.cpu // 1000)), mem_per_node_mib=r.mem, gpus=gpus)
            cls = self.config.priority_classes[job.klass]
            rec = self.records[job.id] = Job(id=job.id + 1, spec=spec, queue=job.klass, priority_class=job.klass,
                                             priority=cls.value, preemptible=cls.preemptible, attempts=1)
        return rec

    def run(self, sim: "_Sim", now: float) -> int:
        """Plan and carry out one pass; returns the moves made."""
        self.runs += 1
        names = sim.state.nodes.names
        at = EPOCH + timedelta(seconds=now)
        active, allocations = [], []
        for job in sim.running.values():
            rec = self._record(job)
            rec.state, rec.nodes = JobState.RUNNING, [names[job.node]]
            rec.start_time = EPOCH + timedelta(seconds=job.attempt_start)
            rec.alloc_cpu_milli, rec.alloc_mem_mib = job.req.cpu, job.req.mem
            ids = tuple(f"{names[job.node]}:{g}" for g in job.gpus)
            share = {ids[0]: job.req.milli / MILLI} if job.req.sharing else {}
            rec.gpu_ids = [] if share else list(ids)
            active.append(rec)
            allocations.append(Allocation(rec.id, names[job.node], job.req.cpu, job.req.mem, () if share else ids,
                                          share, priority=rec.priority, preemptible=rec.preemptible, queue=job.klass,
                                          start_time=rec.start_time))
        pending = []
        for job in sim.pending:
            if job.req.num >= 1 and job.req.milli == MILLI:  # defragmentation serves whole-GPU jobs
                rec = self._record(job)
                rec.state, rec.nodes, rec.gpu_ids = JobState.PENDING, [], []
                pending.append(rec)
        snap = Snapshot(nodes=self._nodes(sim), allocations=tuple(allocations))
        result = plan(snap, pending, active, self.config, at, self.history)
        index = {n: i for i, n in enumerate(names)}
        by_id = {j.id + 1: j for j in [*sim.running.values(), *sim.pending]}
        moved = 0
        for m in result.migrations:
            v = sim.running.get(m.job_id - 1)
            if v is None or not m.to_nodes:
                continue
            dest = index[m.to_nodes[0]]
            ran = max(0.0, now - v.attempt_start)
            kept = (ran // v.checkpoint_s) * v.checkpoint_s if v.checkpoint_s > 0 else 0.0
            sim._stop(v)
            before = self.history.get(m.job_id)
            self.history[m.job_id] = MoveRecord((before.count if before else 0) + 1, at.timestamp(), m.from_nodes)
            if self.evict_only:
                v.done_s += kept
                self.lost_gpu_hours += v.req.gpu_total / MILLI * (ran - kept) / 3600
                v.migrated += 1
                sim.migrations += 1
                moved += 1
                sim.pending.append(v)
                continue
            if not len(sim.state.feasible(v.req, np.array([dest]))):
                sim.pending.append(v)  # the reservation did not hold (cannot happen: the plan reserved it)
                continue
            v.done_s += kept
            self.lost_gpu_hours += v.req.gpu_total / MILLI * (ran - kept) / 3600
            _, gpus = sim.policies[v.policy](sim.state, v.req, np.array([dest]), sim.rng)
            sim._start(v, dest, gpus, now)
            v.migrated += 1
            sim.migrations += 1
            moved += 1
        for job_id in () if self.evict_only else result.unblocked:
            job = by_id.get(job_id)
            target = next((m.from_nodes[0] for m in result.migrations if m.for_job == job_id), None)
            if job is None or job not in sim.pending or target is None:
                continue
            cand = sim.state.feasible(job.req, np.array([index[target]]))
            if len(cand):
                _, gpus = sim.policies[job.policy](sim.state, job.req, cand, sim.rng)
                sim.pending.remove(job)
                sim._start(job, int(cand[0]), gpus, now)
        return moved
