"""The three setups of the elastic day, each an :class:`~crossdock.sim.elastic.Autoscaler`.

- :class:`StaticPeak` — every pool at ``max_nodes`` all day (the simulation starts them ready).
- :class:`CrossdockPlan` — crossdock's own loop: every ``autoscaler.interval_seconds`` the pure
  :func:`crossdock.queue.autoscale.plan.plan` gets what the store and backends would hand it (a
  :class:`~crossdock.queue.snapshot.Snapshot` of the ready nodes and what runs on them, the
  active jobs as :class:`~crossdock.queue.models.Job` records, each pool's
  :class:`~crossdock.queue.ports.NodeGroup`) and its node decisions are carried out; its deletion
  candidates carry the soft taint in the next pass's snapshot and placement takes them last.
- :class:`KedaPoll` — a KEDA ScaledObject per elastic queue, its replicas being the pool's worker
  nodes (as Slinky scales Slurm NodeSets with KEDA): every ``poll_s`` (KEDA's pollingInterval,
  30 s; the HPA's own 15 s sync is folded into it) ``desired = ceil(backlog / per_replica)``:
  activation 0 → 1, then the HPA's legacy path (tolerance 0.1, scale-up cap
  ``max(2·current, 4)``, downscale stabilization over 300 s), 0 only after ``cooldown_seconds``
  without activity — crossdock's :mod:`~crossdock.queue.autoscale.keda` and ``hpa`` functions,
  checked against KEDA's and kube-controller-manager's cases; a cluster-autoscaler-like follower scans every
  ``scan_s`` (10 s) and adds a node per replica without one, and removes an excess node once it
  has been empty for ``scale_down_unneeded_seconds`` and no node was added to the pool for
  ``scale_down_delay_after_add_seconds`` (the same ``autoscaler`` block crossdock reads, named
  after cluster-autoscaler's flags). Nothing it removes runs work.
"""

from __future__ import annotations

import math
import time
from dataclasses import replace
from datetime import datetime, timezone
from typing import Callable

from crossdock.queue.autoscale import keda
from crossdock.queue.autoscale import plan as autoscale_plan
from crossdock.queue.config import ClusterConfig
from crossdock.queue.models import GpuRequest, Job, JobSpec
from crossdock.queue.ports import NodeGroup
from crossdock.queue.snapshot import DELETION_CANDIDATE, Allocation, GpuDevice, Node, Snapshot
from crossdock.queue.states import JobState
from crossdock.sim.elastic import STARTING, UP, Actions, ElasticJob, ElasticSim
from crossdock.sim.trace import MILLI

EPOCH = datetime(2026, 1, 5, tzinfo=timezone.utc).timestamp()
"""Simulated second 0 as a Unix time (a Monday, 00:00 UTC): ``plan()`` gets ``EPOCH + t``."""
STABILIZATION_S = 300.0
"""The HPA's legacy downscale stabilization window (the recommendations kept for it)."""


def _at(t: float) -> datetime:
    return datetime.fromtimestamp(EPOCH + t, timezone.utc)


class StaticPeak:
    name = "static peak"
    interval_s = None

    def tick(self, sim: ElasticSim, now: float) -> Actions:  # pragma: no cover - never ticks
        return Actions()


class CrossdockPlan:
    """Drives the pools with ``planner`` (crossdock's ``plan()`` unless a test hands another).
    ``idle_s``: when nothing changed since the last pass and it decided nothing, the next pass
    waits up to this long (its timers — unneeded time, delay after add — then fire up to
    ``idle_s`` late); None: every interval."""

    name = "crossdock"

    def __init__(self, config: ClusterConfig, planner: Callable | None = None, idle_s: float | None = None):
        self.planner, self.config = planner or autoscale_plan.plan, config
        self.interval_s = config.autoscaler.interval_seconds
        self.idle_s = idle_s
        self.state = autoscale_plan.AutoscaleState()
        self.passes = 0
        self.wall_s = 0.0
        self._nodes: dict[str, Node] = {}
        self._records: dict[tuple[int, int], tuple[Job, Allocation | None]] = {}
        self._seen: tuple[int, float] | None = None
        self._last: frozenset[str] = frozenset()
        """The last pass's deletion candidates: their nodes carry the soft taint, as the leader's snapshot has it."""

    def tick(self, sim: ElasticSim, now: float) -> Actions:
        if self.idle_s is not None and self._seen is not None:
            version, at = self._seen
            if version == sim.version and now - at < self.idle_s:
                return Actions()
        nodes, allocs, jobs = [], [], []
        for job in sim.pending:
            jobs.append(self._record(sim, job)[0])
        for job in sim.running.values():
            record, alloc = self._record(sim, job)
            jobs.append(record)
            allocs.append(alloc)
        groups = {}
        for pool in sim.pools:
            ready = sim.nodes(pool, UP)
            nodes.extend(self._node(sim, pool, n) for n in ready)
            groups[pool] = NodeGroup(pool, ready=tuple(ready), starting=tuple(sim.nodes(pool, STARTING)))
        inputs = autoscale_plan.Inputs(snapshot=Snapshot(tuple(nodes), tuple(allocs)), jobs=tuple(jobs), groups=groups)
        t0 = time.perf_counter()
        result = self.planner(inputs, self.state, self.config, EPOCH + now)
        self.wall_s += time.perf_counter() - t0
        self.passes += 1
        self.state = result.state
        actions = Actions()
        for d in result.nodes:
            if d.add > 0:
                actions.add[d.pool] = actions.add.get(d.pool, 0) + d.add
            actions.remove.extend(d.remove)
            actions.drain.extend(d.drain)
        last = autoscale_plan.soft_tainted(result.state)
        if last != self._last:
            actions.taken_last, self._last = tuple(sorted(last)), last
        quiet = not (actions.add or actions.remove or actions.drain or actions.taken_last is not None)
        self._seen = (sim.version, now) if quiet else None
        return actions

    def _node(self, sim: ElasticSim, pool: str, name: str) -> Node:
        node = self._nodes.get(name)
        if node is None:
            p, t = self.config.pools[pool], sim.pools[pool].template
            gpus = tuple(GpuDevice(f"{name}-gpu{g}", g, t.gpu_model or "gpu") for g in range(t.gpus))
            node = self._nodes[name] = Node(name, pool, p.backend, t.cpus * MILLI, t.memory_mib, gpus,
                                            labels={**p.selector, **t.labels}, taints=tuple(t.taints),
                                            gpu_sharing=p.gpu.sharing, max_pods=t.max_pods)
        return replace(node, taints=(*node.taints, DELETION_CANDIDATE)) if name in self._last else node

    def _record(self, sim: ElasticSim, job: ElasticJob) -> tuple[Job, Allocation | None]:
        """The job as the store holds it (and its allocation while it runs), built once per attempt."""
        key = (job.id, sim.epoch.get(job.id, 0) if job.slot >= 0 else -1 - job.requeues)
        hit = self._records.get(key)
        if hit is not None:
            return hit
        req, q = job.req, self.config.queues[job.queue]
        share = req.milli / MILLI if req.num == 1 and req.milli < MILLI else None
        gpus = GpuRequest(count=req.num, share=share) if req.num else None
        spec = JobSpec(command=["true"], cpus_per_task=req.cpu // MILLI, mem_per_node_mib=req.mem, gpus=gpus,
                       queue=job.queue)
        fields = dict(id=job.id, spec=spec, queue=job.queue, priority_class=q.priority_class, priority=job.priority,
                      preemptible=job.preemptible, pools=[job.pool], submit_time=_at(job.arrival))
        alloc = None
        if job.slot >= 0:
            name = sim.names[job.slot]
            ids = [f"{name}-gpu{g}" for g in job.gpus]
            fields.update(state=JobState.RUNNING, pool=job.pool, backend=self.config.pools[job.pool].backend,
                          nodes=[name], gpu_ids=ids, start_time=_at(job.attempt_start),
                          alloc_cpu_milli=req.cpu, alloc_mem_mib=req.mem)
            alloc = Allocation(job.id, name, req.cpu, req.mem, () if share else tuple(ids),
                               {ids[0]: share} if share else {}, priority=job.priority, preemptible=job.preemptible,
                               queue=job.queue, start_time=_at(job.attempt_start))
        record = self._records[key] = (Job(**fields), alloc)
        return record


class KedaPoll:
    """See the module docstring; ``poll_s`` must be a multiple of ``scan_s``. ``per_replica_factor``
    scales every queue's ``per_replica`` (how the count-based poll responds to its one knob)."""

    name = "KEDA-like poll"

    def __init__(self, config: ClusterConfig, poll_s: float = 30.0, scan_s: float = 10.0, per_replica_factor: float = 1.0):
        self.config, self.poll_s, self.interval_s = config, poll_s, scan_s
        if per_replica_factor != 1.0:
            self.name = f"{self.name} ×{per_replica_factor:g}"
        self.queues = {name: q for name, q in config.queues.items()
                       if q.elastic != "none" and q.elastic.metric == "queue_length"}
        self.elastic = {name: q.elastic.model_copy(update={"per_replica": q.elastic.per_replica * per_replica_factor})
                        for name, q in self.queues.items()}
        self.replicas = {name: 0 for name in self.queues}
        self.recommendations: dict[str, list[tuple[float, int]]] = {name: [] for name in self.queues}
        self.last_active: dict[str, float] = {}
        self.unneeded_since: dict[str, float] = {}
        self.last_add: dict[str, float] = {}
        self.polls = 0

    def _poll(self, sim: ElasticSim, now: float) -> None:
        """KEDA's activation and cooldown, the HPA's legacy path (a ScaledObject without
        ``behavior``): crossdock's :func:`keda.elastic_pass`, equal to KEDA's and the HPA's."""
        self.polls += 1
        for name, q in self.queues.items():
            backlog = sum(1 for j in sim.pending if j.queue == name) + sum(
                1 for j in sim.running.values() if j.queue == name)
            current = self.replicas[name]
            history = self.recommendations[name] or [(now, current)]
            step = keda.elastic_pass(self.elastic[name], backlog, current_replicas=current,
                                     last_active=self.last_active.get(name), now=now,
                                     recommendations=[(now - t, r) for t, r in history],
                                     scale_up_events=[], scale_down_events=[])
            if step.active:
                self.last_active[name] = now
            self.recommendations[name] = [(t, r) for t, r in history if now - t < STABILIZATION_S] + [
                (now, step.recommended)]
            self.replicas[name] = min(step.replicas, self.config.pools[q.pools[0]].max_nodes)

    def tick(self, sim: ElasticSim, now: float) -> Actions:
        if now % self.poll_s < 1e-9 or self.polls == 0:
            self._poll(sim, now)
        actions = Actions()
        unneeded = self.config.autoscaler.scale_down_unneeded_seconds
        delay = self.config.autoscaler.scale_down_delay_after_add_seconds
        for name, q in self.queues.items():
            pool = q.pools[0]
            ready, starting = sim.nodes(pool, UP), sim.nodes(pool, STARTING)
            excess = len(ready) + len(starting) - max(self.replicas[name], sim.pools[pool].min_nodes)
            if excess < 0:
                actions.add[pool] = -excess
                self.last_add[pool] = now
            if now - self.last_add.get(pool, -math.inf) < delay:
                excess = 0  # cluster-autoscaler's scale-down delay after add
            empty = [n for n in ready if not sim.jobs_on(n)]
            for n in ready:
                if n in empty and excess > 0:
                    self.unneeded_since.setdefault(n, now)
                else:
                    self.unneeded_since.pop(n, None)
            due = [n for n in empty if n in self.unneeded_since and now - self.unneeded_since[n] >= unneeded]
            for n in due[:max(excess, 0)]:
                actions.remove.append(n)
                del self.unneeded_since[n]
        return actions
