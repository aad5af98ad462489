"""The ``descheduler:`` section of the admin config (``crossdock.queue.config`` holds it).

Field names are the upstream descheduler's (descheduler/v1alpha2 DeschedulerPolicy and its
plugins' args) where it has them; a namespace there is a queue here.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, field_validator, model_validator

from crossdock.queue.config_base import INT32, MAX_COUNT, YEAR_SECONDS, _Cfg

Percent = Annotated[float, Field(ge=0, le=100)]
"""A share of a node's allocatable, in percent, as the upstream thresholds are."""
UTILIZATION_RESOURCES = ("cpu", "memory", "pods", "nvidia.com/gpu")


def _thresholds(v: dict[str, float]) -> dict[str, float]:
    for name in v:
        if name not in UTILIZATION_RESOURCES:
            raise ValueError(f"{name}: unknown resource; use {', '.join(UTILIZATION_RESOURCES)}")
    return v


class PriorityThreshold(_Cfg):
    """Only jobs of priority strictly below this are evicted (DefaultEvictor's ``priorityThreshold``):
    a ``value``, or a priority class ``name``."""

    value: int | None = Field(None, ge=-INT32, le=INT32)
    name: str | None = None

    @model_validator(mode="after")
    def _one(self) -> "PriorityThreshold":
        if (self.value is None) == (self.name is None):
            raise ValueError("give exactly one of value and name (a priority class)")
        return self


class Evictor(_Cfg):
    """DefaultEvictor's rules. Non-preemptible jobs and service replicas are never evicted."""

    priorityThreshold: PriorityThreshold | None = None
    """None: every preemptible job may be evicted by the strategies (defragmentation still moves
    only jobs of strictly lower priority than the job it makes room for)."""
    nodeFit: bool = True
    """Evict only a job that fits on some other node now (upstream's default is false; moving a
    job that cannot land elsewhere only loses its work)."""
    minPodAgeSeconds: float = Field(0, ge=0, le=YEAR_SECONDS)
    """Upstream's ``minPodAge``: jobs running for less than this are left alone."""


class LowNodeUtilizationArgs(_Cfg):
    enabled: bool = False
    thresholds: dict[str, Percent] = Field(default_factory=lambda: {"nvidia.com/gpu": 20.0})
    """A node is under-utilised when every listed resource is below its threshold."""
    targetThresholds: dict[str, Percent] = Field(default_factory=lambda: {"nvidia.com/gpu": 50.0})
    """A node is over-utilised when any listed resource is above its target threshold."""
    useDeviationThresholds: bool = False
    numberOfNodes: int = Field(0, ge=0, le=MAX_COUNT)
    """Act only when more than this many nodes are under-utilised."""
    evictionLimits: dict[Literal["node"], int] = Field(default_factory=dict)

    @field_validator("thresholds", "targetThresholds")
    @classmethod
    def _known(cls, v: dict[str, float]) -> dict[str, float]:
        return _thresholds(v)

    @field_validator("evictionLimits")
    @classmethod
    def _limits(cls, v: dict[str, int]) -> dict[str, int]:
        for k, n in v.items():
            if not 0 <= n <= MAX_COUNT:
                raise ValueError(f"{k}: {n} must be within 0–{MAX_COUNT}")
        return v

    @model_validator(mode="after")
    def _below_targets(self) -> "LowNodeUtilizationArgs":
        for name, low in self.thresholds.items():
            high = self.targetThresholds.get(name)
            if high is not None and low > high:
                raise ValueError(f"thresholds.{name}: {low:g} is above targetThresholds.{name} {high:g};"
                                 " the low threshold must not exceed the target")
        return self


class HighNodeUtilizationArgs(_Cfg):
    """Compaction: empty the nodes below ``thresholds`` so their jobs pack elsewhere and the
    autoscaler can retire the empty nodes (needs binpack placement, upstream's MostAllocated)."""

    enabled: bool = False
    thresholds: dict[str, Percent] = Field(default_factory=lambda: {"nvidia.com/gpu": 20.0})
    numberOfNodes: int = Field(0, ge=0, le=MAX_COUNT)
    evictionModes: list[Literal["OnlyThresholdingResources"]] = Field(default_factory=list)

    @field_validator("thresholds")
    @classmethod
    def _known(cls, v: dict[str, float]) -> dict[str, float]:
        return _thresholds(v)


class RemovePodsViolatingNodeAffinityArgs(_Cfg):
    """Jobs whose node no longer matches their ``node_selector`` (or pool selector)."""

    enabled: bool = False
    nodeAffinityType: list[Literal["requiredDuringSchedulingIgnoredDuringExecution"]] = Field(
        default_factory=lambda: ["requiredDuringSchedulingIgnoredDuringExecution"], min_length=1)


class RemovePodsViolatingInterPodAntiAffinityArgs(_Cfg):
    """Two workers of an ``anti_affinity`` job (or tasks of one such array) on one node."""

    enabled: bool = False


class RemovePodsViolatingTopologySpreadConstraintArgs(_Cfg):
    """A gang with a ``topology`` key whose workers span several domains of it (after a node
    changed its label), or whose domains are skewed beyond ``maxSkew``."""

    enabled: bool = False
    constraints: list[Literal["DoNotSchedule", "ScheduleAnyway"]] = Field(
        default_factory=lambda: ["DoNotSchedule"], min_length=1)
    topologyBalanceNodeFit: bool = True


class RemoveDuplicatesArgs(_Cfg):
    """More than one task of one array on a node while other nodes could take them."""

    enabled: bool = False
    excludeOwnerKinds: list[str] = Field(default_factory=list)
    """``array``: leave array tasks alone (crossdock's one owner kind)."""


class PodLifeTimeArgs(_Cfg):
    enabled: bool = False
    maxPodLifeTimeSeconds: int = Field(86400, ge=1, le=10 * YEAR_SECONDS)
    states: list[Literal["Running"]] = Field(default_factory=lambda: ["Running"], min_length=1)
    """Only running jobs are evicted (a SCHEDULED job has not started anywhere yet)."""


class Defrag(_Cfg):
    """Moves preemptible jobs of strictly lower priority so a pending GPU job blocked by scattered
    free GPUs fits; each move's destination is reserved first and is never its source node."""

    enabled: bool = True
    max_migrations_per_job: int = Field(1, ge=1, le=MAX_COUNT)
    """How many times one job may be moved (Koordinator's per-workload limit, for one job)."""
    cooldown_seconds: float = Field(600, ge=0, le=YEAR_SECONDS)
    """A moved job is not moved again for this long, whatever the budget says."""
    max_migrations_per_blocked_job: int = Field(8, ge=1, le=4096)
    """The most moves spent to unblock one pending job; beyond it the job waits."""
    search_limit: int = Field(20000, ge=1, le=MAX_COUNT)
    """Subsets the exact minimal-move search may try per candidate node before a greedy fallback."""


class Strategies(_Cfg):
    LowNodeUtilization: LowNodeUtilizationArgs = Field(default_factory=LowNodeUtilizationArgs)
    HighNodeUtilization: HighNodeUtilizationArgs = Field(default_factory=HighNodeUtilizationArgs)
    RemovePodsViolatingNodeAffinity: RemovePodsViolatingNodeAffinityArgs = Field(default_factory=RemovePodsViolatingNodeAffinityArgs)
    RemovePodsViolatingInterPodAntiAffinity: RemovePodsViolatingInterPodAntiAffinityArgs = Field(
        default_factory=RemovePodsViolatingInterPodAntiAffinityArgs)
    RemovePodsViolatingTopologySpreadConstraint: RemovePodsViolatingTopologySpreadConstraintArgs = Field(
        default_factory=RemovePodsViolatingTopologySpreadConstraintArgs)
    RemoveDuplicates: RemoveDuplicatesArgs = Field(default_factory=RemoveDuplicatesArgs)
    PodLifeTime: PodLifeTimeArgs = Field(default_factory=PodLifeTimeArgs)



class BudgetSelector(_Cfg):
    queue: str | None = None
    array_job_id: int | None = Field(None, ge=1, le=2**53)
    user: str | None = None
    labels: dict[str, str] = Field(default_factory=dict)


class DisruptionBudgetDecl(_Cfg):
    """A disruption budget declared in config (``minAvailable``/``maxUnavailable`` as a PDB has them)."""

    name: str = Field(min_length=1, max_length=253)
    selector: BudgetSelector = Field(default_factory=BudgetSelector)
    maxUnavailable: int | str | None = None
    minAvailable: int | str | None = None

    @field_validator("maxUnavailable", "minAvailable")
    @classmethod
    def _amount(cls, v: int | str | None) -> int | str | None:
        if v is None or (isinstance(v, int) and 0 <= v <= MAX_COUNT):
            return v
        if isinstance(v, str) and v.endswith("%") and v[:-1].isdigit() and int(v[:-1]) <= 100:
            return v
        raise ValueError(f"{v!r} is not a count within 0–{MAX_COUNT} or a percentage within 0%–100% (e.g. '50%')")

    @model_validator(mode="after")
    def _one(self) -> "DisruptionBudgetDecl":
        if (self.maxUnavailable is None) == (self.minAvailable is None):
            raise ValueError("give exactly one of maxUnavailable and minAvailable (a count or a percentage such as '50%')")
        return self


class Descheduler(_Cfg):
    """The descheduler (``descheduler:``): off unless enabled; ``dry_run`` plans and records
    events without evicting (upstream's ``--dry-run``)."""

    enabled: bool = False
    interval_seconds: float = Field(30, ge=0.05, le=YEAR_SECONDS)
    """Upstream's ``--descheduling-interval``."""
    dry_run: bool = False
    gracePeriodSeconds: int | None = Field(None, ge=0, le=65533)
    """Grace of an eviction; None: the job's priority class's ``grace_seconds``."""
    maxNoOfPodsToEvictPerNode: int | None = Field(None, ge=0, le=MAX_COUNT)
    maxNoOfPodsToEvictPerNamespace: int | None = Field(None, ge=0, le=MAX_COUNT)
    """Per queue (crossdock's namespace) and cycle."""
    maxNoOfPodsToEvictTotal: int | None = Field(None, ge=0, le=MAX_COUNT)
    evictor: Evictor = Field(default_factory=Evictor)
    defrag: Defrag = Field(default_factory=Defrag)
    strategies: Strategies = Field(default_factory=Strategies)
    budgets: list[DisruptionBudgetDecl] = Field(default_factory=list)

    @field_validator("budgets")
    @classmethod
    def _unique_budgets(cls, v: list[DisruptionBudgetDecl]) -> list[DisruptionBudgetDecl]:
        names = [b.name for b in v]
        dup = next((n for n in names if names.count(n) > 1), None)
        if dup is not None:
            raise ValueError(f"budget {dup!r} is declared twice; give every budget its own name")
        return v


def reference_errors(block: Any, classes: dict[str, Any], queues: dict[str, Any]) -> list[str]:
    """Names in the raw ``descheduler:`` block that point nowhere (a priority class, a queue)."""
    errors: list[str] = []
    if not isinstance(block, dict):
        return errors
    evictor = block.get("evictor")
    threshold = evictor.get("priorityThreshold") if isinstance(evictor, dict) else None
    name = threshold.get("name") if isinstance(threshold, dict) else None
    if isinstance(name, str) and name not in classes:
        errors.append(f"descheduler.evictor.priorityThreshold.name: unknown priority class {name!r};"
                      f" defined: {', '.join(sorted(classes)) or 'none'}")
    budgets = block.get("budgets")
    for i, b in enumerate(budgets if isinstance(budgets, list) else []):
        sel = b.get("selector") if isinstance(b, dict) else None
        queue = sel.get("queue") if isinstance(sel, dict) else None
        if isinstance(queue, str) and queue not in queues:
            errors.append(f"descheduler.budgets.{i}.selector.queue: unknown queue {queue!r};"
                          f" defined: {', '.join(sorted(queues)) or 'none'}")
    return errors
