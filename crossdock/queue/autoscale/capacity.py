"""Capacity for the backlog, per pool: how many nodes of a pool's template pending jobs need, and
which pool to grow when several could (cluster-autoscaler's binpacking estimator and its
least-waste expander). Which nodes to retire is :mod:`.scaledown`'s.

Pending jobs are grouped by request shape (:func:`demands`): jobs of one shape fit exactly the
same nodes in the same state, so 50,000 pending jobs are a few hundred groups. Every fit is the
scheduling core's own: the real filters and scores (:func:`~crossdock.queue.scheduler.placement.place`
with the queue's profile) on a one-node inventory holding a hypothetical template node. (The GPU
fragmentation score needs the cycle's typical-pod cache, which hypothetical nodes lack: there it
scores 0 and RequestedToCapacityRatio orders the nodes.)

The estimate (:func:`estimate`) is First-Fit-Decreasing over groups, largest first (the sum of
the CPU, memory and GPU fractions of the template a job takes, times its nodes, as
cluster-autoscaler orders pods): a group first fills the nodes already opened — those starting
and those added for larger groups, best-scoring first — and then opens new template nodes, as
many as it fills, in one step. Nodes in the same state are one *slot* with a count, so the work
is per (group, slot), not per job. A gang (``nodes > 1``) needs all its nodes at once, one
worker on each of ``nodes`` distinct nodes; if the limit leaves too few, it gets none. Jobs that
fit no empty template node (too big, a GPU model or selector the template lacks, a taint they
do not tolerate, a pool they may not use) are never counted: they are listed in ``never_fit``.
"""

from __future__ import annotations

import dataclasses
import math
import operator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from types import MappingProxyType
from typing import Iterable, Mapping, Sequence

import numpy as np
from pydantic import BaseModel

from crossdock.queue.config import ClusterConfig, NodeTemplate, Pool
from crossdock.queue.models import Job
from crossdock.queue.scheduler.framework import CycleState
from crossdock.queue.scheduler.inventory import Inventory
from crossdock.queue.scheduler.placement import place
from crossdock.queue.scheduler.profiles import profile_for
from crossdock.queue.scheduler.registry import Profile
from crossdock.queue.scheduler.request import Request, build_request
from crossdock.queue.snapshot import GpuDevice, Node, Snapshot
from crossdock.queue.states import JobState, Reason

WAITING_REASONS = frozenset({Reason.NONE, Reason.RESOURCES, Reason.PRIORITY, Reason.UNSCHEDULABLE,
                             Reason.WAITING_FOR_CAPACITY})
"""Pending reasons more capacity can end; held, dependent, throttled, over-quota or preempting jobs
do not ask for nodes."""
PLACEMENT_FIELDS = ("cpus_per_task", "ntasks", "nodes", "ntasks_per_node", "mem_per_node_mib", "mem_per_cpu_mib",
                    "time_limit_seconds", "exclusive", "placement", "anti_affinity", "topology", "nice", "constraint")
PLACEMENT_COLLECTIONS = ("gres", "gpus", "nodelist", "exclude", "node_selector", "tolerations", "service")
"""The JobSpec fields :func:`build_request` reads for a job's fit (the job's own ``queue``, ``pools``
and class decide the rest); jobs equal in these have equal requests. ``tests/unit/autoscale``
checks that every other field is one placement does not read."""


@dataclass(frozen=True)
class Demand:
    """Pending jobs of one request shape: the request of the first, and every job's id."""

    request: Request
    jobs: tuple[int, ...]


@dataclass(frozen=True)
class Estimate:
    """What adding nodes of one pool's template would do for a set of demands."""

    pool: str
    nodes: int = 0
    """New nodes to add."""
    on_new: tuple[int, ...] = ()
    """Jobs the new nodes would hold."""
    on_starting: tuple[int, ...] = ()
    """Jobs the pool's starting nodes would hold."""
    never_fit: tuple[int, ...] = ()
    """Jobs no empty template node can hold, whatever is added."""
    over_limit: tuple[int, ...] = ()
    """Jobs that fit the template but are beyond the limit (``max_nodes``, the group's spare)."""
    requested: tuple[float, float, float] = (0.0, 0.0, 0.0)
    """CPU (millicores), memory (MiB) and GPUs the ``on_new`` jobs ask for."""
    capacity: tuple[float, float, float] = (0.0, 0.0, 0.0)
    """CPU, memory and GPUs of the new nodes."""

    @property
    def waste(self) -> float:
        """cluster-autoscaler's least-waste score, ``Σ (available − requested) / available`` over CPU
        and memory, extended with GPUs where the template has them: lower is better."""
        return sum((cap - req) / cap for cap, req in zip(self.capacity, self.requested) if cap > 0)


def template_node(pool_name: str, pool: Pool, template: NodeTemplate, name: str | None = None) -> Node:
    """A hypothetical node of ``pool``'s template, as its backend would list it once ready."""
    name = name or f"{pool_name}-template"
    model = template.gpu_model or pool.gpu.model or "GPU"
    gpus = tuple(GpuDevice(f"{name}:{i}", i, model) for i in range(template.gpus))
    return Node(name, pool_name, pool.backend, template.cpus * 1000, template.memory_mib, gpus,
                MappingProxyType({**pool.selector, **template.labels}), tuple(template.taints), pool.gpu.sharing,
                True, template.max_pods)


def pool_template(pool_name: str, pool: Pool, snapshot: Snapshot) -> NodeTemplate | None:
    """The pool's ``node_template``; without one (Slurm's power saving powers up the partition's own
    nodes) the most common shape among its nodes in ``snapshot``; None when it has neither."""
    if pool.node_template is not None:
        return pool.node_template
    shapes: dict[tuple, int] = {}
    for n in snapshot.nodes:
        if n.pool == pool_name:
            key = (max(1, n.cpu_milli // 1000), n.memory_mib, len(n.gpus), n.gpus[0].model if n.gpus else None,
                   tuple(sorted(n.labels.items())), n.taints, n.max_pods)
            shapes[key] = shapes.get(key, 0) + 1
    if not shapes:
        return None
    cpus, mem, ngpu, model, labels, taints, max_pods = max(shapes, key=lambda k: (shapes[k], k[:3]))
    return NodeTemplate(cpus=cpus, memory_mib=max(1, mem), gpus=ngpu, gpu_model=model, labels=dict(labels),
                        taints=list(taints), max_pods=max_pods)


# --- pending jobs -> demands -----------------------------------------------------------------------

_SCALARS = frozenset({str, int, float, bool, type(None)})


def _frozen(value: object) -> object:
    kind = type(value)
    if kind in _SCALARS:
        return value
    if kind is list or kind is tuple:
        return tuple([_frozen(v) for v in value])
    if kind is dict:
        return tuple(sorted([(k, _frozen(v)) for k, v in value.items()]))
    if isinstance(value, BaseModel):
        return (kind.__name__, *[_frozen(v) for v in value.__dict__.values()])
    return value


_plain = operator.itemgetter(*PLACEMENT_FIELDS)
_collections = operator.itemgetter(*PLACEMENT_COLLECTIONS)


def _shape_of(job: Job) -> tuple:
    spec = job.spec.__dict__
    group = (job.array_job_id if job.array_job_id is not None else job.id) if spec["anti_affinity"] else None
    rest = tuple([_frozen(v) if v else None for v in _collections(spec)])
    return (job.queue, job.priority_class, job.priority, job.preemptible, tuple(job.pools), group, _plain(spec), rest)


def waiting(jobs: Iterable[Job]) -> list[Job]:
    """The pending jobs that more capacity could start (:data:`WAITING_REASONS`)."""
    return [j for j in jobs if j.state is JobState.PENDING and j.reason in WAITING_REASONS and not j.spec.hold]


def demands(jobs: Iterable[Job], config: ClusterConfig) -> list[Demand]:
    """Group ``jobs`` by request shape, one :func:`build_request` per group, in the cycle's order
    (priority, nice, id). Jobs over a per-job limit, or whose request the core cannot compute, are
    left out: no node will ever run them."""
    groups: dict[tuple, list[Job]] = {}
    for job in jobs:
        groups.setdefault(_shape_of(job), []).append(job)
    out = []
    for members in groups.values():
        first = min(members, key=lambda j: j.id)
        try:
            req = build_request(first, config)
        except Exception:  # a spec the cycle sets aside (InvalidSpec) asks for nothing
            continue
        if req.limit_error is None:
            out.append(Demand(req, tuple(sorted(j.id for j in members))))
    # jobs of one shape share priority and nice (both are in the shape)
    out.sort(key=lambda d: (-d.request.priority, d.request.nice, d.jobs[0]))
    return out


def size(req: Request, node: Node) -> float:
    """cluster-autoscaler's order for its estimator: the fractions of the node one job takes."""
    gpus = len(node.gpus)
    s = req.cpu_milli / max(node.cpu_milli, 1) + req.memory_mib / max(node.memory_mib, 1)
    if gpus:
        s += (req.gpus + req.gpu_share_milli / 1000 + req.mig_count) / gpus
    return s * req.nodes


# --- the world as it is: does a demand fit the nodes there now? ----------------------------------

class World:
    """The cluster of a snapshot as the cycle sees it (inventory, allocations loaded), with one
    profile per queue; :func:`fits_now` places onto it, :mod:`.scaledown` simulates moves on it."""

    def __init__(self, snapshot: Snapshot, config: ClusterConfig, now: datetime):
        self.snapshot, self.config, self.now = snapshot, config, now
        self.inv = Inventory(snapshot.nodes)
        self.inv.load(snapshot.allocations)
        self.state = CycleState(self.inv, config, now)

    def profile(self, req: Request) -> Profile:
        return profile_of(self.config, req)


def profile_of(config: ClusterConfig, req: Request) -> Profile:
    queue = config.queues.get(req.queue)
    return profile_for(req.placement, queue.plugin_weights if queue else None)


def fits_now(world: World, wanted: Sequence[Demand]) -> list[Demand]:
    """Place ``wanted`` onto the world's free capacity with the real core, in order (what the next
    cycle would start); return what is left. The world keeps the placements."""
    left = []
    for d in wanted:
        profile = world.profile(d.request)
        placed = 0
        while placed < len(d.jobs) and place(world.state, profile, d.request) is not None:
            placed += 1
        if placed < len(d.jobs):
            left.append(Demand(d.request, d.jobs[placed:]))
    return left


# --- hypothetical nodes ----------------------------------------------------------------------------

@dataclass(frozen=True)
class _State:
    """One template node's state: its saved inventory row, its anti-affinity groups, and what it
    has free (CPU, memory, idle GPUs, the largest free GPU share, room for workers)."""

    saved: tuple
    groups: frozenset
    free: tuple[int, int, int, int, int]
    key: tuple

    def may_fit(self, req: Request) -> bool:
        """False only where the real filters would refuse too (a shortcut past full nodes)."""
        cpu, mem, gpus, share, pods = self.free
        return (pods > 0 and cpu >= req.cpu_milli and mem >= req.memory_mib and gpus >= req.gpus
                and share >= req.gpu_share_milli)


@dataclass
class _Slot:
    """``count`` nodes of the template in one state."""

    count: int
    state: _State
    new: bool
    """Added by this estimate (not one of the pool's starting nodes)."""
    order: int


class _Template:
    """One template node in a one-node inventory, restored to a slot's state for each question."""

    def __init__(self, node: Node, config: ClusterConfig, now: datetime):
        self.node, self.config = node, config
        self.inv = Inventory([node])
        self.state = CycleState(self.inv, config, now)
        self.empty = self._current()

    def _current(self) -> _State:
        inv = self.inv
        saved = inv.save(0)
        groups = frozenset(g for g, s in inv.group_nodes.items() if s)
        free = (int(inv.cpu_free[0]), int(inv.mem_free[0]), int(inv.gpu_free[0]), int(inv.share_top[0]),
                int(inv.pods_alloc[0] - inv.pods_used[0]))
        slices = tuple(sorted((p, tuple(v)) for p, v in saved[4].items()))
        return _State(saved, groups, free, (saved[:3], saved[3].tobytes(), slices, groups))

    def _load(self, st: _State) -> None:
        self.inv.group_nodes = {g: {0} for g in st.groups}
        self.inv.restore(0, st.saved)

    def fill(self, st: _State, req: Request, cap: int) -> tuple[int, _State]:
        """How many of ``req`` (at most ``cap``) one node in this state takes, and the state after."""
        if not st.may_fit(req):
            return 0, st
        self._load(st)
        profile = profile_of(self.config, req)
        n = 0
        while n < cap and place(self.state, profile, req) is not None:
            n += 1
        return n, self._current() if n else st

    def score(self, st: _State, req: Request) -> int:
        self._load(st)
        return int(profile_of(self.config, req).score(self.state, req, np.zeros(1, np.int64))[0])


class _Slots:
    """The estimate's nodes: slots in opening order, nodes in equal states merged."""

    def __init__(self, tpl: _Template, starting: int):
        self.tpl = tpl
        self.all: list[_Slot] = [_Slot(starting, tpl.empty, False, 0)] if starting > 0 else []
        self.opened = 0

    def add(self, count: int, st: _State, new: bool) -> None:
        for slot in self.all:
            if slot.new == new and slot.state.key == st.key:
                slot.count += count
                return
        self.all.append(_Slot(count, st, new, len(self.all)))

    def move(self, slot: _Slot, count: int, st: _State) -> None:
        """``count`` nodes of ``slot`` are now in state ``st``."""
        slot.count -= count
        self.add(count, st, slot.new)

    def open(self, count: int, st: _State) -> None:
        self.opened += count
        self.add(count, st, True)

    def ranked(self, req: Request) -> list[_Slot]:
        """The slots that may hold ``req``, best-scoring first (ties: opened first)."""
        fit = [s for s in self.all if s.count and s.state.may_fit(req)]
        if len(fit) <= 1:
            return fit
        return sorted(fit, key=lambda s: (-self.tpl.score(s.state, req), s.order))


def estimate(pool_name: str, node: Node, wanted: Sequence[Demand], config: ClusterConfig, *,
             starting: int = 0, limit: int | None = None, now: datetime | None = None) -> Estimate:
    """New nodes shaped like ``node`` (see :func:`template_node`) that ``wanted`` needs, after the
    pool's ``starting`` nodes (the same shape) are filled; at most ``limit`` new nodes (None: any)."""
    tpl = _Template(node, config, now or datetime.now(timezone.utc))
    slots = _Slots(tpl, starting)
    room = math.inf if limit is None else max(0, limit)
    on_new: list[int] = []
    on_starting: list[int] = []
    never: list[int] = []
    over: list[int] = []
    requested = [0.0, 0.0, 0.0]
    order = sorted(range(len(wanted)), key=lambda k: (-size(wanted[k].request, node), k))

    def book(req: Request, ids: Sequence[int], new: bool) -> None:
        (on_new if new else on_starting).extend(ids)
        if new:
            share = req.gpus + req.gpu_share_milli / 1000 + req.mig_count
            for k, v in enumerate((req.cpu_milli, req.memory_mib, share)):
                requested[k] += v * req.nodes * len(ids)

    for k in order:
        req, ids = wanted[k].request, list(wanted[k].jobs)
        worker = dataclasses.replace(req, nodes=1) if req.nodes > 1 else req
        if tpl.fill(tpl.empty, worker, 1)[0] == 0:
            never.extend(ids)
            continue
        if req.nodes > 1:
            for job_id in ids:
                new = _gang(slots, worker, req.nodes, room)
                if new is None:
                    over.append(job_id)
                else:
                    book(req, [job_id], new)
            continue
        for slot in slots.ranked(worker):
            if not ids:
                break
            f, after = tpl.fill(slot.state, worker, len(ids))
            if f == 0:
                continue
            full = min(slot.count, len(ids) // f)
            if full:
                book(req, ids[:full * f], slot.new)
                ids = ids[full * f:]
                slots.move(slot, full, after)
            if ids and slot.count and len(ids) < f:
                book(req, ids, slot.new)
                slots.move(slot, 1, tpl.fill(slot.state, worker, len(ids))[1])
                ids = []
        if ids:
            f, after = tpl.fill(tpl.empty, worker, len(ids))
            full = int(min(len(ids) // f, room - slots.opened))
            if full:
                slots.open(full, after)
                book(req, ids[:full * f], True)
                ids = ids[full * f:]
            if ids and slots.opened < room and len(ids) < f:
                slots.open(1, tpl.fill(tpl.empty, worker, len(ids))[1])
                book(req, ids, True)
                ids = []
            over.extend(ids)
    opened = slots.opened
    return Estimate(pool_name, opened, tuple(on_new), tuple(on_starting), tuple(never), tuple(over),
                    tuple(requested), (opened * node.cpu_milli, opened * node.memory_mib, opened * len(node.gpus)))


def _gang(slots: _Slots, worker: Request, nodes: int, room: float) -> bool | None:
    """Place one gang on ``nodes`` distinct nodes: the best-scoring slots with room for a worker,
    then new nodes; all or nothing (None when ``room`` leaves too few new nodes). Whether it
    uses nodes this estimate adds."""
    taken = []
    need = nodes
    for slot in slots.ranked(worker):
        if not need:
            break
        f, after = slots.tpl.fill(slot.state, worker, 1)
        if f:
            k = min(slot.count, need)
            taken.append((slot, k, after))
            need -= k
    if need > room - slots.opened:
        return None
    for slot, k, after in taken:
        slots.move(slot, k, after)
    if need:
        slots.open(need, slots.tpl.fill(slots.tpl.empty, worker, 1)[1])
    return bool(need) or any(slot.new for slot, _, _ in taken)


def nodes_needed(pool: str, template: NodeTemplate, pending_requests: Sequence[Demand], snapshot: Snapshot,
                 config: ClusterConfig, *, starting: int = 0, limit: int | None = None,
                 now: datetime | None = None) -> Estimate:
    """How many nodes of ``template`` the ``pending_requests`` that do not fit on the pool's current
    nodes in ``snapshot`` (nor on its ``starting`` nodes) need, at most ``limit``
    (``max_nodes`` minus the current nodes, or the group's spare)."""
    now = now or datetime.now(timezone.utc)
    mine = [n for n in snapshot.nodes if n.pool == pool]
    current = Snapshot(tuple(mine), tuple(a for a in snapshot.allocations if a.node in {n.name for n in mine}))
    left = fits_now(World(current, config, now), pending_requests)
    return estimate(pool, template_node(pool, config.pools[pool], template), left, config,
                    starting=starting, limit=limit, now=now)


def choose_pool(options: Iterable[Estimate], order: Sequence[str]) -> Estimate | None:
    """The option to carry out: the least waste (:attr:`Estimate.waste`) among those adding nodes for
    some job; ties go to the pool listed first in ``order`` (the config's order)."""
    rank = {p: k for k, p in enumerate(order)}
    useful = [o for o in options if o.nodes > 0 and o.on_new]
    if not useful:
        return None
    return min(useful, key=lambda o: (round(o.waste, 9), rank.get(o.pool, len(rank)), o.pool))


@dataclass(frozen=True)
class Growth:
    """The pools to grow for a backlog, chosen one at a time (:func:`grow`)."""

    chosen: Mapping[str, Estimate] = field(default_factory=dict)
    """Pool → the estimate carried out (its ``on_starting`` jobs included)."""
    never_fit: tuple[int, ...] = ()
    """Jobs no template of any candidate pool can hold."""
    over_limit: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    """Pool → jobs its template holds but its limit does not allow."""


def grow(candidates: Mapping[str, tuple[Node, int, int | None]], wanted: Sequence[Demand], config: ClusterConfig,
         now: datetime) -> Growth:
    """Spread ``wanted`` over autoscaled pools. ``candidates``: pool → (template node, starting
    nodes, limit on new nodes).

    1. Every pool's starting nodes take what they can (config order).
    2. Each demand (jobs of one shape) ranks the pools by the waste of its own estimate there —
       cluster-autoscaler's least-waste expander, asked per shape rather than once for the whole
       backlog, so that CPU jobs do not ride along on the GPU nodes a GPU backlog wins (ties: config
       order).
    3. Each pool estimates the demands that rank it first, together; jobs beyond its limit go to
       their next pool, until none moves.
    """
    order = [p for p in config.pools if p in candidates]
    chosen: dict[str, Estimate] = {}
    left = list(wanted)
    for p in order:
        node, starting, _ = candidates[p]
        if starting and left:
            est = estimate(p, node, left, config, starting=starting, limit=0, now=now)
            if est.on_starting:
                chosen[p] = est
                left = _without(left, set(est.on_starting))
    never: list[int] = []
    ranks: dict[tuple, list[str]] = {}
    assigned: dict[str, list[Demand]] = {p: [] for p in order}
    for d in left:
        alone = [estimate(p, candidates[p][0], [d], config, now=now) for p in order]
        useful = sorted((o for o in alone if o.on_new), key=lambda o: (round(o.waste, 9), order.index(o.pool)))
        if not useful:
            never.extend(d.jobs)
            continue
        ranks[d.request.shape_key()] = [o.pool for o in useful]
        assigned[useful[0].pool].append(d)
    results: dict[str, Estimate] = {}
    over: dict[str, list[int]] = {}
    dirty = [p for p in order if assigned[p]]
    while dirty:
        p = min(dirty, key=order.index)
        dirty.remove(p)
        est = results[p] = estimate(p, candidates[p][0], assigned[p], config, limit=candidates[p][2], now=now)
        beyond = set(est.over_limit)
        if not beyond:
            continue
        for d in assigned[p]:
            spill = tuple(j for j in d.jobs if j in beyond)
            ranked = ranks[d.request.shape_key()]
            later = ranked[ranked.index(p) + 1:]
            if spill and later:
                assigned[later[0]].append(Demand(d.request, spill))
                if later[0] not in dirty:
                    dirty.append(later[0])
            elif spill:
                over.setdefault(p, []).extend(spill)
        assigned[p] = _without(assigned[p], beyond)
    for p, est in results.items():
        if est.nodes:
            prev = chosen.get(p)
            chosen[p] = dataclasses.replace(est, over_limit=tuple(over.get(p, ())),
                                            on_starting=prev.on_starting if prev else ())
    return Growth(chosen, tuple(sorted(never)), {p: tuple(v) for p, v in over.items()})


def _without(wanted: Sequence[Demand], ids: set[int]) -> list[Demand]:
    out = []
    for d in wanted:
        rest = tuple(j for j in d.jobs if j not in ids)
        if rest:
            out.append(Demand(d.request, rest))
    return out
