"""The evictor: which running jobs may be moved at all, and how many per node, queue and plan.

The upstream DefaultEvictor's rules with crossdock's own on top: never a service replica, never a
non-preemptible job, never a job at or above ``priorityThreshold``; a job that is already
stopping, moved too often (``max_migrations_per_job``) or too recently (``cooldown_seconds``),
younger than ``minPodAgeSeconds``, or covered by a disruption budget with nothing left, stays.
The caps are ``maxNoOfPodsToEvictPerNode``, ``…PerNamespace`` (per queue) and ``…Total``.
"""

from __future__ import annotations

from datetime import datetime

from crossdock.queue.config import ClusterConfig
from crossdock.queue.deschedule.budgets import BudgetLedger
from crossdock.queue.deschedule.view import Candidate, is_service_replica
from crossdock.queue.states import JobState


def threshold_of(config: ClusterConfig) -> int | None:
    t = config.descheduler.evictor.priorityThreshold
    if t is None:
        return None
    if t.value is not None:
        return t.value
    return config.priority_classes[t.name].value  # type: ignore[index]


class Evictor:
    def __init__(self, config: ClusterConfig, ledger: BudgetLedger, now: datetime):
        self.cfg = config.descheduler
        self.threshold = threshold_of(config)
        self.ledger, self.now = ledger, now.timestamp()
        self.per_node: dict[str, int] = {}
        self.per_queue: dict[str, int] = {}
        self.total = 0
        self.taken: set[int] = set()

    def why_not(self, c: Candidate, below: int | None = None) -> str | None:
        """Why ``c`` may not be moved (None: it may); ``below``: only jobs of strictly lower priority."""
        job = c.job
        if is_service_replica(job):
            return "service replica (never moved)"
        if not job.preemptible:
            return f"not preemptible (priority class {job.priority_class or job.queue})"
        if self.threshold is not None and job.priority >= self.threshold:
            return f"priority {job.priority} ≥ threshold {self.threshold}"
        if below is not None and job.priority >= below:
            return f"priority {job.priority} is not below {below}"
        if job.id in self.taken:
            return "already moved by this plan"
        if job.state is not JobState.RUNNING or job.preempt_requested or job.cancel_requested:
            return "not running (starting or already stopping)"
        rec = c.history
        if rec is not None:
            if rec.count >= self.cfg.defrag.max_migrations_per_job:
                return f"moved {rec.count} time(s) already (max_migrations_per_job {self.cfg.defrag.max_migrations_per_job})"
            ago = self.now - rec.last_at
            if ago < self.cfg.defrag.cooldown_seconds:
                return f"moved {ago:.0f} s ago (cooldown {self.cfg.defrag.cooldown_seconds:g} s)"
        age = self.now - job.start_time.timestamp() if job.start_time else 0.0
        if age < self.cfg.evictor.minPodAgeSeconds:
            return f"running for {age:.0f} s (minPodAgeSeconds {self.cfg.evictor.minPodAgeSeconds:g})"
        blocking = self.ledger.blocking(c.subject())
        if blocking is not None:
            return f"disruption budget {blocking} has no disruption left"
        return self.why_capped(c)

    def why_capped(self, c: Candidate, extra: int = 0) -> str | None:
        cfg = self.cfg
        if cfg.maxNoOfPodsToEvictTotal is not None and self.total + extra >= cfg.maxNoOfPodsToEvictTotal:
            return f"maxNoOfPodsToEvictTotal {cfg.maxNoOfPodsToEvictTotal} reached"
        if cfg.maxNoOfPodsToEvictPerNamespace is not None and \
                self.per_queue.get(c.job.queue, 0) + extra >= cfg.maxNoOfPodsToEvictPerNamespace:
            return f"maxNoOfPodsToEvictPerNamespace {cfg.maxNoOfPodsToEvictPerNamespace} reached for queue {c.job.queue}"
        if cfg.maxNoOfPodsToEvictPerNode is not None:
            for a in c.allocations:
                if self.per_node.get(a.node, 0) + extra >= cfg.maxNoOfPodsToEvictPerNode:
                    return f"maxNoOfPodsToEvictPerNode {cfg.maxNoOfPodsToEvictPerNode} reached on {a.node}"
        return None

    def allows_together(self, group: list[Candidate]) -> str | None:
        """Why these may not all go in one plan (caps and budgets counted over the group)."""
        cfg = self.cfg
        if cfg.maxNoOfPodsToEvictTotal is not None and self.total + len(group) > cfg.maxNoOfPodsToEvictTotal:
            return f"maxNoOfPodsToEvictTotal {cfg.maxNoOfPodsToEvictTotal}"
        counts: dict[tuple[str, str], int] = {}
        for c in group:
            counts[("q", c.job.queue)] = counts.get(("q", c.job.queue), 0) + 1
            for a in c.allocations:
                counts[("n", a.node)] = counts.get(("n", a.node), 0) + 1
        for (kind, name), n in counts.items():
            if kind == "q" and cfg.maxNoOfPodsToEvictPerNamespace is not None and \
                    self.per_queue.get(name, 0) + n > cfg.maxNoOfPodsToEvictPerNamespace:
                return f"maxNoOfPodsToEvictPerNamespace {cfg.maxNoOfPodsToEvictPerNamespace} for queue {name}"
            if kind == "n" and cfg.maxNoOfPodsToEvictPerNode is not None and \
                    self.per_node.get(name, 0) + n > cfg.maxNoOfPodsToEvictPerNode:
                return f"maxNoOfPodsToEvictPerNode {cfg.maxNoOfPodsToEvictPerNode} on {name}"
        return self.ledger.blocking_group([c.subject() for c in group])

    def take(self, c: Candidate) -> None:
        self.taken.add(c.id)
        self.total += 1
        self.per_queue[c.job.queue] = self.per_queue.get(c.job.queue, 0) + 1
        for a in c.allocations:
            self.per_node[a.node] = self.per_node.get(a.node, 0) + 1
        self.ledger.take(c.subject())
