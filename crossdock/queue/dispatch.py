"""Which dispatch tasks carry out a cycle's placements (pure): one per job, one per group of
array tasks submitted together, or one per batch of separate jobs for one pool."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

from crossdock.queue.models import Job
from crossdock.queue.ports import Capabilities
from crossdock.queue.scheduler.decisions import Placement

BATCH_SIZE = 64
"""Separate jobs per batch dispatch task: enough to amortise the task, few enough that several
workers share a large cycle."""


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


def dispatch_groups(placements: Sequence[Placement], jobs: dict[int, Job], running_per_array: dict[int, int],
                    capabilities: Callable[[str], Capabilities]) -> list[DispatchGroup]:
    """Tasks of one array placed in one pool of a backend that ``arrays`` with the same attempt
    form one group; other jobs for one pool of a backend that ``batches`` go in batches (one task
    submits them together, each its own backend job); the rest go alone. A group's throttle is
    its array's free slots at the start of the cycle (``max_running`` less its tasks already
    placed), so that the backend never runs more tasks of the array at once than crossdock would."""
    out: list[DispatchGroup] = []
    groups: dict[tuple[str, str, int, int], list[int]] = {}
    loose: dict[tuple[str, str], list[tuple[int, int]]] = {}
    for p in placements:
        job = jobs[p.job_id]
        attempt = job.attempts + 1
        can = capabilities(p.backend)
        if can.arrays and job.array_job_id is not None and job.array_task_id is not None:
            groups.setdefault((p.backend, p.pool, job.array_job_id, attempt), []).append(p.job_id)
        elif can.batches:
            loose.setdefault((p.backend, p.pool), []).append((p.job_id, attempt))
        else:
            out.append(DispatchGroup(p.backend, attempt, (p.job_id,)))
    for (kind, pool, array_job_id, attempt), ids in groups.items():
        if len(ids) == 1:
            if capabilities(kind).batches:
                loose.setdefault((kind, pool), []).append((ids[0], attempt))
            else:
                out.append(DispatchGroup(kind, attempt, (ids[0],)))
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
