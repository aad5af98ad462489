"""A day of GPU work on two sides (a Slurm partition, a Kubernetes pool), each with fixed nodes of
its own and shared nodes that :func:`crossdock.queue.shared_nodes.plan_moves` may move between
them, against the same day with the shared nodes left where they started.

The workload (:func:`two_sides`): the GPU jobs of a trace day (:func:`crossdock.sim.day.trace_day`),
every other one to each side, the second side's arrivals shifted by half a day, so that each
side's busy hours are the other's quiet ones (two groups in time zones twelve hours apart, or
daytime inference beside overnight training). A job takes ``num_gpu`` whole GPUs (a fraction of
one counts as one: these pools do not share GPUs) on one node.

Each side places its queue every tick, oldest first, each job on the fullest node it fits
(binpack), skipping those that fit nowhere; nodes run until their jobs end. A node being drained
takes no new work; a node moves once idle and serves its new side ``move_s`` later (leave one
side, join the other). What is measured, per side: the wait of every job (start − arrival), p50 and p95; and for
both, the GPU-hours that sat idle on one side while the other side had at least as many GPUs of
work waiting, ``min(idle GPUs of A, waiting GPUs of B)`` summed over ticks.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from typing import Mapping, Sequence

import numpy as np

from crossdock.queue.shared_nodes import Move, SharedNode, SideNeed, plan_moves
from crossdock.sim.day import DAY_S, DayJob


@dataclass
class _Node:
    name: str
    side: str
    gpus: int
    shared: bool
    free: int = 0
    ready_at: float = 0.0
    moved_at: float | None = None
    draining_to: str | None = None
    home: str = ""

    def __post_init__(self) -> None:
        self.free, self.home = self.gpus, self.side


@dataclass(frozen=True)
class SideResult:
    jobs: int
    started: int
    p50_wait_s: float
    p95_wait_s: float
    idle_gpu_hours_while_other_waited: float


@dataclass(frozen=True)
class SharedResult:
    moving: bool
    sides: dict[str, SideResult]
    moves: list[tuple[float, Move]] = field(default_factory=list)

    @property
    def idle_gpu_hours_while_other_waited(self) -> float:
        return sum(s.idle_gpu_hours_while_other_waited for s in self.sides.values())


def two_sides(jobs: Sequence[DayJob], names: tuple[str, str] = ("slurm", "kubernetes"),
              shift_s: float = DAY_S / 2) -> dict[str, list[DayJob]]:
    """Every other GPU job to each side, the second side's arrivals shifted by ``shift_s`` (mod a day)."""
    gpu = [j for j in jobs if j.num_gpu > 0]
    first = gpu[0::2]
    second = sorted((DayJob((j.arrival + shift_s) % DAY_S, j.duration, j.cpu_milli, j.mem_mib, j.num_gpu, j.gpu_milli)
                     for j in gpu[1::2]), key=lambda j: j.arrival)
    return {names[0]: first, names[1]: second}


def simulate(workload: Mapping[str, Sequence[DayJob]], fixed: Mapping[str, int], shared: Mapping[str, int], *,
             moving: bool, gpus_per_node: int = 8, tick_s: float = 30.0, settle_s: float = 300.0,
             hold_s: float = 1800.0, move_s: float = 180.0, horizon_s: float = 3 * DAY_S) -> SharedResult:
    """The day on ``fixed[side]`` nodes of each side plus ``shared[side]`` shared nodes starting
    there (``gpus_per_node`` GPUs each), shared nodes moving when ``moving``."""
    sides = list(workload)
    nodes = [_Node(f"{side}-{i}", side, gpus_per_node, False) for side in sides for i in range(fixed.get(side, 0))]
    nodes += [_Node(f"shared-{side}-{i}", side, gpus_per_node, True) for side in sides for i in range(shared.get(side, 0))]
    arrivals = {side: sorted(workload[side], key=lambda j: j.arrival) for side in sides}
    nxt = {side: 0 for side in sides}
    pending: dict[str, list[DayJob]] = {side: [] for side in sides}
    running: list[tuple[float, int, int]] = []  # (end, node index, GPUs)
    waits: dict[str, list[float]] = {side: [] for side in sides}
    since: dict[str, float | None] = {side: None for side in sides}
    idle_while: dict[str, float] = {side: 0.0 for side in sides}
    moves: list[tuple[float, Move]] = []
    by_name = {n.name: n for n in nodes}
    t = 0.0
    while t <= horizon_s:
        for side in sides:
            jobs = arrivals[side]
            while nxt[side] < len(jobs) and jobs[nxt[side]].arrival <= t:
                pending[side].append(jobs[nxt[side]])
                nxt[side] += 1
        while running and running[0][0] <= t:
            _, index, gpus = heapq.heappop(running)
            node = nodes[index]
            node.free += gpus
        waiting = {side: _place(side, pending, nodes, running, waits[side], t) for side in sides}
        for side in sides:
            since[side] = (since[side] if since[side] is not None else t) if waiting[side] else None
            idle = sum(n.free for n in nodes if n.side == side and n.ready_at <= t)
            others = sum(w for s, w in waiting.items() if s != side)
            idle_while[side] += min(idle, others) * tick_s / 3600
        if moving:
            views = [SharedNode(n.name, n.side, n.gpus, n.gpus - n.free, n.draining_to, n.moved_at, n.ready_at > t,
                                home=n.home) for n in nodes if n.shared]
            plan = plan_moves(views, {s: SideNeed(waiting[s], since[s]) for s in sides}, t, settle_s=settle_s,
                              hold_s=hold_s)
            for name in plan.undrain:
                by_name[name].draining_to = None
            for move in plan.drains:
                by_name[move.node].draining_to = move.target
            for move in plan.moves:
                node = by_name[move.node]
                assert node.free == node.gpus, f"{node.name} moved while busy"
                node.side, node.ready_at, node.moved_at, node.draining_to = move.target, t + move_s, t, None
                moves.append((t, move))
        if not running and all(nxt[s] == len(arrivals[s]) and not pending[s] for s in sides):
            break
        t += tick_s
    return SharedResult(moving, {side: _result(len(arrivals[side]), waits[side], idle_while[side]) for side in sides},
                        moves)


def _place(side: str, pending: dict[str, list[DayJob]], nodes: list[_Node], running: list, waits: list[float],
           t: float) -> int:
    """Place the side's queue, oldest first, binpack; the GPUs of what is left waiting."""
    usable = [i for i, n in enumerate(nodes) if n.side == side and n.ready_at <= t and n.draining_to is None]
    most = max((nodes[i].free for i in usable), default=0)
    left, waiting = [], 0
    for job in pending[side]:
        need = max(1, job.num_gpu)
        if need > most:
            left.append(job)
            waiting += need
            continue
        index = min((i for i in usable if nodes[i].free >= need), key=lambda i: (nodes[i].free, nodes[i].name))
        node = nodes[index]
        node.free -= need
        assert node.free >= 0, f"{node.name} over-committed"
        heapq.heappush(running, (t + job.duration, index, need))
        waits.append(t - job.arrival)
        most = max((nodes[i].free for i in usable), default=0)
    pending[side] = left
    return waiting


def _result(jobs: int, waits: list[float], idle: float) -> SideResult:
    w = np.asarray(waits) if waits else np.zeros(1)
    return SideResult(jobs, len(waits), float(np.percentile(w, 50)), float(np.percentile(w, 95)), idle)
