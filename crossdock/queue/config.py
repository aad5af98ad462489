"""Admin configuration: priority classes, pools and queues, validated from data it is handed.

``parse_config(data, source)`` returns a validated :class:`ClusterConfig` or raises
:class:`ConfigError` listing every problem with its path (``queues.training.per_job.gpu: must be
≥ 0``). ``lint`` returns warnings about settings that are legal but risky. Reading the YAML file
is :func:`crossdock.configfile.load_config`'s job (runtime, CLI, client); this module touches no file.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, Mapping

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from crossdock.queue.errors import ConfigError, shown
from crossdock.queue.ports import Capabilities
from crossdock.queue.serving import ServiceSpec

RESOURCE_WEIGHTS = ("cpu", "memory", "nvidia.com/gpu")
SCORE_PLUGINS = ("BalancedAllocation", "CrossdockGpu", "GpuFragmentation", "LeastAllocated", "MostAllocated",
                 "RequestedToCapacityRatio", "ServiceSpread", "TaintToleration")
"""The score plugins a queue's ``plugin_weights`` may name: the vocabulary of the config, kept here so
that validating a config needs no plugin; the scheduler's registry holds exactly these scores
(``tests/unit/scheduler/test_scheduler_framework.py`` checks both lists agree)."""
Placement = Literal["binpack", "spread", "most-requested", "balanced"]


from crossdock.queue.config_base import (INT32, MAX_COUNT, MAX_NODE_CPUS, MAX_NODE_GPUS,  # noqa: F401
                                          MAX_NODE_MEMORY_MIB, YEAR_SECONDS, _Cfg)
from crossdock.queue.config_deschedule import Descheduler, DisruptionBudgetDecl, reference_errors  # noqa: F401
from crossdock.queue.config_limits import Limits
from crossdock.queue.config_services import Services


class PriorityClass(_Cfg):
    value: int = Field(ge=-INT32, le=INT32)
    preemptible: bool = False
    preemption_policy: Literal["PreemptLowerPriority", "Never"] = "PreemptLowerPriority"
    grace_seconds: int = Field(30, ge=0, le=65533)
    """Slurm's GraceTime is 16 bits."""
    description: str = ""


class PoolGpu(_Cfg):
    model: str | None = None
    sharing: bool = False
    """Whether fractions of one GPU may be placed on this pool's GPUs."""
    mig: bool = False


class NodeDecl(_Cfg):
    """A node declared in config, for backends that cannot discover their nodes (local, simulator).
    ``cpus``/``memory_mib`` may say ``auto`` on a backend that measures its own node
    (``Capabilities.sizes_nodes``: the local machine); a number is used as declared."""

    name: str = Field(min_length=1, max_length=255)
    cpus: Annotated[int, Field(ge=1, le=MAX_NODE_CPUS)] | Literal["auto"]
    memory_mib: Annotated[int, Field(ge=1, le=MAX_NODE_MEMORY_MIB)] | Literal["auto"]
    gpus: int = Field(0, ge=0, le=MAX_NODE_GPUS)
    gpu_model: str | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    cpuset: str | None = Field(None, max_length=1024, description="local backend: the machine's CPUs this node's"
                               " jobs are pinned to, in Linux's list format (0-3,8); several nodes may split one machine")

    @field_validator("cpuset")
    @classmethod
    def _cpuset(cls, v: str | None) -> str | None:
        if v is not None:
            cpu_list(v)  # raises ValueError naming what is wrong
        return v

    @model_validator(mode="after")
    def _cpus_fit_the_cpuset(self) -> NodeDecl:
        if self.cpuset is not None and isinstance(self.cpus, int) and self.cpus > len(cpu_list(self.cpuset)):
            raise ValueError(f"cpus {self.cpus} is more than the {len(cpu_list(self.cpuset))} CPUs of cpuset"
                             f" {self.cpuset!r}; declare cpus: {len(cpu_list(self.cpuset))} or a larger cpuset")
        return self


def cpu_list(text: str) -> frozenset[int]:
    """The CPUs of a Linux CPU list (``0-3,8``, as ``taskset -c`` and ``cpuset.cpus`` write them)."""
    cpus: set[int] = set()
    for part in text.split(","):
        lo, sep, hi = part.strip().partition("-")
        if not lo.isdigit() or (sep and not hi.isdigit()) or (sep and int(hi) < int(lo)):
            raise ValueError(f"{text!r} is not a CPU list: {part.strip()!r} is neither N nor N-M (M >= N);"
                             " write it as taskset -c does, e.g. 0-3,8")
        if int(hi or lo) >= MAX_NODE_CPUS:
            raise ValueError(f"{text!r}: CPU {int(hi or lo)} is beyond {MAX_NODE_CPUS - 1}")
        cpus.update(range(int(lo), int(hi or lo) + 1))
    return frozenset(cpus)


class NodeTemplate(_Cfg):
    """The shape of the nodes an autoscaler adds to a pool (cluster-autoscaler's template node)."""

    cpus: int = Field(ge=1, le=MAX_NODE_CPUS)
    memory_mib: int = Field(ge=1, le=MAX_NODE_MEMORY_MIB)
    gpus: int = Field(0, ge=0, le=MAX_NODE_GPUS)
    gpu_model: str | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    taints: list[str] = Field(default_factory=list)
    """``key=value:Effect`` or ``key:Effect``, as ``kubectl taint`` writes them."""
    max_pods: int | None = Field(None, ge=1, le=MAX_COUNT)


class Pool(_Cfg):
    backend: str = Field(min_length=1)
    """A backend kind (``local``, ``slurm``, ``k8s``…): checked against the backends the process
    knows, with what each can do, when the config is loaded (``parse_config(..., backends=)``)."""
    selector: dict[str, str] = Field(default_factory=dict)
    partition: str | None = None
    gpu: PoolGpu = Field(default_factory=PoolGpu)
    tolerations: list[dict[str, str]] = Field(default_factory=list)
    nodes: list[NodeDecl] = Field(default_factory=list)
    min_nodes: int = Field(0, ge=0, le=MAX_COUNT)
    max_nodes: int | None = Field(None, ge=0, le=MAX_COUNT)
    provisioner: str | None = None
    """What adds and removes this pool's nodes, one the backend offers (``Capabilities.provisioners``:
    ``kwok`` or ``karpenter`` on Kubernetes, ``power_save`` on Slurm); None: the pool is static."""
    node_template: NodeTemplate | None = None
    """The nodes a provisioner adds (Slurm's power saving powers up the partition's own nodes instead)."""
    features: dict[str, dict[str, str]] | None = None
    """The node features ``--constraint`` may name here, each as the node labels it stands for
    (``{a100: {gpu.model: A100}, ib: {net: infiniband}}``). None: the pool has no map; a Slurm
    pool (one with a ``partition``) then passes ``--constraint`` to Slurm, which knows its nodes'
    features, and any other pool cannot take a constrained job."""
    backend_queue: int = Field(0, ge=0, le=MAX_COUNT)
    """How many jobs crossdock may hand to this pool's backend beyond what fits now, for the
    backend to queue (Slurm PENDING, Kubernetes Pending pods); 0 admits only what fits."""


class PerJob(_Cfg):
    cpu: float | None = Field(None, ge=0, le=MAX_COUNT * MAX_NODE_CPUS)
    gpu: float | None = Field(None, ge=0, le=MAX_COUNT * MAX_NODE_GPUS)
    mem_mib: int | None = Field(None, ge=0, le=MAX_COUNT * MAX_NODE_MEMORY_MIB)
    nodes: int | None = Field(None, ge=1, le=MAX_COUNT)


class Quota(_Cfg):
    cpu: float | None = Field(None, ge=0, le=MAX_COUNT * MAX_NODE_CPUS)
    gpu: float | None = Field(None, ge=0, le=MAX_COUNT * MAX_NODE_GPUS)
    mem_mib: int | None = Field(None, ge=0, le=MAX_COUNT * MAX_NODE_MEMORY_MIB)
    gpu_models: dict[str, float] = Field(default_factory=dict)
    cohort: str | None = None
    borrowing: bool = False
    max_running_per_user: int | None = Field(None, ge=1, le=INT32)

    @field_validator("gpu_models")
    @classmethod
    def _model_counts(cls, v: dict[str, float]) -> dict[str, float]:
        for model, n in v.items():
            if not 0 <= n <= MAX_COUNT * MAX_NODE_GPUS:
                raise ValueError(f"{model}: {n} GPUs must be within 0–{MAX_COUNT * MAX_NODE_GPUS}")
        return v


class ScalingPolicy(_Cfg):
    """One HPA scaling policy (autoscaling/v2 ``HPAScalingPolicy``)."""

    type: Literal["Pods", "Percent"]
    value: int = Field(gt=0, le=MAX_COUNT)
    periodSeconds: int = Field(gt=0, le=1800)


class ScalingRules(_Cfg):
    """One direction of an HPA ``behavior`` (autoscaling/v2 ``HPAScalingRules``); unset fields take
    the API server's defaults (:func:`crossdock.queue.autoscale.hpa.default_behavior`)."""

    stabilizationWindowSeconds: int | None = Field(None, ge=0, le=3600)
    selectPolicy: Literal["Max", "Min", "Disabled"] | None = None
    policies: list[ScalingPolicy] | None = None
    tolerance: float | None = Field(None, ge=0, le=1e6)

    @field_validator("policies")
    @classmethod
    def _some_policy(cls, policies: list[ScalingPolicy] | None) -> list[ScalingPolicy] | None:
        if policies is not None and not policies:
            raise ValueError("must specify at least one policy (as the API server requires);"
                             " leave policies out for the defaults, or set selectPolicy: Disabled")
        return policies


class Behavior(_Cfg):
    scaleUp: ScalingRules | None = None
    scaleDown: ScalingRules | None = None


class Fleet(_Cfg):
    """The replicas an elastic queue scales: worker processes on the local machine, or a Kubernetes
    Deployment (through its ``/scale`` subresource)."""

    backend: str = Field(min_length=1)
    name: str | None = Field(None, min_length=1, max_length=253)
    """The Deployment's name (Kubernetes); the local fleet has none."""
    namespace: str = Field("default", min_length=1, max_length=63)


class Elastic(_Cfg):
    metric: Literal["qps", "queue_length"]
    target: float | None = Field(None, gt=0, le=1e12)
    per_replica: float | None = Field(None, gt=0, le=1e12)
    min: int = Field(0, ge=0, le=MAX_COUNT)
    max: int | None = Field(None, ge=1, le=MAX_COUNT)
    activation: float = Field(0, ge=0, le=1e12)
    """KEDA's activation threshold: at or below it the queue is idle (scaled to ``min`` after the cooldown)."""
    cooldown_seconds: float = Field(300, ge=0, le=YEAR_SECONDS)
    """KEDA's ``cooldownPeriod``: how long an idle queue keeps its replicas before going to zero."""
    behavior: Behavior | None = None
    """HPA's ``behavior`` with its field names; None: HPA's legacy path (no behavior set)."""
    fleet: Fleet | None = None
    """What the replicas are; None: only the pools' nodes follow the backlog."""

    @model_validator(mode="after")
    def _target_and_bounds(self) -> "Elastic":
        needed = "per_replica" if self.metric == "queue_length" else "target"
        if getattr(self, needed) is None:
            what = "jobs one replica serves" if needed == "per_replica" else "requests per second one replica serves"
            raise ValueError(f"{needed}: required for metric {self.metric}; set the {what}")
        if self.max is not None and self.min > self.max:
            raise ValueError(f"min: {self.min} is above max {self.max}; lower min or raise max")
        return self


class Queue(_Cfg):
    priority_class: str
    pools: list[str] = Field(min_length=1)
    placement: Placement = "binpack"
    plugin_weights: dict[str, int] = Field(default_factory=dict)
    per_job: PerJob = Field(default_factory=PerJob)
    quota: Quota = Field(default_factory=Quota)
    weight: float = Field(1.0, gt=0, le=1e6)
    """Fair-share weight of this queue."""
    cpu_request_ratio: float = Field(1.0, gt=0, le=1)
    """CPU request as a fraction of the CPU limit (CPU is compressible; placement uses the request)."""
    default_time_minutes: int | None = Field(None, ge=1, le=YEAR_SECONDS // 60)
    elastic: Elastic | Literal["none"] = "none"

    @field_validator("plugin_weights")
    @classmethod
    def _known_weights(cls, weights: dict[str, int]) -> dict[str, int]:
        scores = sorted(SCORE_PLUGINS)
        for name, w in weights.items():
            if name in RESOURCE_WEIGHTS:
                if not 1 <= w <= 100:
                    raise ValueError(f"{name}: resource weight {w} must be within 1–100, as in kube-scheduler")
            elif name in scores:
                if not 0 <= w <= MAX_COUNT:
                    raise ValueError(f"{name}: plugin weight {w} must be within 0–{MAX_COUNT} (0 turns the plugin off)")
            else:
                raise ValueError(f"{name}: unknown; use a resource ({', '.join(RESOURCE_WEIGHTS)})"
                                 f" or a score plugin ({', '.join(scores)})")
        return weights


class Scheduler(_Cfg):
    interval_seconds: float = Field(1.0, ge=0.01, le=3600)
    max_array_size: int = Field(1001, ge=1, le=4_000_001)
    """Slurm's MaxArraySize, whose own ceiling is 4000001."""
    default_mem_per_cpu_mib: int = Field(100, ge=0, le=MAX_NODE_MEMORY_MIB)
    fairshare_half_life_minutes: float = Field(7 * 24 * 60, ge=1, le=10 * YEAR_SECONDS / 60)
    max_preemptions_per_cycle: int = Field(16, ge=0, le=MAX_COUNT)
    lease_seconds: float = Field(5.0, ge=0.5, le=3600)
    """A leader renews its lease once per cycle; below half a second, a busy cycle loses it."""
    requeue_delay_seconds: float = Field(0, ge=0, le=YEAR_SECONDS)
    kill_wait_seconds: float = Field(30, ge=0, le=65533)
    """Between SIGTERM and SIGKILL when a job hits its time limit or is cancelled (Slurm's KillWait)."""
    min_job_age_seconds: float = Field(300, ge=0, le=365 * 86400)
    """How long a finished job stays in the hot keys (``crossdock queue``, ``show``) before it moves
    to a compact history record (Slurm's MinJobAge)."""
    history_days: float = Field(30, gt=0, le=3650)
    """How long history records of finished jobs are kept."""

    @model_validator(mode="after")
    def _interval_within_lease(self) -> "Scheduler":
        # The leader renews its lease once per interval: an interval over half the lease lets
        # it lapse between cycles, and leadership would flap between standbys.
        if self.interval_seconds > self.lease_seconds / 2:
            raise ValueError(f"interval_seconds: {self.interval_seconds:g} must be ≤ half of lease_seconds"
                             f" ({self.lease_seconds:g}); raise lease_seconds to ≥ {2 * self.interval_seconds:g}"
                             " or lower interval_seconds")
        return self


class Autoscaler(_Cfg):
    """How pools follow the backlog; names and defaults from cluster-autoscaler's flags."""

    enabled: bool = True
    interval_seconds: float = Field(1.0, ge=0.05, le=3600)
    scale_down_unneeded_seconds: float = Field(600, ge=0, le=YEAR_SECONDS)
    scale_down_utilization_threshold: float = Field(0.5, ge=0, le=1)
    scale_down_gpu_utilization_threshold: float = Field(0.5, ge=0, le=1)
    scale_down_delay_after_add_seconds: float = Field(600, ge=0, le=YEAR_SECONDS)
    max_node_provision_seconds: float = Field(900, gt=0, le=YEAR_SECONDS)
    burst_margin_seconds: float = Field(60, ge=0, le=YEAR_SECONDS)
    """Bursting: another backend's expected start must be this much sooner to take a job there."""


METRICS_PORT = 9640
"""The Prometheus exporter's default port: ``crossdock up`` takes it, each process it starts the
next free one (docs/operate.md)."""


class Metrics(_Cfg):
    """Where each long-running process serves Prometheus metrics (``CROSSDOCK_METRICS_ADDRESS``,
    ``host:port``, ``port`` or ``0``, overrides it)."""

    address: str = Field("127.0.0.1", min_length=1, max_length=253)
    """Loopback by default: the metrics name queues and pools; expose them on purpose."""
    port: int = Field(METRICS_PORT, ge=0, le=65535)
    """The first port; 0 disables the exporters."""
PrivateData = Literal["jobs", "usage", "events"]
DEFAULT_PRIVATE_DATA: tuple[str, ...] = ("jobs",)


class ClusterConfig(_Cfg):
    priority_classes: dict[str, PriorityClass] = Field(min_length=1)
    pools: dict[str, Pool] = Field(min_length=1)
    queues: dict[str, Queue] = Field(min_length=1)
    default_queue: str | None = None
    scheduler: Scheduler = Field(default_factory=Scheduler)
    autoscaler: Autoscaler = Field(default_factory=Autoscaler)
    metrics: Metrics = Field(default_factory=Metrics)
    descheduler: Descheduler = Field(default_factory=Descheduler)
    limits: Limits = Field(default_factory=Limits)
    """How much one user may send and hold (:mod:`crossdock.queue.config_limits`)."""
    admins: list[str] = Field(default_factory=list)
    """Users (login names, or uids where the passwd database has none) who may act on anyone's
    jobs, as root may; everybody else acts on their own jobs only."""
    private_data: list[PrivateData] = Field(default_factory=lambda: list(DEFAULT_PRIVATE_DATA))
    """What a user sees of other users' work, after slurm.conf's ``PrivateData``
    (:mod:`crossdock.queue.privacy`): ``jobs`` (default) shows another's job as that it exists,
    its state, user, resources and placement, never its script, command, arguments, output paths
    or output; ``usage``: fair-share usage of the caller and the queues only; ``events``: the
    events of the caller's own jobs only. An environment and a Python call are never shown to
    another user; admins (root, ``admins:``) see everything."""
    services: Services = Field(default_factory=Services)
    licenses: dict[str, Annotated[int, Field(ge=1, le=10**9)]] = Field(default_factory=dict)
    """Counted licenses (``--licenses=name[:count]``): name → how many jobs' worth exist; the
    scheduler never lets running jobs hold more (pending reason Licenses)."""

    @model_validator(mode="after")
    def _unique_nodes(self) -> "ClusterConfig":
        # the inventory indexes nodes by name: a second node of the same name would shadow the first
        seen: dict[str, str] = {}
        for pname, pool in self.pools.items():
            for node in pool.nodes:
                if node.name in seen:
                    raise ValueError(f"pools.{pname}.nodes: node {node.name!r} is also declared in pool"
                                     f" {seen[node.name]!r}; give every node its own name")
                seen[node.name] = pname
        return self

    @model_validator(mode="after")
    def _declared_services(self) -> "ClusterConfig":
        for name, entry in self.services.deploy.items():
            try:
                spec = ServiceSpec.model_validate({**entry, "name": name})
            except ValidationError as exc:
                err = exc.errors()[0]
                where = ".".join(str(p) for p in err["loc"])
                raise ValueError(f"services.deploy.{name}{'.' + where if where else ''}: "
                                 f"{err['msg'].removeprefix('Value error, ')}") from None
            problem = service_placement_error(self, spec)
            if problem:
                raise ValueError(f"services.deploy.{name}.{problem}")
        return self

    # --- lookups -------------------------------------------------------------------------
    def queue_name(self, requested: str | None) -> str:
        if requested:
            return requested
        if self.default_queue:
            return self.default_queue
        return next(iter(self.queues))

    def pools_of(self, queue: str) -> list[str]:
        return list(self.queues[queue].pools)


def service_placement_error(cfg: "ClusterConfig", spec: ServiceSpec) -> str | None:
    """Why ``spec``'s queue or pools do not fit ``cfg`` (``field: problem; fix``), or None."""
    queue = cfg.queue_name(spec.queue)
    if queue not in cfg.queues:
        return f"queue: unknown queue {queue!r}; defined: {', '.join(sorted(cfg.queues))}"
    allowed = cfg.queues[queue].pools
    for pool in spec.pools or ():
        if pool not in allowed:
            return f"pools: {pool!r} is not one of queue {queue!r}'s pools ({', '.join(allowed)}); list only those"
    return None


def _num(x: Any) -> Any:
    return int(x) if isinstance(x, float) and x.is_integer() else x


def _message(err: dict[str, Any]) -> str:
    ctx = {k: _num(v) for k, v in (err.get("ctx") or {}).items()}
    kind = err["type"]
    if kind == "greater_than_equal":
        return f"must be ≥ {ctx['ge']}"
    if kind == "greater_than":
        return f"must be > {ctx['gt']}"
    if kind == "less_than_equal":
        return f"must be ≤ {ctx['le']}"
    if kind == "too_short" and err.get("input") == {}:
        return "must not be empty; define at least one"
    if kind == "finite_number":
        return "must be a finite number (not .inf or .nan)"
    if kind == "extra_forbidden":
        return "unknown field; remove it or check its spelling"
    if kind == "missing":
        return "required field is missing"
    if kind == "literal_error":
        return f"must be one of {ctx.get('expected')}"
    if kind == "value_error":
        return str(ctx.get("error", err["msg"]))
    if kind.endswith(("_type", "_parsing")):  # the wrong kind of value: say which one it was
        return f"{err['msg']} (got {shown(err.get('input'))})"
    return err["msg"]


def _format_errors(exc: ValidationError) -> list[str]:
    lines: list[str] = []
    errs = exc.errors()
    # A union such as ``Elastic | "none"`` reports one error per branch; keep the deeper one.
    deep = [err["loc"] for err in errs if not (err["loc"] and str(err["loc"][-1]).startswith("literal["))]
    for err in errs:
        branch_of = err["loc"][:-1]
        if (err["type"] == "literal_error" and str(err["loc"][-1]).startswith("literal[")
                and any(len(d) > len(branch_of) and d[:len(branch_of)] == branch_of for d in deep)):
            continue
        loc = [str(p) for p in err["loc"] if not str(p).startswith(("literal[", "function-", "constrained-"))]
        # union branches (Elastic | "none") put the branch name in loc; keep the user's path
        loc = [p for p in loc if p not in ("Elastic",)]
        msg = _message(err)
        path = ".".join(loc)
        lines.append(f"{path}: {msg}" if path else msg)
    return list(dict.fromkeys(lines))


def _reference_errors(data: dict[str, Any]) -> list[str]:
    """Names that point nowhere: a queue's priority class and pools, the default queue."""
    def names(section: str) -> dict[str, Any]:
        value = data.get(section)
        return value if isinstance(value, dict) else {}

    classes, pools, queues = names("priority_classes"), names("pools"), names("queues")
    errors: list[str] = []
    for qname, q in queues.items():
        if not isinstance(q, dict):
            continue
        pc = q.get("priority_class")
        if isinstance(pc, str) and pc not in classes:
            errors.append(f"queues.{qname}.priority_class: unknown priority class {pc!r};"
                          f" defined: {', '.join(sorted(classes)) or 'none'}")
        listed = q.get("pools")
        for i, p in enumerate(listed if isinstance(listed, list) else []):  # not a list: the model says so
            if isinstance(p, str) and p not in pools:
                errors.append(f"queues.{qname}.pools.{i}: unknown pool {p!r}; defined: {', '.join(sorted(pools)) or 'none'}")
    errors += reference_errors(data.get("descheduler"), classes, queues)
    default = data.get("default_queue")
    if isinstance(default, str) and default not in queues:
        errors.append(f"default_queue: unknown queue {default!r}; defined: {', '.join(sorted(queues)) or 'none'}")
    return errors


def parse_config(data: Any, source: str = "<config>", backends: Mapping[str, Capabilities] | None = None) -> ClusterConfig:
    """Validate admin config data; every problem at once, each with its path. With ``backends``
    (kind → capabilities), pools must name one of them and use only what it can do."""
    if not isinstance(data, dict):
        raise ConfigError([f"{source}: top level must be a mapping with priority_classes, pools and queues"])
    errors = _reference_errors(data)
    cfg = None
    try:
        cfg = ClusterConfig.model_validate(data)
    except ValidationError as exc:
        errors = _format_errors(exc) + errors
    if backends is not None:
        errors += _partition_errors(data, backends)
    if cfg is not None and backends is not None:
        errors += _backend_errors(cfg, backends)
    if errors or cfg is None:
        raise ConfigError(errors)
    return cfg


def _partition_errors(data: dict, backends: Mapping[str, Capabilities]) -> list[str]:
    """Pools of a backend with partitions that name none, read from the raw data so that they are
    reported beside the schema's own errors."""
    pools = data.get("pools")
    if not isinstance(pools, dict):
        return []
    errors = []
    for name, pool in pools.items():
        if not isinstance(pool, dict) or not isinstance(kind := pool.get("backend"), str):
            continue
        if kind in backends and backends[kind].partitions and not pool.get("partition"):
            errors.append(f"pools.{name}: a {kind} pool needs partition: <{kind} partition name>")
    return errors


def _backend_errors(cfg: ClusterConfig, backends: Mapping[str, Capabilities]) -> list[str]:
    errors = []
    for name, pool in cfg.pools.items():
        if pool.backend not in backends:
            errors.append(f"pools.{name}.backend: {pool.backend!r} is not a backend; known: {', '.join(backends)}")
        elif pool.backend_queue and not backends[pool.backend].backend_queue:
            errors.append(f"pools.{name}: backend_queue: {pool.backend_queue} needs a backend with a queue of its own;"
                          f" {pool.backend} has none — remove backend_queue or use a pool of a backend that queues")
        elif pool.provisioner is not None and pool.provisioner not in backends[pool.backend].provisioners:
            offered = ", ".join(backends[pool.backend].provisioners) or "none"
            errors.append(f"pools.{name}.provisioner: {pool.provisioner!r} is not offered by {pool.backend}"
                          f" (offers: {offered}); remove provisioner or pick one it offers")
        if pool.backend in backends and not backends[pool.backend].sizes_nodes:
            for i, node in enumerate(pool.nodes):
                for field in ("cpus", "memory_mib"):
                    if getattr(node, field) == "auto":
                        errors.append(f"pools.{name}.nodes[{i}].{field}: 'auto' needs a backend that measures its"
                                      f" nodes; {pool.backend} does not — give a number")
    for qname, q in cfg.queues.items():
        fleet = q.elastic.fleet if q.elastic != "none" else None
        if fleet is None:
            continue
        if fleet.backend not in backends:
            errors.append(f"queues.{qname}.elastic.fleet.backend: {fleet.backend!r} is not a backend;"
                          f" known: {', '.join(backends)}")
        elif not backends[fleet.backend].fleets:
            errors.append(f"queues.{qname}.elastic.fleet.backend: {fleet.backend} runs no worker fleets;"
                          " remove fleet or use a backend that scales them")
    return errors


def lint(cfg: ClusterConfig) -> list[str]:
    """Warnings for legal but risky settings."""
    warnings: list[str] = []
    for qname, q in cfg.queues.items():
        pc = cfg.priority_classes[q.priority_class]
        scaled_by_traffic = q.elastic != "none" and q.elastic.metric == "qps"
        latency_sensitive = not pc.preemptible and (q.placement == "spread" or scaled_by_traffic)
        if latency_sensitive and q.cpu_request_ratio < 0.8:
            warnings.append(f"queues.{qname}.cpu_request_ratio: {q.cpu_request_ratio} is below 0.8 for a latency-sensitive"
                            " queue; CPU throttling will add tail latency — raise it to ≥ 0.8")
        if pc.preemptible and q.placement == "spread":
            warnings.append(f"queues.{qname}.placement: spread on a preemptible class fragments GPUs; use binpack")
        if q.elastic != "none" and q.elastic.max is None:
            warnings.append(f"queues.{qname}.elastic.max: no maximum; autoscaling is unbounded — set max")
    st = cfg.descheduler.strategies
    if cfg.descheduler.enabled and st.LowNodeUtilization.enabled and st.HighNodeUtilization.enabled:
        warnings.append("descheduler.strategies: LowNodeUtilization spreads and HighNodeUtilization packs;"
                        " both enabled undo each other's moves — enable one")
    for name, pc in cfg.priority_classes.items():
        if pc.preemptible and pc.value >= max(c.value for c in cfg.priority_classes.values()):
            warnings.append(f"priority_classes.{name}: preemptible class has the highest value; nothing can preempt it")
    return warnings
