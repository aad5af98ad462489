"""Elastic pools on a virtual clock: nodes of a pool's template are asked for, start after a
provisioning delay, take work, and are removed — driven by an :class:`Autoscaler`.

Each autoscaled pool (``node_template`` and ``max_nodes`` in a crossdock config) owns
``max_nodes`` slots in one :class:`~crossdock.sim.cluster.ClusterState`; a slot is off, starting
(billed, not schedulable) or ready. Jobs wait in their queue's pool and are placed, as soon as
a ready node has room, with the simulator's version of the queue's placement (``binpack``,
``most-requested``, ``spread``). Events at one instant run in this order: completions, nodes
becoming ready, arrivals, one placement pass, then the autoscaler's tick — so a tick sees the
backlog the instant it forms.

Placement takes the nodes the autoscaler's last tick named in ``taken_last`` last (its soft taint:
a node with an untolerated ``PreferNoSchedule`` taint, which crossdock's score ranks below every
untainted node that fits). Nothing removes a node that runs work the autoscaler did not ask to
drain: such a request is counted in ``refused_removals`` (a correct autoscaler keeps it at 0),
and drained jobs are requeued (their progress lost). Node-hours count a node from the request to its removal, as
clouds bill it.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from typing import Any, Protocol, Sequence

import numpy as np

from crossdock.queue.config import ClusterConfig, NodeTemplate
from crossdock.sim.cluster import ClusterState, PodReq
from crossdock.sim.policies import get_policy
from crossdock.sim.trace import MILLI, NodeTable, PodTable
from crossdock.queue.scheduler.plugins import gpu_frag

FINISH, READY, ARRIVE, SAMPLE, TICK = range(5)
OFF, STARTING, UP = 0, 1, 2
PLACEMENTS = {"binpack": "binpack", "most-requested": "most-requested", "spread": "spread", "balanced": "spread"}
"""A queue's placement → the simulator's policy that mirrors it."""


@dataclass
class ElasticJob:
    id: int
    queue: str
    pool: str
    arrival: float
    duration: float
    req: PodReq
    priority: int = 0
    preemptible: bool = False
    start: float | None = None
    end: float | None = None
    slot: int = -1
    gpus: tuple[int, ...] = ()
    attempt_start: float = 0.0
    requeues: int = 0


@dataclass
class Actions:
    """What one autoscaler tick asks for."""

    add: dict[str, int] = field(default_factory=dict)
    remove: list[str] = field(default_factory=list)
    drain: list[int] = field(default_factory=list)
    taken_last: tuple[str, ...] | None = None
    """Nodes placement takes last from now on (the autoscaler's soft taint); None: as before."""


class Autoscaler(Protocol):
    name: str
    interval_s: float | None
    """Seconds between ticks; None: never ticks (static provisioning)."""

    def tick(self, sim: "ElasticSim", now: float) -> Actions: ...


@dataclass
class ElasticResult:
    setup: str
    jobs: list[ElasticJob]
    horizon_s: float
    node_seconds: dict[str, float]
    samples: np.ndarray
    """Rows (hours, nodes of every pool, pending jobs)."""
    pools: tuple[str, ...]
    scale_ups: int = 0
    scale_downs: int = 0
    nodes_added: int = 0
    nodes_removed: int = 0
    refused_removals: int = 0
    requeued: int = 0
    first_scale_up: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def waits_s(self) -> np.ndarray:
        return np.array([j.start - j.arrival for j in self.jobs if j.start is not None])

    def summary(self) -> dict[str, Any]:
        w = self.waits_s()
        pct = (lambda q: round(float(np.percentile(w, q)), 1)) if len(w) else (lambda q: None)
        return {"setup": self.setup, "jobs": len(self.jobs),
                "node_hours": round(float(sum(self.node_seconds.values())) / 3600, 1),
                "node_hours_by_pool": {p: round(float(s) / 3600, 1) for p, s in self.node_seconds.items()},
                "wait_p50_s": pct(50), "wait_p95_s": pct(95), "wait_p99_s": pct(99), "wait_max_s": pct(100),
                "waited": int((w > 1.0).sum()),
                "never_started": sum(1 for j in self.jobs if j.start is None),
                "scale_events": self.scale_ups + self.scale_downs, "scale_ups": self.scale_ups,
                "scale_downs": self.scale_downs, "nodes_added": self.nodes_added,
                "nodes_removed": self.nodes_removed, "refused_removals": self.refused_removals,
                "requeued": self.requeued, **self.extra}


@dataclass
class PoolSlots:
    name: str
    template: NodeTemplate
    slots: np.ndarray
    min_nodes: int
    max_nodes: int


def _node_table(config: ClusterConfig) -> tuple[NodeTable, dict[str, PoolSlots]]:
    names, cpu, mem, gpus, models_of, pools = [], [], [], [], [], {}
    for pname, pool in config.pools.items():
        t = pool.node_template
        if t is None or pool.max_nodes is None:
            raise ValueError(f"pools.{pname}: the elastic simulation needs node_template and max_nodes")
        start = len(names)
        for k in range(pool.max_nodes):
            names.append(f"{pname}#{k}")
            cpu.append(t.cpus * MILLI)
            mem.append(t.memory_mib)
            gpus.append(t.gpus)
            models_of.append((t.gpu_model or "gpu") if t.gpus else "")
        pools[pname] = PoolSlots(pname, t, np.arange(start, len(names)), pool.min_nodes, pool.max_nodes)
    models = tuple(sorted({m for m in models_of if m}))
    table = NodeTable(tuple(names), np.array(cpu, np.int64), np.array(mem, np.int64), np.array(gpus, np.int64),
                      np.array([models.index(m) if m else -1 for m in models_of], np.int64), models, "elastic")
    return table, pools


class ElasticSim:
    def __init__(self, config: ClusterConfig, jobs: Sequence[ElasticJob], autoscaler: Autoscaler, *,
                 horizon_s: float, provision_s: float = 60.0, initial: str = "min", seed: int = 42,
                 sample_every_s: float = 300.0):
        self.config, self.autoscaler = config, autoscaler
        self.horizon, self.provision_s = horizon_s, provision_s
        table, self.pools = _node_table(config)
        gpu = [j.req for j in jobs if j.req.num]
        typical = gpu_frag.typical_pods(np.array([r.cpu for r in gpu]), np.array([r.milli for r in gpu]),
                                        np.array([r.num for r in gpu]), np.array([r.spec for r in gpu])) if gpu else None
        self.state = ClusterState(table, typical)
        self.rng = np.random.default_rng(seed)
        self.status = np.full(len(table), OFF)
        self.names: list[str | None] = [None] * len(table)
        self.slot_of: dict[str, int] = {}
        self.pool_of_slot = np.empty(len(table), object)
        for p in self.pools.values():
            self.pool_of_slot[p.slots] = p.name
        self.billed_since = np.zeros(len(table))
        self.last = np.zeros(len(table), bool)
        """Slots placement takes last (``Actions.taken_last``)."""
        self.serial = 0
        self.version = 0
        """Bumped by every change an autoscaler could see (jobs placed or gone, nodes up or down)."""
        self.jobs = list(jobs)
        self.pending: list[ElasticJob] = []
        self.running: dict[int, ElasticJob] = {}
        self.on_slot: dict[int, set[int]] = {}
        self.policy = {q: get_policy(PLACEMENTS[c.placement]) for q, c in config.queues.items()}
        self.result = ElasticResult(autoscaler.name, self.jobs, horizon_s, {p: 0.0 for p in self.pools}, np.zeros(0),
                                    tuple(self.pools))
        self.heap: list[tuple[float, int, int, Any]] = []
        self.seq = 0
        self.epoch: dict[int, int] = {}
        self.sample_every = sample_every_s
        self.samples: list[list[float]] = []
        for p in self.pools.values():
            for _ in range(p.max_nodes if initial == "max" else p.min_nodes):
                self._up(self._claim(p, 0.0))

    # --- what autoscalers read --------------------------------------------------------
    def nodes(self, pool: str, status: int) -> list[str]:
        return [self.names[s] for s in self.pools[pool].slots if self.status[s] == status]

    def jobs_on(self, name: str) -> list[ElasticJob]:
        return [self.running[i] for i in self.on_slot.get(self.slot_of[name], ())]

    # --- nodes ---------------------------------------------------------------------------
    def _push(self, t: float, kind: int, payload: Any) -> None:
        self.seq += 1
        heapq.heappush(self.heap, (t, kind, self.seq, payload))

    def _claim(self, pool: PoolSlots, now: float) -> int:
        slot = int(next(s for s in pool.slots if self.status[s] == OFF))
        self.serial += 1
        name = f"{pool.name}-{self.serial:05d}"
        self.names[slot], self.slot_of[name] = name, slot
        self.status[slot], self.billed_since[slot] = STARTING, now
        self.last[slot] = False
        self.version += 1
        return slot

    def _up(self, slot: int) -> None:
        self.status[slot] = UP
        self.version += 1

    def _bill(self, slot: int, now: float) -> None:
        self.result.node_seconds[self.pool_of_slot[slot]] += now - self.billed_since[slot]
        self.billed_since[slot] = now

    def _apply(self, actions: Actions, now: float) -> None:
        res = self.result
        if actions.taken_last is not None:
            self.last[:] = False
            self.last[[self.slot_of[n] for n in actions.taken_last if n in self.slot_of]] = True
        for pool, n in actions.add.items():
            p = self.pools[pool]
            n = min(n, int((self.status[p.slots] == OFF).sum()))
            if n <= 0:
                continue
            res.scale_ups += 1
            res.nodes_added += n
            if res.first_scale_up is None:
                res.first_scale_up = now
            for _ in range(n):
                self._push(now + self.provision_s, READY, self._claim(p, now))
        for jid in actions.drain:
            job = self.running.get(jid)
            if job is not None:
                self._stop(job)
                job.requeues += 1
                res.requeued += 1
                self.pending.append(job)
        removed = 0
        for name in actions.remove:
            slot = self.slot_of.get(name)
            if slot is None or self.status[slot] == OFF:
                continue
            if self.on_slot.get(slot):
                res.refused_removals += 1
                continue
            self._bill(slot, now)
            self.status[slot] = OFF
            del self.slot_of[name]
            self.names[slot] = None
            self.version += 1
            removed += 1
        if removed:
            res.scale_downs += 1
            res.nodes_removed += removed

    # --- jobs ------------------------------------------------------------------------------
    def _start(self, job: ElasticJob, slot: int, gpus: tuple[int, ...], now: float) -> None:
        self.state.place(slot, job.req, gpus)
        job.slot, job.gpus, job.attempt_start = slot, gpus, now
        if job.start is None:
            job.start = now
        self.running[job.id] = job
        self.version += 1
        self.on_slot.setdefault(slot, set()).add(job.id)
        self.epoch[job.id] = self.epoch.get(job.id, 0) + 1
        self._push(now + job.duration, FINISH, (job.id, self.epoch[job.id]))

    def _stop(self, job: ElasticJob) -> None:
        self.state.release(job.slot, job.req, job.gpus)
        self.running.pop(job.id, None)
        self.version += 1
        self.on_slot[job.slot].discard(job.id)
        job.slot, job.gpus = -1, ()

    def _schedule(self, now: float) -> None:
        if not self.pending:
            return
        up = {p: s.slots[self.status[s.slots] == UP] for p, s in self.pools.items()}
        still, failed = [], set()
        for job in sorted(self.pending, key=lambda j: (-j.priority, j.arrival, j.id)):
            shape = (job.pool, job.req.cpu, job.req.mem, job.req.num, job.req.milli)
            cand = self.state.feasible(job.req, up[job.pool]) if shape not in failed and len(up[job.pool]) else ()
            if len(cand):
                first = cand[~self.last[cand]]
                cand = first if len(first) else cand
                slot, gpus = self.policy[job.queue](self.state, job.req, cand, self.rng)
                self._start(job, int(slot), gpus, now)
            else:
                failed.add(shape)
                still.append(job)
        self.pending = still

    def _sample(self, now: float) -> None:
        counts = [float((self.status[p.slots] != OFF).sum()) for p in self.pools.values()]
        self.samples.append([now / 3600, *counts, float(len(self.pending))])

    # --- the loop ---------------------------------------------------------------------------
    def run(self) -> ElasticResult:
        for j in self.jobs:
            self._push(j.arrival, ARRIVE, j)
        self._push(0.0, SAMPLE, None)
        if self.autoscaler.interval_s:
            self._push(0.0, TICK, None)
        dirty = False
        while self.heap and self.heap[0][0] <= self.horizon:
            t, kind, _, payload = heapq.heappop(self.heap)
            if kind == FINISH:
                jid, epoch = payload
                job = self.running.get(jid)
                if job is not None and self.epoch[jid] == epoch:
                    self._stop(job)
                    job.end = t
                    dirty = True
            elif kind == READY:
                if self.status[payload] == STARTING:
                    self._up(payload)
                    dirty = True
            elif kind == ARRIVE:
                self.pending.append(payload)
                self.version += 1
                dirty = True
            if dirty and (not self.heap or self.heap[0][0] > t or self.heap[0][1] >= SAMPLE):
                self._schedule(t)
                dirty = False
            if kind == SAMPLE:
                self._sample(t)
                self._push(t + self.sample_every, SAMPLE, None)
            elif kind == TICK:
                self._apply(self.autoscaler.tick(self, t), t)
                self._push(t + self.autoscaler.interval_s, TICK, None)
        for slot in np.flatnonzero(self.status != OFF):
            self._bill(int(slot), self.horizon)
        self.result.samples = np.array(self.samples)
        return self.result


def elastic_jobs(config: ClusterConfig, day: Sequence[Any], route: dict[str, str]) -> list[ElasticJob]:
    """:class:`~crossdock.sim.day.DayJob` arrivals as jobs: ``route`` maps ``"gpu"``/``"cpu"``
    to the queue that takes jobs with/without GPUs; a job goes to its queue's first pool."""
    out = []
    for k, d in enumerate(day):
        queue = route["gpu" if d.num_gpu else "cpu"]
        q = config.queues[queue]
        pc = config.priority_classes[q.priority_class]
        out.append(ElasticJob(k + 1, queue, q.pools[0], d.arrival, d.duration,
                              PodReq(d.cpu_milli, d.mem_mib, d.num_gpu, d.gpu_milli if d.num_gpu else 0, PodTable.ANY, k),
                              pc.value, pc.preemptible))
    return out
