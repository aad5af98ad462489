"""The cycle's last phase: jobs left waiting for room go to pools with a ``backend_queue``.

A pool with ``backend_queue: N`` lets up to N jobs wait inside its backend (Slurm's queue, a
Kubernetes pool's pending pods) beyond what fits now, placed by the backend within the pool, so
that a 1,000-task array is one submission. Jobs of a queue with a quota never go there: crossdock
could not count them against it before they run. Their capacity counts once the backend reports
them running (follow records the nodes).
"""

from __future__ import annotations

import logging
from dataclasses import replace
from datetime import datetime
from typing import Sequence

from crossdock.queue.bursting import bursting_queues, route_pool
from crossdock.queue.config import ClusterConfig
from crossdock.queue.models import Job
from crossdock.queue.scheduler.decisions import CycleResult, Placement
from crossdock.queue.scheduler.pipeline import Cycle
from crossdock.queue.scheduler.request import build_request
from crossdock.queue.snapshot import Snapshot
from crossdock.queue.states import Reason

log = logging.getLogger(__name__)

WAITING_REASONS = frozenset({Reason.RESOURCES, Reason.ARRAY_TASK_LIMIT})


def probe(empty: Snapshot, job: Job, config: ClusterConfig, now: datetime) -> Placement | None:
    """Where the cycle's own filters and scores would put ``job`` on ``empty``'s idle nodes."""
    result = CycleResult()
    cycle = Cycle(empty, config, now, result)
    req = build_request(job, config)
    cycle.build([req])
    for r in cycle.order([req]):
        cycle.schedule(r)
    return result.admitted[0] if result.admitted else None


def _alone(job: Job) -> Job:
    """The job as a probe places it: its own shape, no dependency, no array."""
    return job.model_copy(update={"array_job_id": None, "spec": job.spec.model_copy(
        update={"dependency": None, "array": None})})


def _burst(job: Job, key: tuple, default: Placement, target: dict, empty: Snapshot, room: dict[str, int],
           snap: Snapshot, config: ClusterConfig, now: datetime, pools: list[str]) -> Placement | None:
    """Bursting: of the job's queue's ``pools`` with room whose empty node could run it (probed once
    per shape and pool), the one :func:`crossdock.queue.bursting.route_pool` picks by expected start."""
    fits: dict[str, Placement] = {default.pool: default} if room.get(default.pool, 0) > 0 else {}
    for pool in pools:
        if pool in fits or room.get(pool, 0) <= 0:
            continue
        if (key, pool) not in target:
            only = replace(empty, nodes=tuple(n for n in empty.nodes if n.pool == pool))
            target[(key, pool)] = probe(only, _alone(job), config, now)
        if target[(key, pool)] is not None:
            fits[pool] = target[(key, pool)]
    if not fits:
        return default  # no room anywhere: it waits (the caller checks the room)
    return fits[route_pool(job, list(fits), default.pool if default.pool in fits else next(iter(fits)), snap, config)]


def admit_to_backend_queues(result: CycleResult, snap: Snapshot, pending: Sequence[Job], config: ClusterConfig,
                            now: datetime) -> list[Placement]:
    """Admit jobs the cycle left waiting for room to pools with a ``backend_queue``, without nodes.

    Each pool takes at most its ``backend_queue`` less the jobs already waiting in it
    (``snap.backend_queued``). A job goes to the first such pool of its own where an empty node
    could run it (:func:`probe`, once per job shape, on the pools' nodes with nothing on them), or,
    for a job of a queue that bursts between backends, to the one of its pools where it is expected
    to start first (:mod:`crossdock.queue.bursting`).
    An array's throttled tasks (``JobArrayTaskLimit``) go only when the array has free slots at
    the start of the cycle and all its tasks of this cycle land in one pool: the group's
    submission then carries the throttle (``%free slots``), which the backend enforces. Returns
    what it added to ``result.admitted`` (and removed from ``result.pending``)."""
    pools = {name: p.backend_queue for name, p in config.pools.items() if p.backend_queue}
    if not pools:
        return []
    room = {name: n - snap.backend_queued.get(name, 0) for name, n in pools.items()}
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
    target: dict[tuple, Placement | None] = {}
    bursting = bursting_queues(config) if snap.start_estimates else {}
    added: list[Placement] = []
    held: dict[int, list[Placement]] = {}  # throttled arrays' extra tasks, until their pool is known to be one
    for job in sorted((by_id[i] for i, why in result.pending.items() if why in WAITING_REASONS and i in by_id),
                      key=lambda j: (-j.priority, j.spec.nice, j.id)):
        if job.queue in quota_queues:
            continue
        if result.pending[job.id] == Reason.ARRAY_TASK_LIMIT:
            arr = job.spec.array
            if job.array_job_id is None or arr is None or arr.max_running is None \
                    or snap.running_per_array.get(job.array_job_id, 0) >= arr.max_running:
                continue
        key = (job.queue, job.priority_class, build_request(job, config).shape_key())
        if key not in target:
            target[key] = probe(empty, _alone(job), config, now)
        found = target[key]
        if found is not None and job.queue in bursting and snap.start_estimates.get(job.id):
            found = _burst(job, key, found, target, empty, room, snap, config, now, bursting[job.queue])
        if found is None or room.get(found.pool, 0) <= 0:
            continue
        room[found.pool] -= 1
        placement = Placement(job.id, found.pool, found.backend, (), (), found.cpu_milli, found.memory_mib)
        if job.array_job_id is not None and job.spec.array is not None and job.spec.array.max_running is not None:
            admitted_pool.setdefault(job.array_job_id, set()).add(found.pool)
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
