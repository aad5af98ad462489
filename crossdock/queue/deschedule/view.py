"""The descheduler's picture of the cluster: the cycle's own inventory, filters and scores (built
by the scheduling cycle's snapshot phase), the pending jobs as requests, and every running job
as a :class:`Candidate` with what it holds and how often it was moved already."""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime
from typing import Mapping, Sequence

import numpy as np

from crossdock.queue.config import ClusterConfig
from crossdock.queue.deschedule.budgets import BudgetSubject
from crossdock.queue.deschedule.migration import MoveRecord
from crossdock.queue.models import Job
from crossdock.queue.scheduler.decisions import CycleResult
from crossdock.queue.scheduler.inventory import Assignment
from crossdock.queue.scheduler.pipeline import Cycle
from crossdock.queue.scheduler.placement import assign_worker
from crossdock.queue.scheduler.registry import Profile
from crossdock.queue.scheduler.request import Request, build_request
from crossdock.queue.snapshot import Allocation, Snapshot
from crossdock.queue.states import JobState


def is_service_replica(job: Job) -> bool:
    """A replica of an inference service (``JobSpec.service``): never moved."""
    return job.spec.service is not None


@dataclass(frozen=True)
class Candidate:
    """A running job, as something the descheduler might move."""

    job: Job
    allocations: tuple[Allocation, ...]
    request: Request
    """Its request as if it were pending (where it could go instead)."""
    nodes: tuple[int, ...]
    """Inventory indexes of the nodes it runs on."""
    history: MoveRecord | None

    @property
    def id(self) -> int:
        return self.job.id

    @property
    def gpus(self) -> int:
        return sum(len(a.gpu_ids) for a in self.allocations)

    def subject(self) -> BudgetSubject:
        return subject_of(self.job)


def subject_of(job: Job) -> BudgetSubject:
    return BudgetSubject(job.id, job.queue, job.spec.user, job.array_job_id,
                         healthy=job.state is JobState.RUNNING and not job.preempt_requested)


class View:
    """Built once per plan; strategies simulate on it (take, give back) and leave what they keep."""

    def __init__(self, snapshot: Snapshot, pending: Sequence[Job], active: Sequence[Job], config: ClusterConfig,
                 now: datetime, history: Mapping[int, MoveRecord] | None = None):
        self.snapshot, self.config, self.now = snapshot, config, now
        self.history = dict(history or {})
        self.pending_requests: list[tuple[Job, Request]] = []
        for job in pending:
            try:
                self.pending_requests.append((job, build_request(job, config)))
            except Exception:  # the cycle sets such a job aside; so does the descheduler
                continue
        self.cycle = Cycle(snapshot, config, now, CycleResult())
        self.cycle.build([r for _, r in self.pending_requests])
        self.inv, self.state = self.cycle.inv, self.cycle.state
        by_job: dict[int, list[Allocation]] = {}
        for a in snapshot.allocations:
            if a.job_id is not None:
                by_job.setdefault(a.job_id, []).append(a)
        self.candidates: list[Candidate] = []
        self.subjects = [subject_of(j) for j in [*active, *pending]]
        for job in active:
            allocs = tuple(by_job.get(job.id, ()))
            idx = tuple(self.inv.index[a.node] for a in allocs if a.node in self.inv.index)
            if not allocs or not idx:
                continue
            try:
                req = build_request(job, config)
            except Exception:
                continue
            self.candidates.append(Candidate(job, allocs, req, idx, self.history.get(job.id)))
        self.on_node: dict[int, list[Candidate]] = {}
        for c in self.candidates:
            for i in c.nodes:
                self.on_node.setdefault(i, []).append(c)

    def profile(self, req: Request) -> Profile:
        return self.cycle.profile_of(req)

    def name(self, i: int) -> str:
        return self.inv.nodes[i].name

    # --- simulation ----------------------------------------------------------------------------
    def release(self, c: Candidate) -> None:
        for a in c.allocations:
            self.inv.release(a)

    def restore(self, c: Candidate) -> None:
        for a in c.allocations:
            self.inv.apply(a)

    def fits_on(self, req: Request, i: int) -> bool:
        return len(self.profile(req).feasible(self.state, req, np.array([i], np.int64))) == 1

    def assign(self, req: Request, i: int) -> Assignment | None:
        return assign_worker(self.inv, req, i)

    def destinations(self, c: Candidate, avoid: set[int]) -> list[int]:
        """Nodes (single-node jobs) where ``c`` could run now, never one of ``avoid`` or its own,
        best first by its own profile's scores (then node order, as the cycle breaks ties)."""
        req = away_from(c, avoid, self)
        profile = self.profile(req)
        cand = profile.feasible(self.state, req)
        if len(cand) == 0:
            return []
        scores = profile.score(self.state, req, cand)
        return cand[np.lexsort((cand, -scores))].tolist()

    def place_away(self, c: Candidate, avoid: set[int], allowed: set[int] | None = None) -> Assignment | None:
        """Reserve ``c``'s best destination (not its own nodes, not ``avoid``); None when none fits."""
        req = away_from(c, avoid, self)
        for i in self.destinations(c, avoid):
            if allowed is not None and i not in allowed:
                continue
            a = self.assign(req, i)
            if a is not None:
                return a
        return None


def away_from(c: Candidate, avoid: set[int], view: View) -> Request:
    """``c``'s request with its own nodes and ``avoid`` excluded (never back to the source node)."""
    names = frozenset(view.name(i) for i in {*c.nodes, *avoid})
    return replace(c.request, exclude=c.request.exclude | names)
