"""Disruption budgets: how many of a set of jobs may be down at once (Kubernetes' PodDisruptionBudget).

A budget selects jobs by queue, array, user and labels (all given must match), or lists the jobs
its backend found for it (``jobs``: a PodDisruptionBudget's own selector, resolved by Kubernetes),
and bounds disruptions with ``max_unavailable`` or ``min_available``: a count or a percentage of
the jobs it covers, rounded up as the disruption controller rounds them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Mapping

from crossdock.queue.config_deschedule import DisruptionBudgetDecl


@dataclass(frozen=True)
class BudgetSubject:
    """What a budget's selector is matched against: one job, as the descheduler sees it."""

    job_id: int
    queue: str = ""
    user: str = ""
    array_job_id: int | None = None
    labels: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    healthy: bool = True
    """Running now (an evicted job waiting to be placed again is covered but unhealthy)."""


@dataclass(frozen=True)
class DisruptionBudget:
    name: str
    queue: str | None = None
    array_job_id: int | None = None
    user: str | None = None
    labels: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    jobs: frozenset[int] | None = None
    """The jobs the backend matched to this budget; None: match by the selector fields."""
    max_unavailable: int | str | None = None
    min_available: int | str | None = None
    """A count (``1``) or a percentage (``"50%"``); exactly one of the two is given."""
    disruptions_allowed: int | None = None
    """What the backend itself computed (a PDB's ``status.disruptionsAllowed``); None: compute it."""

    def __post_init__(self) -> None:
        if (self.max_unavailable is None) == (self.min_available is None):
            raise ValueError(f"budget {self.name}: give exactly one of max_unavailable and min_available")
        for value in (self.max_unavailable, self.min_available):
            if value is not None:
                _amount(value, 1)  # validates

    def covers(self, subject: BudgetSubject) -> bool:
        if self.jobs is not None:
            return subject.job_id in self.jobs
        return ((self.queue is None or subject.queue == self.queue)
                and (self.user is None or subject.user == self.user)
                and (self.array_job_id is None or subject.array_job_id == self.array_job_id)
                and all(subject.labels.get(k) == v for k, v in self.labels.items()))

    def allowed(self, covered: list[BudgetSubject]) -> int:
        """How many more of ``covered`` (every job the budget covers) may be disrupted now."""
        healthy = sum(s.healthy for s in covered)
        if self.disruptions_allowed is not None:
            return max(0, self.disruptions_allowed)
        expected = len(covered)
        if self.min_available is not None:
            return max(0, healthy - _amount(self.min_available, expected))
        return max(0, _amount(self.max_unavailable, expected) - (expected - healthy))  # type: ignore[arg-type]


def _amount(value: int | str, total: int) -> int:
    """A count, or a percentage of ``total`` rounded up (as the disruption controller does)."""
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is not a count or a percentage")
    if isinstance(value, int):
        if value < 0:
            raise ValueError(f"{value} must be ≥ 0")
        return value
    if isinstance(value, str) and value.endswith("%") and value[:-1].isdigit() and int(value[:-1]) <= 100:
        return math.ceil(int(value[:-1]) * total / 100)
    raise ValueError(f"{value!r} is not a count or a percentage such as '50%'")


class BudgetLedger:
    """The budgets during one plan: each eviction taken from every budget covering the job."""

    def __init__(self, budgets: list[DisruptionBudget], subjects: list[BudgetSubject]):
        self._budgets = budgets
        self._left = {b.name: b.allowed([s for s in subjects if b.covers(s)]) for b in budgets}

    def blocking(self, subject: BudgetSubject) -> str | None:
        """The name of a budget that has no disruption left for ``subject``; None: it may go."""
        for b in self._budgets:
            if b.covers(subject) and self._left[b.name] <= 0:
                return b.name
        return None

    def blocking_group(self, subjects: list[BudgetSubject]) -> str | None:
        """The name of a budget these together would overdraw; None: they may all go."""
        for b in self._budgets:
            n = sum(b.covers(s) for s in subjects)
            if n and self._left[b.name] < n:
                return f"disruption budget {b.name} allows {max(self._left[b.name], 0)}"
        return None

    def take(self, subject: BudgetSubject) -> None:
        for b in self._budgets:
            if b.covers(subject):
                self._left[b.name] -= 1


def declared_budgets(decls: list[DisruptionBudgetDecl]) -> list[DisruptionBudget]:
    """The budgets of the config's ``descheduler.budgets``."""
    return [DisruptionBudget(name=d.name, queue=d.selector.queue, array_job_id=d.selector.array_job_id,
                             user=d.selector.user, labels=MappingProxyType(dict(d.selector.labels)),
                             max_unavailable=d.maxUnavailable, min_available=d.minAvailable) for d in decls]
