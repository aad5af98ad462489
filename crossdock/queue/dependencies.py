"""Slurm dependency semantics, evaluated on snapshot facts.

Each dependency is *satisfied*, *waiting* or *never* (cannot be satisfied any more). ``AND``
(``,``) needs all satisfied and is never as soon as one is never; ``OR`` (``?``) needs one
satisfied and is never only when all are.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from enum import Enum
from typing import Iterable, Mapping

from crossdock.queue.models import Dependency, DependencySpec, DependencyType
from crossdock.queue.snapshot import JobFacts
from crossdock.queue.states import JobState


class DepStatus(Enum):
    SATISFIED = "satisfied"
    WAITING = "waiting"
    NEVER = "never"


def _targets(dep: Dependency, jobs: Mapping[int, JobFacts], by_array: Mapping[int, list[JobFacts]]) -> list[JobFacts]:
    if dep.job_id is None:
        return []
    if dep.array_task is not None:
        return [j for j in by_array.get(dep.job_id, []) if j.array_task_id == dep.array_task]
    # A whole array is named by its array job id: every task counts.
    if dep.job_id in by_array:
        return by_array[dep.job_id]
    target = jobs.get(dep.job_id)
    return [target] if target else []


def _one(dep: Dependency, me: JobFacts, jobs: Mapping[int, JobFacts],
         by_array: Mapping[int, list[JobFacts]], now: datetime) -> DepStatus:
    if dep.type is DependencyType.SINGLETON:
        earlier = [j for j in jobs.values() if j.name == me.name and j.user == me.user and j.id < me.id
                   and not j.state.terminal]
        return DepStatus.WAITING if earlier else DepStatus.SATISFIED
    targets = _targets(dep, jobs, by_array)
    if dep.type is DependencyType.AFTERCORR and me.array_task_id is not None:
        targets = [t for t in targets if t.array_task_id == me.array_task_id] or targets
    if not targets:
        # Unknown (purged long ago) jobs count as finished successfully, as in Slurm.
        return DepStatus.SATISFIED
    statuses = [_target_status(dep, t, now) for t in targets]
    if DepStatus.NEVER in statuses:
        return DepStatus.NEVER
    if all(s is DepStatus.SATISFIED for s in statuses):
        return DepStatus.SATISFIED
    return DepStatus.WAITING


def _target_status(dep: Dependency, t: JobFacts, now: datetime) -> DepStatus:
    kind = dep.type
    if kind is DependencyType.AFTER:
        if t.state is JobState.PENDING or t.state is JobState.SCHEDULED:
            return DepStatus.WAITING
        if dep.delay_minutes and t.start_time is not None:
            if now < t.start_time + timedelta(minutes=dep.delay_minutes):
                return DepStatus.WAITING
        return DepStatus.SATISFIED
    if not t.state.terminal:
        return DepStatus.WAITING
    if kind is DependencyType.AFTERANY or kind is DependencyType.AFTERBURSTBUFFER:
        return DepStatus.SATISFIED
    ok = t.state is JobState.COMPLETED
    if kind in (DependencyType.AFTEROK, DependencyType.AFTERCORR):
        return DepStatus.SATISFIED if ok else DepStatus.NEVER
    if kind is DependencyType.AFTERNOTOK:
        return DepStatus.NEVER if ok else DepStatus.SATISFIED
    raise ValueError(f"unhandled dependency type {kind}")


def evaluate(spec: DependencySpec | None, me: JobFacts, jobs: Mapping[int, JobFacts], now: datetime) -> DepStatus:
    if spec is None:
        return DepStatus.SATISFIED
    by_array: dict[int, list[JobFacts]] = {}
    for j in jobs.values():
        if j.array_job_id is not None:
            by_array.setdefault(j.array_job_id, []).append(j)
    statuses = [_one(d, me, jobs, by_array, now) for d in spec.deps]
    if spec.combine == "OR":
        if DepStatus.SATISFIED in statuses:
            return DepStatus.SATISFIED
        return DepStatus.NEVER if all(s is DepStatus.NEVER for s in statuses) else DepStatus.WAITING
    if DepStatus.NEVER in statuses:
        return DepStatus.NEVER
    return DepStatus.SATISFIED if all(s is DepStatus.SATISFIED for s in statuses) else DepStatus.WAITING


def referenced_ids(spec: DependencySpec | None) -> Iterable[int]:
    if spec is None:
        return ()
    return [d.job_id for d in spec.deps if d.job_id is not None]
