"""One scheduling cycle: the seam every scheduler plugs into.

``run_cycle(snapshot, pending, config, now)`` reads the snapshot, decides, and returns a
:class:`CycleResult`; it performs no I/O. The caller commits the decisions atomically and
dispatches them. The phases live in :mod:`crossdock.queue.scheduler` (framework, plugins,
fair share, quota, preemption, backfill); ``run_cycle`` is their numbered pipeline. It leaves
process-wide state alone: a caller that wants Python's cyclic garbage collector paused during the
cycle wraps the call (``crossdock.gcpause.collection_paused``).
"""

from __future__ import annotations

import logging
import time
from datetime import datetime, timedelta
from typing import Sequence

from crossdock.queue.backend_queue import admit_to_backend_queues
from crossdock.queue.config import ClusterConfig
from crossdock.queue.dependencies import DepStatus, evaluate
from crossdock.queue.models import Job
from crossdock.queue.scheduler.decisions import CycleResult, Placement, Preemption, Reservation
from crossdock.queue.scheduler.pipeline import Cycle
from crossdock.queue.scheduler.request import Request, build_request
from crossdock.queue.snapshot import JobFacts, Snapshot
from crossdock.queue.states import Reason

__all__ = ["CycleResult", "Placement", "Preemption", "Reservation", "check_request", "eligibility", "facts_of", "order",
           "run_cycle"]

log = logging.getLogger(__name__)


def facts_of(job: Job) -> JobFacts:
    return JobFacts(id=job.id, state=job.state, exit_code=job.exit_code, name=job.spec.display_name(),
                    user=job.spec.user, array_job_id=job.array_job_id, array_task_id=job.array_task_id,
                    end_time=job.end_time, start_time=job.start_time)


def eligibility(job: Job, snapshot: Snapshot, now: datetime, running_per_array: dict[int, int]) -> str | None:
    """None when ``job`` may be placed now; else the pending reason (or DependencyNeverSatisfied)."""
    deadline = job.spec.deadline  # held or not, as Slurm does
    if deadline is not None and now + timedelta(seconds=job.spec.time_min_seconds or job.spec.time_limit_seconds or 0) > deadline:
        return Reason.DEADLINE
    if job.spec.hold:
        return Reason.JOB_HELD_USER
    if job.eligible_time is not None and job.eligible_time > now:
        return Reason.BEGIN_TIME
    if job.spec.dependency is not None:
        dep = evaluate(job.spec.dependency, facts_of(job), snapshot.jobs, now)
        if dep is DepStatus.NEVER:
            return Reason.DEPENDENCY_NEVER_SATISFIED
        if dep is DepStatus.WAITING:
            return Reason.DEPENDENCY
    arr = job.spec.array
    if job.array_job_id is not None and arr is not None and arr.max_running is not None:
        if running_per_array.get(job.array_job_id, 0) >= arr.max_running:
            return Reason.ARRAY_TASK_LIMIT
    return None


_EXACT = 2**53
"""Amounts at or above this lose precision in the float and int64 arithmetic of a cycle."""


def check_request(req: Request, now: datetime) -> None:
    """Raise ValueError when the cycle could not compute with ``req``: amounts its arrays cannot
    hold, a time limit whose end no datetime can hold. Admission keeps such values out; jobs
    stored before it did, or by a client that went around it, are caught here."""
    for name in ("nodes", "cpu_milli", "memory_mib", "gpus", "gpu_share_milli", "mig_count", "priority", "nice"):
        value = getattr(req, name)
        if not isinstance(value, int) or not -_EXACT < value < _EXACT:
            raise ValueError(f"{name} {value!r} is out of range")
    if req.time_limit_s is not None:
        now + timedelta(seconds=req.time_limit_s)  # OverflowError past year 9999


def _set_aside(result: CycleResult, job_id: int, exc: Exception) -> None:
    """One job the cycle cannot evaluate waits with InvalidSpec; the cycle goes on for the others."""
    log.warning("job %s set aside: %s: %s", job_id, type(exc).__name__, exc)
    result.pending[job_id] = Reason.INVALID_SPEC
    result.explanations[job_id] = (f"the scheduler cannot evaluate this job ({type(exc).__name__}: {exc});"
                                   " cancel it and submit it again with values crossdock accepts")


def order(pending: Sequence[Job]) -> list[Job]:
    """Priority class value first, then nice (lower first), then submit order."""
    return sorted(pending, key=lambda j: (-j.priority, j.spec.nice, j.id))


def run_cycle(snapshot: Snapshot, pending: Sequence[Job], config: ClusterConfig, now: datetime) -> CycleResult:
    result = CycleResult()
    marks = [("start", time.perf_counter())]

    def lap(phase: str) -> None:
        marks.append((phase, time.perf_counter()))
        result.timings[phase] = marks[-1][1] - marks[-2][1]

    # 1. eligibility: holds, begin times, dependencies, array throttles
    running_per_array = dict(snapshot.running_per_array)
    eligible: list[Job] = []
    for job in order(pending):
        try:
            reason = eligibility(job, snapshot, now, running_per_array)
        except Exception as exc:  # one job's spec must not stop everyone's cycle
            _set_aside(result, job.id, exc)
            continue
        if reason in (Reason.DEPENDENCY_NEVER_SATISFIED, Reason.DEADLINE):
            result.cancelled[job.id] = reason
        elif reason is not None:
            result.pending[job.id] = reason
        else:
            eligible.append(job)
            if job.array_job_id is not None:
                running_per_array[job.array_job_id] = running_per_array.get(job.array_job_id, 0) + 1
    lap("eligibility")
    # 2. requests: what each job needs per node, its constraints and limits
    requests = []
    for job in eligible:
        try:
            req = build_request(job, config)
            check_request(req, now)
        except Exception as exc:
            _set_aside(result, job.id, exc)
            continue
        requests.append(req)
    lap("requests")
    # 3. snapshot: inventory arrays, quota ledger, nominated capacity, typical pods
    cycle = Cycle(snapshot, config, now, result)
    cycle.build(requests)
    lap("snapshot")
    # 4. order: priority, then fair share (dominant share over weight), then age, then id
    ordered = cycle.order(requests)
    lap("order")
    # 5. schedule: pre-filter, filter, score, reserve, admit; else preempt or reserve (backfill)
    for req in ordered:
        try:
            cycle.schedule(req)
        except Exception as exc:
            _set_aside(result, req.job_id, exc)
    lap("schedule")
    # 6. backend queues: jobs still waiting for room, to pools that queue inside their backend
    if any(p.backend_queue for p in config.pools.values()):
        admit_to_backend_queues(result, snapshot, pending, config, now)
        lap("backend_queue")
    result.timings.update(cycle.phase_time)
    for phase, seconds in result.timings.items():
        log.debug("cycle phase %s: %.6f s", phase, seconds)
    return result
