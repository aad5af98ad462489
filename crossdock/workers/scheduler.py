"""The scheduling loop: one leader (a Redis lease) runs cycles and reconciles backends.

Each cycle: snapshot (store + inventories) -> ``run_cycle`` (pure) -> hand extra jobs to backend
queues (pools with ``backend_queue``) -> commit every decision in one pipelined round trip ->
send the dispatch tasks: one per group of array tasks admitted together to one Slurm or
Kubernetes pool (one Slurm array, one Indexed Job), one per batch of other jobs for such a pool,
one per local job. A crash between commit and send leaves jobs SCHEDULED without a dispatch
claim; :meth:`Scheduler.reconcile` resends them (one by one), and the dispatch claim makes a
duplicate harmless.

Backend queues: a pool with ``backend_queue: N`` lets up to N jobs wait inside its backend
beyond what fits now. After the cycle, jobs it left pending for lack of room (``Resources``,
or an array's ``JobArrayTaskLimit`` when the throttle can travel with the group) are admitted to
such a pool without nodes, if an empty node of the pool could take them; their capacity counts
once the backend reports them running (follow records the nodes). Jobs of a queue with a quota
never go there, since crossdock could not count them against it before they run.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Callable, Sequence

from crossdock.backends.base import BackendError, Inventory
from crossdock.queue.cycle import CycleResult, Placement, facts_of, run_cycle
from crossdock.queue.scheduler.request import build_request
from crossdock.queue.config import ClusterConfig
from crossdock.queue.models import DependencyType, Job
from crossdock.queue.scheduler.fairshare import accrue, dominant_share
from crossdock.queue.snapshot import Allocation, Node, Snapshot
from crossdock.queue.states import JobState, Reason
from crossdock.runtime import Runtime
from crossdock.service import save_inventory
from crossdock.workers.backends import backend

log = logging.getLogger(__name__)

SendTask = Callable[[str, list, str], None]
RESEND_AFTER_SECONDS = 15.0
LOST_AFTER_SECONDS = 60.0
ORPHAN_SWEEP_SECONDS = 60.0
GROUPED_BACKENDS = frozenset({"slurm", "k8s"})
"""Backends that take the tasks of one array as one submission (``submit_array``)."""


def _now() -> datetime:
    return datetime.now(timezone.utc)


@dataclass
class CycleStats:
    admitted: int = 0
    cancelled: int = 0
    pending: int = 0
    seconds: float = 0.0


class Scheduler:
    def __init__(self, rt: Runtime, send: SendTask, holder: str | None = None):
        self.rt, self.send = rt, send
        self.holder = holder or f"scheduler-{uuid.uuid4().hex[:8]}"
        self._inventory: dict[str, tuple[float, Inventory]] = {}
        self._next_orphan_sweep = 0.0

    # --- snapshot ----------------------------------------------------------------------------
    def inventory(self, refresh_seconds: float = 10.0) -> tuple[list[Node], list[Allocation]]:
        nodes: list[Node] = []
        foreign: list[Allocation] = []
        refreshed = False
        for kind in sorted({p.backend for p in self.rt.config.pools.values()}):
            cached = self._inventory.get(kind)
            if cached is None or time.monotonic() - cached[0] > refresh_seconds:
                try:
                    cached = (time.monotonic(), backend(kind, self.rt).inventory())
                except (BackendError, ImportError, OSError) as exc:
                    log.warning("inventory of %s unavailable: %s", kind, exc)
                    cached = (time.monotonic(), cached[1] if cached else Inventory(()))
                self._inventory[kind] = cached
                refreshed = True
            nodes.extend(cached[1].nodes)
            foreign.extend(cached[1].foreign)
        if refreshed:
            save_inventory(self.rt.store, nodes)
        return nodes, foreign

    def snapshot(self, pending: Sequence[Job], active: Sequence[Job]) -> Snapshot:
        store = self.rt.store
        nodes, foreign = self.inventory()
        allocations = list(foreign)
        running_per_array: dict[int, int] = {}
        for job in active:
            allocations.extend(_allocations(job, self.rt))
            if job.array_job_id is not None:
                running_per_array[job.array_job_id] = running_per_array.get(job.array_job_id, 0) + 1
        wanted: set[int] = set()
        for job in pending:
            dep = job.spec.dependency
            if dep is None:
                continue
            for d in dep.deps:
                if d.type is DependencyType.SINGLETON:
                    wanted.update(store.ids_by_name(job.spec.user, job.spec.display_name()))
                elif d.job_id is not None:
                    wanted.add(d.job_id)
                    wanted.update(store.array_ids(d.job_id))
        known = {j.id: j for j in [*pending, *active]}
        facts = {j.id: facts_of(j) for j in store.get_many(i for i in wanted if i not in known)}
        facts.update({j.id: facts_of(j) for j in known.values() if j.id in wanted})
        pending_ids = {j.id for j in pending}
        nominations = {int(k): v for k, v in store.r.hgetall(store.k.nominations).items() if int(k) in pending_ids}
        return Snapshot(nodes=tuple(nodes), allocations=tuple(allocations), jobs=facts,
                        running_per_array=running_per_array, usage=self.accrue_usage(nodes, active),
                        nominations=nominations)

    def accrue_usage(self, nodes: Sequence[Node], active: Sequence[Job]) -> dict[str, float]:
        """Decay fair-share usage and add each running job's dominant share for the time since
        the last cycle (Slurm's fair share with a half-life)."""
        store = self.rt.store
        raw = store.r.hgetall(store.k.usage)
        now = time.time()
        last = float(raw.pop("_at", now))
        capacity = (sum(n.cpu_milli for n in nodes) or 1, sum(n.memory_mib for n in nodes) or 1,
                    sum(len(n.gpus) for n in nodes) or 1)
        running = [(j.queue, j.spec.user, dominant_share(
            (j.alloc_cpu_milli or j.spec.cpus_per_node() * 1000) * len(j.nodes),
            j.alloc_mem_mib * len(j.nodes), len(j.gpu_ids), capacity))
            for j in active if j.state is JobState.RUNNING]
        half_life = self.rt.config.scheduler.fairshare_half_life_minutes * 60
        usage = accrue({k: float(v) for k, v in raw.items()}, running, max(now - last, 0.0), half_life)
        store.r.hset(store.k.usage, mapping={**usage, "_at": now})
        return usage

    # --- one cycle ---------------------------------------------------------------------------
    def cycle_once(self) -> CycleStats:
        t0 = time.perf_counter()
        store = self.rt.store
        pending = store.get_many(store.pending_ids())
        if not pending:
            return CycleStats(seconds=time.perf_counter() - t0)
        active = store.get_many(store.active_ids())
        snap = self.snapshot(pending, active)
        now = _now()
        result = run_cycle(snap, pending, self.rt.config, now)
        if any(p.backend_queue for p in self.rt.config.pools.values()):
            t1 = time.perf_counter()
            overflow(result, snap, pending, active, self.rt.config, now)
            result.timings["backend_queue"] = time.perf_counter() - t1
        self.commit(result, {j.id: j for j in [*pending, *active]}, snap.running_per_array)
        stats = CycleStats(len(result.admitted), len(result.cancelled), len(result.pending), time.perf_counter() - t0)
        log.debug("cycle: %s admitted, %s pending, %.3fs (%s)", stats.admitted, stats.pending, stats.seconds,
                  {k: round(v, 4) for k, v in result.timings.items()})
        return stats

    def commit(self, result: CycleResult, jobs: dict[int, Job],
               running_per_array: dict[int, int] | None = None) -> None:
        store = self.rt.store
        now = _now()
        with store.r.pipeline(transaction=True) as pipe:
            for p in result.admitted:
                store.transition(p.job_id, JobState.SCHEDULED, pipe=pipe, actor=self.holder, bump_attempt=True,
                                 fields={"nodes": list(p.nodes), "gpu_ids": list(p.gpu_ids), "pool": p.pool,
                                         "backend": p.backend, "reason": Reason.NONE, "scheduled_time": now,
                                         "alloc_cpu_milli": p.cpu_milli, "alloc_mem_mib": p.memory_mib})
            for job_id, reason in result.cancelled.items():
                store.transition(job_id, JobState.CANCELLED, pipe=pipe, actor=self.holder, reason=reason,
                                 fields={"end_time": now})
            outcomes = pipe.execute()
        moved = [p for p, (ok, _old) in zip(result.admitted, outcomes) if ok]
        for group in dispatch_groups(moved, jobs, running_per_array or {}):
            if group.batch:
                self.send("crossdock.dispatch_batch", [[list(p) for p in zip(group.job_ids, group.attempts)]],
                          group.backend)
            elif group.array_job_id is None:
                self.send("crossdock.dispatch", [group.job_ids[0], group.attempt], group.backend)
            else:
                self.send("crossdock.dispatch_array",
                          [group.array_job_id, group.attempt, list(group.job_ids), group.throttle], group.backend)
        for pre in result.preemptions:
            victim = jobs.get(pre.victim_id)
            if victim is not None and victim.backend:
                # marked at once, so the next snapshot counts the victim as terminating
                store.update_if(pre.victim_id, (JobState.SCHEDULED, JobState.RUNNING),
                                {"preempt_requested": "1", "preempt_grace": pre.grace_seconds})
                self.send("crossdock.preempt", [pre.victim_id, pre.grace_seconds], victim.backend)
        with store.r.pipeline(transaction=False) as pipe:
            done = [p.job_id for p in result.admitted] + list(result.cancelled)
            if done:
                pipe.hdel(store.k.nominations, *done)
            if result.nominations:
                pipe.hset(store.k.nominations, mapping={str(k): v for k, v in result.nominations.items()})
            pipe.execute()
        store.set_reasons(result.pending, result.explanations)

    # --- reconcile ---------------------------------------------------------------------------
    def reconcile(self) -> None:
        """Heal both ways: resend lost dispatches, mark jobs whose watcher vanished, follow remote backends."""
        store = self.rt.store
        active = store.get_many(store.active_ids())
        now = time.time()
        by_backend: dict[str, list[Job]] = {}
        for job in active:
            by_backend.setdefault(job.backend or "local", []).append(job)
        for kind, jobs in by_backend.items():
            if kind == "local":
                self._reconcile_local(jobs, now)
            else:
                self._follow(kind, jobs)
        if "k8s" in by_backend or any(p.backend == "k8s" for p in self.rt.config.pools.values()):
            self._delete_orphans("k8s", by_backend.get("k8s", []))

    def _delete_orphans(self, kind: str, active: list[Job]) -> None:
        """Remove backend objects left by a crash or a requeue that belong to no active attempt."""
        now = time.monotonic()
        if now < self._next_orphan_sweep:
            return
        self._next_orphan_sweep = now + ORPHAN_SWEEP_SECONDS
        try:
            for orphan in backend(kind, self.rt).delete_orphans(active):
                log.warning("deleted orphaned %s object %s", kind, orphan.ref)
        except (BackendError, ImportError, OSError) as exc:
            log.warning("orphan sweep of %s failed: %s", kind, exc)

    def _reconcile_local(self, jobs: list[Job], now: float) -> None:
        store = self.rt.store
        alive = store.alive([j.id for j in jobs])
        for job in jobs:
            scheduled = job.scheduled_time.timestamp() if job.scheduled_time else now
            if job.state is JobState.SCHEDULED:
                claimed = store.dispatch_claimed(job.id, job.attempts)
                if not claimed and now - scheduled > RESEND_AFTER_SECONDS:
                    log.warning("job %s: dispatch not picked up in %.0fs; resending", job.id, now - scheduled)
                    store.update_if(job.id, (JobState.SCHEDULED,), {"scheduled_time": _now()})
                    self.send("crossdock.dispatch", [job.id, job.attempts], "local")
                elif claimed and not alive[job.id] and now - scheduled > LOST_AFTER_SECONDS:
                    self._lost(job, "dispatched but never started")
            elif job.state is JobState.RUNNING and not alive[job.id]:
                self._lost(job, "its supervisor stopped reporting")

    def _lost(self, job: Job, why: str) -> None:
        store = self.rt.store
        log.warning("job %s lost: %s", job.id, why)
        if job.backend == "local":
            backend("local", self.rt).kill_orphan(job)
        if store.transition(job.id, JobState.NODE_FAIL, attempt=job.attempts, reason=Reason.NODE_LOST,
                            fields={"end_time": _now()}, actor=self.holder) and job.spec.requeue:
            store.requeue(job.id, actor=self.holder, reason=Reason.NODE_LOST)

    def _follow(self, kind: str, jobs: list[Job]) -> None:
        store = self.rt.store
        try:
            statuses = backend(kind, self.rt).status(jobs)
        except (BackendError, ImportError, OSError) as exc:
            log.warning("status of %s unavailable: %s", kind, exc)
            return
        now = time.time()
        changes: list[tuple[Job, JobState] | None] = []  # one entry per queued command
        with store.r.pipeline(transaction=False) as pipe:
            for job in jobs:
                st = statuses.get(job.id)
                if st is None:
                    scheduled = job.scheduled_time.timestamp() if job.scheduled_time else now
                    if job.state is JobState.RUNNING or (job.backend_ref and now - scheduled > LOST_AFTER_SECONDS):
                        self._lost(job, f"{kind} no longer knows it")
                    elif not store.dispatch_claimed(job.id, job.attempts) and now - scheduled > RESEND_AFTER_SECONDS:
                        store.update_if(job.id, (JobState.SCHEDULED,), {"scheduled_time": _now()})
                        self.send("crossdock.dispatch", [job.id, job.attempts], kind)
                    continue
                # Waiting inside the backend (Slurm PENDING, or requeued there by the backend itself) is
                # SCHEDULED for crossdock: the backend owns that attempt and will start it again.
                state = JobState.SCHEDULED if st.state is JobState.PENDING else st.state
                if state is job.state:
                    if st.reason and job.state is JobState.SCHEDULED and st.reason != job.reason:
                        store.update_if(job.id, (JobState.SCHEDULED,), {"reason": st.reason}, pipe=pipe)
                        changes.append(None)
                    continue
                fields = {"exit_code": st.exit_code if st.exit_code is not None else "",
                          "nodes": list(st.nodes) or job.nodes}
                if st.signal is not None:
                    fields["signal"] = st.signal
                if state is JobState.RUNNING:
                    fields["start_time"] = _now()
                elif state.terminal or state is JobState.PREEMPTED:
                    fields["end_time"] = _now()
                # One round trip for every change of the pass (a 1,000-task array finishes together).
                store.transition(job.id, state, fields=fields, reason=st.reason, actor=kind, pipe=pipe)
                changes.append((job, state))
            outcomes = pipe.execute()
        for change, outcome in zip(changes, outcomes):
            if change is None:
                continue
            (job, state), (ok, old) = change, outcome
            if ok:
                log.info("job %s: %s -> %s", job.id, old, state.value)
                if state is JobState.PREEMPTED and job.spec.requeue:
                    store.requeue(job.id, actor=kind, reason=Reason.PREEMPTED)

    # --- the loop ----------------------------------------------------------------------------
    def _wait_for_work(self, stop: threading.Event, interval: float, tick: float = 0.05) -> None:
        """Sleep until the next cycle is due, or until new jobs arrive (the pending index grows):
        a submission is scheduled within ``tick`` s rather than up to ``interval`` s later."""
        store = self.rt.store
        deadline = time.monotonic() + interval
        seen = store.r.zcard(store.k.pending)
        while not stop.wait(min(tick, max(deadline - time.monotonic(), 0))):
            if time.monotonic() >= deadline or store.r.zcard(store.k.pending) > seen:
                return

    def run(self, stop: threading.Event, reconcile_every: float = 2.0) -> None:
        cfg = self.rt.config.scheduler
        next_reconcile = 0.0
        leader = False
        try:
            while not stop.is_set():
                was_leader, leader = leader, self.rt.store.acquire_lease(self.holder, cfg.lease_seconds)
                if leader != was_leader:
                    log.info("%s %s leadership", self.holder, "took" if leader else "lost")
                if leader:
                    wait = cfg.interval_seconds
                    try:
                        self.cycle_once()
                        if time.monotonic() >= next_reconcile:
                            next_reconcile = time.monotonic() + reconcile_every
                            self.reconcile()
                        # the next cycle, or the next follow if it is due sooner
                        wait = min(wait, max(next_reconcile - time.monotonic(), 0.05))
                    except Exception:
                        log.exception("scheduling cycle failed; retrying next interval")
                    self._wait_for_work(stop, wait)
                else:
                    stop.wait(cfg.lease_seconds / 3)
        finally:
            if leader:
                self.rt.store.release_lease(self.holder)


# --- backend queues and grouped dispatch ---------------------------------------------------------

OVERFLOW_REASONS = frozenset({Reason.RESOURCES, Reason.ARRAY_TASK_LIMIT})


def overflow(result: CycleResult, snap: Snapshot, pending: Sequence[Job], active: Sequence[Job],
             config: ClusterConfig, now: datetime) -> list[Placement]:
    """Admit jobs the cycle left waiting for room to pools with a ``backend_queue``, without nodes.

    Each pool takes at most its ``backend_queue`` less the jobs already waiting in it (SCHEDULED
    without nodes). A job goes to the first such pool of its own where an empty node could run it
    (the cycle's own filters, run once per job shape on the pool's nodes with nothing on them). An
    array's throttled tasks (``JobArrayTaskLimit``) go only when the array has free slots at the
    start of the cycle and all its tasks of this cycle land in one pool: the group's submission
    then carries the throttle (``%free slots``), which the backend enforces. Returns what it added
    to ``result.admitted`` (and removed from ``result.pending``)."""
    pools = {name: p.backend_queue for name, p in config.pools.items() if p.backend_queue and p.backend != "local"}
    if not pools:
        return []
    room = dict(pools)
    for job in active:
        if job.state is JobState.SCHEDULED and not job.nodes and job.pool in room:
            room[job.pool] -= 1
    if all(r <= 0 for r in room.values()):
        return []
    by_id = {j.id: j for j in pending}
    admitted_pool: dict[int, set[str]] = {}
    for p in result.admitted:
        job = by_id.get(p.job_id)
        if job is not None and job.array_job_id is not None:
            admitted_pool.setdefault(job.array_job_id, set()).add(p.pool)
    quota_queues = {name for name, q in config.queues.items() if q.quota.model_dump(exclude_defaults=True)}
    empty = Snapshot(nodes=tuple(n for n in snap.nodes if n.pool in pools), jobs=snap.jobs, usage=snap.usage)
    target: dict[tuple, str | None] = {}
    added: list[Placement] = []
    held: dict[int, list[Placement]] = {}  # throttled arrays' extra tasks, until their pool is known to be one
    for job in sorted((by_id[i] for i, why in result.pending.items() if why in OVERFLOW_REASONS and i in by_id),
                      key=lambda j: (-j.priority, j.spec.nice, j.id)):
        if job.queue in quota_queues:
            continue
        throttled = result.pending[job.id] == Reason.ARRAY_TASK_LIMIT
        if throttled:
            arr = job.spec.array
            if job.array_job_id is None or arr is None or arr.max_running is None \
                    or snap.running_per_array.get(job.array_job_id, 0) >= arr.max_running:
                continue
        key = (job.queue, job.priority_class, build_request(job, config).shape_key())
        if key not in target:
            probe = run_cycle(empty, [job.model_copy(update={"array_job_id": None, "spec": job.spec.model_copy(
                update={"dependency": None, "array": None})})], config, now)
            target[key] = probe.admitted[0] if probe.admitted else None  # type: ignore[assignment]
        probe_placement = target[key]
        if probe_placement is None or room.get(probe_placement.pool, 0) <= 0:  # type: ignore[union-attr]
            continue
        pool = probe_placement.pool  # type: ignore[union-attr]
        room[pool] -= 1
        placement = Placement(job.id, pool, probe_placement.backend, (), (),  # type: ignore[union-attr]
                              probe_placement.cpu_milli, probe_placement.memory_mib)  # type: ignore[union-attr]
        if job.array_job_id is not None and job.spec.array is not None and job.spec.array.max_running is not None:
            admitted_pool.setdefault(job.array_job_id, set()).add(pool)
            held.setdefault(job.array_job_id, []).append(placement)
            continue
        added.append(placement)
    for array_job_id, placements in held.items():
        if len(admitted_pool[array_job_id]) == 1:
            added.extend(placements)
        else:
            for p in placements:
                room[p.pool] += 1
    for p in added:
        result.admitted.append(p)
        result.pending.pop(p.job_id, None)
        result.explanations.pop(p.job_id, None)
    if added:
        log.debug("backend queues: %s jobs handed over beyond free capacity", len(added))
    return added


@dataclass(frozen=True)
class DispatchGroup:
    """What one dispatch task submits: one job; tasks of one array as one backend submission
    (``array_job_id``); or a batch of separate jobs for one pool (``attempts``, one per job)."""

    backend: str
    attempt: int
    job_ids: tuple[int, ...]
    array_job_id: int | None = None
    throttle: int | None = None
    attempts: tuple[int, ...] = ()

    @property
    def batch(self) -> bool:
        return bool(self.attempts)


BATCH_SIZE = 64
"""Separate jobs per batch dispatch task: enough to amortise the task, few enough that several
workers share a large cycle."""


def dispatch_groups(placements: Sequence[Placement], jobs: dict[int, Job],
                    running_per_array: dict[int, int]) -> list[DispatchGroup]:
    """Tasks of one array placed in one Slurm or Kubernetes pool with the same attempt form one
    group; other jobs for one such pool go in batches (one task submits them together, each its
    own backend job); local jobs go alone. A group's throttle is its array's free slots at the
    start of the cycle (``max_running`` less its tasks already placed), so that the backend
    never runs more tasks of the array at once than crossdock would."""
    out: list[DispatchGroup] = []
    groups: dict[tuple[str, str, int, int], list[int]] = {}
    loose: dict[tuple[str, str], list[tuple[int, int]]] = {}
    for p in placements:
        job = jobs[p.job_id]
        attempt = job.attempts + 1
        if p.backend not in GROUPED_BACKENDS:
            out.append(DispatchGroup(p.backend, attempt, (p.job_id,)))
        elif job.array_job_id is not None and job.array_task_id is not None:
            groups.setdefault((p.backend, p.pool, job.array_job_id, attempt), []).append(p.job_id)
        else:
            loose.setdefault((p.backend, p.pool), []).append((p.job_id, attempt))
    for (kind, pool, array_job_id, attempt), ids in groups.items():
        if len(ids) == 1:
            loose.setdefault((kind, pool), []).append((ids[0], attempt))
            continue
        arr = jobs[ids[0]].spec.array
        throttle = None
        if arr is not None and arr.max_running is not None:
            throttle = max(arr.max_running - running_per_array.get(array_job_id, 0), 1)
        out.append(DispatchGroup(kind, attempt, tuple(sorted(ids)), array_job_id, throttle))
    for (kind, _pool), pairs in loose.items():
        for i in range(0, len(pairs), BATCH_SIZE):
            chunk = pairs[i:i + BATCH_SIZE]
            if len(chunk) == 1:
                out.append(DispatchGroup(kind, chunk[0][1], (chunk[0][0],)))
            else:
                out.append(DispatchGroup(kind, chunk[0][1], tuple(j for j, _ in chunk),
                                         attempts=tuple(a for _, a in chunk)))
    return out


def _allocations(job: Job, rt: Runtime) -> list[Allocation]:
    pc = rt.config.priority_classes.get(job.priority_class)
    cpu = job.alloc_cpu_milli or job.spec.cpus_per_node() * 1000
    mem = job.alloc_mem_mib or job.spec.mem_per_node(0)
    by_node: dict[str, list[str]] = {}
    for g in job.gpu_ids:
        by_node.setdefault(g.rsplit(":", 1)[0], []).append(g)
    return [Allocation(job.id, node, cpu, mem, tuple(by_node.get(node, ())), priority=job.priority,
                       preemptible=job.preemptible, queue=job.queue, user=job.spec.user, start_time=job.start_time,
                       time_limit_seconds=job.spec.time_limit_seconds, grace_seconds=pc.grace_seconds if pc else 0,
                       group=job.array_job_id, terminating=job.preempt_requested)
            for node in job.nodes]


def celery_sender(app) -> SendTask:
    from crossdock.workers.app import queue_for

    def send(name: str, args: list, backend_kind: str) -> None:
        app.send_task(name, args=args, queue=queue_for(backend_kind))

    return send
