"""Dynamic replay: jobs arrive and leave on a virtual clock, wait in a priority queue, may
preempt lower-priority preemptible jobs, and a defragmenter may move preemptible jobs to make
room for a blocked one.

The loop is event driven (arrivals and completions from a heap); after every event the pending
queue is scanned in order (priority, then arrival) and every job that fits is placed with its
own placement policy, as kube-scheduler retries every unschedulable pod. Nothing here performs
I/O; the result holds time series and per-class statistics.

Preemption (kube's PostFilter, simplified): a job that fits nowhere picks the node where evicting
the fewest lower-priority preemptible jobs (lowest priority, newest first) makes it fit; victims go
back to the queue and restart from scratch (their lost GPU time is counted).

Defragmentation: a blocked GPU job whose pool has enough free GPUs in total, just not on one
node, looks for a node whose preemptible jobs can all be re-placed elsewhere; it moves them (a
migration, counted) and takes the node.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np

from crossdock.sim.cluster import ClusterState, PodReq, pod_req
from crossdock.sim.policies import Policy, get_policy
from crossdock.sim.trace import MILLI, NodeTable, PodTable
from crossdock.queue.scheduler.plugins import gpu_frag
from crossdock.queue.scheduler.plugins.gpu_frag import TypicalPods

ARRIVE, FINISH, TICK = 0, 1, 2
MAX_PREEMPT_TRIES = 8
MAX_DEFRAG_TRIES = 2
PREEMPT_NODES = 32
"""Nodes examined per preemption attempt (those holding the most preemptible GPU first)."""
QOS_PRIORITY = {"LS": (1000, False), "Guaranteed": (900, False), "Burstable": (500, False), "BE": (100, True)}


@dataclass
class SimJob:
    """One job of a dynamic run. ``nodes`` restricts it to these node indices (its pools); jobs
    of one ``klass`` share their pools."""

    id: int
    klass: str
    arrival: float
    duration: float
    req: PodReq
    priority: int = 0
    preemptible: bool = False
    policy: str = "crossdock"
    nodes: np.ndarray | None = None
    pools: list[np.ndarray] | None = None
    """Node groups tried in order (the first with room wins); ``nodes`` is their union."""
    # filled by the run
    start: float | None = None
    end: float | None = None
    node: int = -1
    gpus: tuple[int, ...] = ()
    attempts: int = 0
    preempted: int = 0
    migrated: int = 0
    attempt_start: float = 0.0
    checkpoint_s: float = 0.0
    """Progress is kept in multiples of this when preempted (0: a preempted job restarts)."""
    service: bool = False
    """A replica of its class's service: placed among the feasible nodes holding the fewest
    replicas of that class (the live ``ServiceSpread`` soft filter)."""
    done_s: float = 0.0


@dataclass
class DynamicResult:
    jobs: list[SimJob]
    times_h: np.ndarray
    gpu_util_pct: np.ndarray
    frag_gpus: np.ndarray
    pending: np.ndarray
    horizon_h: float
    total_gpus: int
    preemptions: int = 0
    migrations: int = 0
    lost_gpu_hours: float = 0.0
    scattered_gpus: np.ndarray = field(default_factory=lambda: np.zeros(1))
    """Free GPU capacity (GPUs) on nodes that are partly used: idle, but not a whole node."""
    extra: dict[str, Any] = field(default_factory=dict)

    def _time_avg(self, values: np.ndarray) -> float:
        if len(self.times_h) < 2:
            return float(values[0]) if len(values) else 0.0
        dt = np.diff(np.append(self.times_h, self.horizon_h))
        dt = np.clip(dt, 0, None)
        return float((values * dt).sum() / max(dt.sum(), 1e-9))

    def delays_min(self, klass: str | None = None) -> np.ndarray:
        """Queueing delay (first start − arrival) in minutes of the jobs that started."""
        return np.array([(j.start - j.arrival) / 60 for j in self.jobs
                         if j.start is not None and (klass is None or j.klass == klass)])

    def summary(self) -> dict[str, Any]:
        """``fragmented_gpus_avg``: the FGD measure (GPUs a typical job of this workload could
        not use), time-averaged; ``scattered_free_gpus_avg``: idle GPUs on partly used nodes."""
        classes = sorted({j.klass for j in self.jobs})
        delay: dict[str, Any] = {}
        for c in classes:
            d = self.delays_min(c)
            never = sum(1 for j in self.jobs if j.klass == c and j.start is None)
            delay[c] = {"p50_min": round(float(np.percentile(d, 50)), 2) if len(d) else None,
                        "p99_min": round(float(np.percentile(d, 99)), 2) if len(d) else None,
                        "started": int(len(d)), "never_started": never}
        done = {c: [j for j in self.jobs if j.klass == c and j.end is not None and j.end <= self.horizon_h * 3600]
                for c in classes}
        return {
            "jobs": len(self.jobs),
            "horizon_h": round(float(self.horizon_h), 2),
            "gpu_util_pct_avg": round(self._time_avg(self.gpu_util_pct), 2),
            "fragmented_gpus_avg": round(self._time_avg(self.frag_gpus), 2),
            "scattered_free_gpus_avg": round(self._time_avg(self.scattered_gpus), 2),
            "queueing_delay": delay,
            "completed": {c: len(v) for c, v in done.items()},
            "completed_gpu_hours": {c: round(sum(j.req.gpu_total / MILLI * j.duration / 3600 for j in v), 1)
                                    for c, v in done.items()},
            "preemptions": self.preemptions,
            "migrations": self.migrations,
            "lost_gpu_hours": round(float(self.lost_gpu_hours), 1),
            **self.extra,
        }


class _Sim:
    def __init__(self, nodes: NodeTable, jobs: Sequence[SimJob], typical: TypicalPods | None, seed: int,
                 preemption: bool, defrag: bool, scan_limit: int, sample_every_s: float, descheduler: Any = None,
                 observer: Any = None, policies: Mapping[str, Policy] | None = None):
        self.state = ClusterState(nodes, typical)
        self.rng = np.random.default_rng(seed)
        self.state.tie_rank = self.rng.permutation(len(nodes))
        self.jobs = list(jobs)
        self.preemption, self.defrag, self.scan_limit = preemption, defrag, scan_limit
        self.heap: list[tuple[float, int, int, int]] = []
        self.seq = 0
        self.pending: list[SimJob] = []
        self.running: dict[int, SimJob] = {}
        self.on_node: dict[int, set[int]] = {}
        self.epoch: dict[int, int] = {}
        self.preemptions = self.migrations = 0
        self.lost_gpu_hours = 0.0
        self.samples: list[tuple[float, float, float, int]] = []
        self.sample_every = sample_every_s
        self.next_sample = 0.0
        given = policies or {}
        self.policies = {name: given.get(name) or get_policy(name) for name in {j.policy for j in self.jobs}}
        self.descheduler = descheduler
        """A :class:`crossdock.sim.deschedule.SimDescheduler` run every ``interval`` simulated seconds."""
        self.observer = observer
        """Called as ``observer(sim, now)`` at every sample (it reads the state, never changes it)."""

    def push(self, t: float, kind: int, job: SimJob) -> None:
        self.seq += 1
        heapq.heappush(self.heap, (t, kind, self.seq, job.id))

    # --- placement ---------------------------------------------------------------------
    def _start(self, job: SimJob, node: int, gpus: tuple[int, ...], now: float) -> None:
        self.state.place(node, job.req, gpus)
        job.node, job.gpus = node, gpus
        if job.start is None:
            job.start = now
        job.attempt_start = now
        job.attempts += 1
        self.running[job.id] = job
        self.on_node.setdefault(node, set()).add(job.id)
        self.epoch[job.id] = self.epoch.get(job.id, 0) + 1
        self.seq += 1
        heapq.heappush(self.heap, (now + job.duration - job.done_s, FINISH, self.seq,
                                   job.id * 1_000_000 + self.epoch[job.id]))

    def _stop(self, job: SimJob) -> None:
        self.state.release(job.node, job.req, job.gpus)
        self.running.pop(job.id, None)
        self.on_node[job.node].discard(job.id)
        job.node, job.gpus = -1, ()

    def _try_place(self, job: SimJob, now: float) -> bool:
        for group in job.pools or [job.nodes]:
            cand = self.state.feasible(job.req, group)
            if len(cand):
                if job.service:
                    cand = self._fewest_replicas(job.klass, cand)
                node, gpus = self.policies[job.policy](self.state, job.req, cand, self.rng)
                self._start(job, node, gpus, now)
                return True
        return False

    def _fewest_replicas(self, klass: str, cand: np.ndarray) -> np.ndarray:
        """The nodes of ``cand`` running the fewest jobs of ``klass`` (``crossdock.queue.scheduler.
        plugins.service_spread.prefer``)."""
        counts = np.fromiter((sum(self.running[j].klass == klass for j in self.on_node.get(int(n), ())) for n in cand),
                             np.int64, len(cand))
        return cand[counts == counts.min()]

    def _victims(self, job: SimJob, node: int) -> list[SimJob] | None:
        """Fewest lower-priority preemptible jobs on ``node`` whose eviction lets ``job`` fit."""
        cands = sorted((self.running[i] for i in self.on_node.get(node, ())
                        if self.running[i].preemptible and self.running[i].priority < job.priority),
                       key=lambda v: (v.priority, -(v.start or 0)))
        if not cands:
            return None
        taken: list[SimJob] = []
        for v in cands:
            self.state.release(node, v.req, v.gpus)
            taken.append(v)
            if len(self.state.feasible(job.req, np.array([node]))):
                break
        fits = len(self.state.feasible(job.req, np.array([node]))) > 0
        for v in reversed(taken):
            self.state.place(node, v.req, v.gpus)
        return taken if fits else None

    def _preempt_for(self, job: SimJob, now: float) -> bool:
        allowed = set((job.nodes if job.nodes is not None else np.arange(len(self.state.nodes))).tolist())
        weight: dict[int, int] = {}
        for r in self.running.values():
            if r.preemptible and r.priority < job.priority and r.node in allowed:
                weight[r.node] = weight.get(r.node, 0) + r.req.gpu_total + 1
        if not weight:
            return False
        best: tuple[tuple[int, float], int, list[SimJob]] | None = None
        for n in sorted(weight, key=lambda n: -weight[n])[:PREEMPT_NODES]:
            victims = self._victims(job, n)
            if victims is None:
                continue
            key = (len(victims), sum(v.req.gpu_total for v in victims))
            if best is None or key < best[0]:
                best = (key, n, victims)
        if best is None:
            return False
        _, node, victims = best
        for v in victims:
            ran = max(0.0, now - v.attempt_start)
            kept = (ran // v.checkpoint_s) * v.checkpoint_s if v.checkpoint_s > 0 else 0.0
            v.done_s += kept
            self.lost_gpu_hours += v.req.gpu_total / MILLI * (ran - kept) / 3600
            self._stop(v)
            v.preempted += 1
            self.preemptions += 1
            self.pending.append(v)
        cand = self.state.feasible(job.req, np.array([node]))
        if len(cand) == 0:  # pragma: no cover - _victims checked it
            return False
        _, gpus = self.policies[job.policy](self.state, job.req, cand, self.rng)
        self._start(job, node, gpus, now)
        return True

    def _defrag_for(self, job: SimJob, now: float) -> bool:
        if job.req.num == 0:
            return False
        nodes = job.nodes if job.nodes is not None else np.arange(len(self.state.nodes))
        free_gpus = int((self.state.gpu_left[nodes] == MILLI).sum())
        if free_gpus < job.req.num:
            return False
        order = sorted(nodes.tolist(), key=lambda n: -int((self.state.gpu_left[n] == MILLI).sum()))
        for n in order[:16]:
            movers = [self.running[i] for i in self.on_node.get(n, ()) if self.running[i].preemptible]
            if not movers:
                continue
            saved = [(v, v.node, v.gpus) for v in movers]
            for v in movers:
                self.state.release(n, v.req, v.gpus)
            if not len(self.state.feasible(job.req, np.array([n]))):
                for v, node, gpus in saved:
                    self.state.place(node, v.req, gpus)
                continue
            # job goes on n first, then every mover must fit elsewhere (not on n)
            _, gpus = self.policies[job.policy](self.state, job.req, np.array([n]), self.rng)
            self.state.place(n, job.req, gpus)
            moves: list[tuple[SimJob, int, tuple[int, ...]]] = []
            ok = True
            for v in sorted(movers, key=lambda v: -v.req.gpu_total):
                allowed = v.nodes if v.nodes is not None else np.arange(len(self.state.nodes))
                cand = self.state.feasible(v.req, allowed[allowed != n])
                if len(cand) == 0:
                    ok = False
                    break
                node, g = self.policies[v.policy](self.state, v.req, cand, self.rng)
                self.state.place(node, v.req, g)
                moves.append((v, node, g))
            if not ok:
                for v, node, g in moves:
                    self.state.release(node, v.req, g)
                self.state.release(n, job.req, gpus)
                for v, node, g in saved:
                    self.state.place(node, v.req, g)
                continue
            for v, node, g in moves:
                self.on_node[n].discard(v.id)
                v.node, v.gpus = node, g
                self.on_node.setdefault(node, set()).add(v.id)
                v.migrated += 1
                self.migrations += 1
            self.state.release(n, job.req, gpus)
            self._start(job, n, gpus, now)
            return True
        return False

    def _schedule(self, now: float) -> None:
        if not self.pending:
            return
        queue = sorted(self.pending, key=lambda j: (-j.priority, j.arrival, j.id))
        self.pending = []  # victims of preemption land here during the scan
        still: list[SimJob] = []
        failed: set[tuple] = set()  # shapes that found no room in this pass (state only shrinks)
        tried = preempt_tries = defrag_tries = 0
        for job in queue:
            shape = (job.req.cpu, job.req.mem, job.req.num, job.req.milli, job.req.spec, job.priority,
                     job.klass)
            if tried >= self.scan_limit or shape in failed:
                still.append(job)
                continue
            tried += 1
            if self._try_place(job, now):
                continue
            if self.preemption and preempt_tries < MAX_PREEMPT_TRIES and self._preempt_for(job, now):
                preempt_tries += 1
                continue
            if self.defrag and defrag_tries < MAX_DEFRAG_TRIES:
                defrag_tries += 1
                if self._defrag_for(job, now):
                    continue
            failed.add(shape)
            still.append(job)
        self.pending = still + self.pending

    def _sample(self, now: float) -> None:
        st = self.state
        frag_gpus = st.frag_milli() / MILLI if st.typical is not None else float(
            ((st.gpu_left > 0) & (st.gpu_left < MILLI)).sum())
        used = st.gpu_left.sum(axis=1) < st.gpu_count * MILLI
        scattered = float(st.gpu_left[used].sum()) / MILLI
        self.samples.append((now / 3600, st.allocated_milli() / st.total_gpu_milli * 100 if st.total_gpu_milli else 0.0,
                             frag_gpus, len(self.pending), scattered))
        if self.observer is not None:
            self.observer(self, now)

    def run(self, horizon_s: float | None) -> DynamicResult:
        by_id = {j.id: j for j in self.jobs}
        for j in self.jobs:
            self.push(j.arrival, ARRIVE, j)
        if self.descheduler is not None:  # the descheduler runs on its own clock, not only at events
            self.seq += 1
            heapq.heappush(self.heap, (self.descheduler.interval, TICK, self.seq, -1))
        last = 0.0
        while self.heap:
            t, kind, _, key = heapq.heappop(self.heap)
            if horizon_s is not None and t > horizon_s:
                break
            if kind == TICK:
                if any(k != TICK for _, k, _, _ in self.heap) or self.pending:
                    self.seq += 1
                    heapq.heappush(self.heap, (t + self.descheduler.interval, TICK, self.seq, -1))
            elif kind == FINISH:
                job = by_id[key // 1_000_000]
                if self.epoch.get(job.id) != key % 1_000_000 or job.id not in self.running:
                    continue  # a stale completion of a preempted attempt
                self._stop(job)
                job.end = t
            else:
                self.pending.append(by_id[key])
            # events at the same instant are applied together before one scheduling pass
            if self.heap and self.heap[0][0] == t:
                continue
            self._schedule(t)
            if self.descheduler is not None and t >= self.descheduler.next_at:
                self.descheduler.next_at = t + self.descheduler.interval
                if self.descheduler.run(self, t):
                    self._schedule(t)
            if t >= self.next_sample:
                self._sample(t)
                self.next_sample = t + self.sample_every
            last = t
        horizon = (horizon_s if horizon_s is not None else last) / 3600
        arr = np.array(self.samples) if self.samples else np.zeros((1, 5))
        result = DynamicResult(self.jobs, arr[:, 0], arr[:, 1], arr[:, 2], arr[:, 3], horizon,
                               self.state.total_gpu_milli // MILLI, self.preemptions, self.migrations,
                               self.lost_gpu_hours, scattered_gpus=arr[:, 4])
        if self.descheduler is not None:
            result.extra["migration_lost_gpu_hours"] = round(self.descheduler.lost_gpu_hours, 1)
        return result


def simulate(nodes: NodeTable, jobs: Sequence[SimJob], typical: TypicalPods | None = None, seed: int = 42,
             preemption: bool = False, defrag: bool = False, horizon_s: float | None = None,
             scan_limit: int = 256, sample_every_s: float = 60.0, descheduler: Any = None,
             observer: Any = None, policies: Mapping[str, Policy] | None = None) -> DynamicResult:
    """Run ``jobs`` (arrival/duration in seconds) on ``nodes``; see the module docstring.
    ``typical`` defaults to the typical pods of the GPU jobs given; ``descheduler``: the live
    descheduling policy, run periodically (:mod:`crossdock.sim.deschedule`); ``observer(sim, now)``:
    called at every sample; ``policies``: the placement of a job's ``policy`` name, where not one of
    :data:`crossdock.sim.policies.POLICIES`."""
    if typical is None:
        gpu = [j.req for j in jobs if j.req.num > 0]
        if gpu:
            typical = gpu_frag.typical_pods(np.array([r.cpu for r in gpu]), np.array([r.milli for r in gpu]),
                                            np.array([r.num for r in gpu]), np.array([r.spec for r in gpu]))
    return _Sim(nodes, jobs, typical, seed, preemption, defrag, scan_limit, sample_every_s, descheduler,
                observer, policies).run(horizon_s)


def replay_trace(nodes: NodeTable, pods: PodTable, policy: str = "crossdock", seed: int = 42,
                 preemption: bool = True, time_scale: float = 1.0, limit: int | None = None) -> DynamicResult:
    """Replay a pod list with creation/deletion times. Runtime = deletion − scheduled time (or
    creation when never scheduled); priority and preemptibility from ``qos`` (LS 1000,
    Guaranteed 900, Burstable 500, BE 100 and preemptible). Arrival times are divided by
    ``time_scale`` (the trace spreads 8 k pods over 149 days; compress it to load the
    cluster); the run ends at the last arrival, and averages are over that window."""
    from crossdock.sim.static import workload_typical

    if time_scale <= 0:
        raise ValueError(f"time_scale must be > 0, got {time_scale}")
    pods = pods.with_models(nodes.models)
    order = np.argsort(pods.creation, kind="stable")
    if limit:
        order = order[:limit]
    t0 = float(pods.creation[order[0]]) if len(order) else 0.0
    jobs = []
    for k, i in enumerate(order.tolist()):
        start = pods.scheduled[i] if pods.scheduled[i] >= 0 else pods.creation[i]
        end = pods.deletion[i] if pods.deletion[i] >= 0 else start + 3600
        prio, preemptible = QOS_PRIORITY.get(pods.qos[i] if pods.qos else "", (0, False))
        jobs.append(SimJob(k, pods.qos[i] if pods.qos else "all", (pods.creation[i] - t0) / time_scale,
                           float(max(1, end - start)), pod_req(pods, i), prio if preemption else 0,
                           preemptible and preemption, policy))
    gpu_pods = np.flatnonzero(pods.num_gpu > 0)
    typical = workload_typical(pods.take(gpu_pods)) if len(gpu_pods) else None
    horizon = max((j.arrival for j in jobs), default=0.0)
    return simulate(nodes, jobs, typical, seed=seed, preemption=preemption, horizon_s=horizon,
                    sample_every_s=max(60.0, horizon / 2000))
