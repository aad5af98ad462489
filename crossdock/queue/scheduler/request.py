"""A pending job reduced to what placement needs: per-node amounts, constraints and ordering facts.

``build_request(job, config)`` is called once per job and cycle; everything after it (filters,
scores, preemption, backfill) reads only the :class:`Request`.

Units: CPU in millicores (the *request*: the job's CPUs times its queue's ``cpu_request_ratio``,
CPU being compressible), memory in MiB, whole GPUs as counts, a GPU share in milli-GPU
(``250`` = a quarter of one GPU), MIG slices as a profile name and a count.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from crossdock.queue.admission import check_limits
from crossdock.queue.config import ClusterConfig
from crossdock.queue.cpu_share import cpu_milli
from crossdock.queue.errors import InvalidJob
from crossdock.queue.models import Job
from crossdock.queue.sbatch_extras import constraint_terms
from crossdock.queue.scheduler.licenses import asked

Toleration = tuple[str, str, str, str]
"""(key, operator, value, effect) with operator ``Equal`` or ``Exists``; empty effect = any."""


@dataclass(frozen=True, slots=True)
class Request:
    job_id: int
    queue: str
    user: str
    priority: int
    preemptible: bool
    can_preempt: bool
    pools: tuple[str, ...]
    nodes: int = 1
    cpu_milli: int = 0
    memory_mib: int = 0
    gpus: int = 0
    gpu_share_milli: int = 0
    mig: str | None = None
    mig_count: int = 0
    models: frozenset[str] = frozenset()
    nodelist: frozenset[str] = frozenset()
    exclude: frozenset[str] = frozenset()
    node_selector: tuple[tuple[str, str], ...] = ()
    features: tuple[tuple[str, ...], ...] = ()
    """--constraint as an and of ors of feature names (see the NodeFeatures plugin)."""
    tolerations: tuple[Toleration, ...] = ()
    anti_affinity: bool = False
    group: int = 0
    """Jobs of one array share a group; anti-affinity keeps one worker of a group per node."""
    topology_key: str | None = None
    """Node label whose value must be the same for every node of a gang (one NVLink/IB domain)."""
    exclusive: bool = False
    time_limit_s: float | None = None
    submit_time: datetime | None = None
    placement: str = "binpack"
    limit_error: str | None = None
    grace_seconds: int = 30
    nice: int = 0
    service: str | None = None
    """The inference service a replica job belongs to (``JobSpec.service.name``): spread, never a victim."""
    licenses: tuple[tuple[str, int], ...] = ()
    """The counted licenses it holds while it runs (``scheduler.licenses``)."""
    skey: tuple = field(init=False, repr=False, compare=False)
    hkey: tuple = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "skey", (self.pools, self.nodelist, self.exclude, self.node_selector,
                                          self.tolerations, self.models, self.gpu_share_milli > 0, self.mig,
                                          self.features))
        object.__setattr__(self, "hkey", (self.skey, self.nodes, self.cpu_milli, self.memory_mib, self.gpus,
                                          self.gpu_share_milli, self.mig_count, self.anti_affinity and self.group,
                                          self.topology_key, self.exclusive, self.time_limit_s))

    @property
    def gpu_models_label(self) -> str:
        return "|".join(sorted(self.models)) or "any"

    def static_key(self) -> tuple:
        """What the static filters (pool, node list, selector, taints, model) depend on."""
        return self.skey

    def shape_key(self) -> tuple:
        """Two requests with equal shape keys fit exactly the same nodes in the same state."""
        return self.hkey


def build_request(job: Job, config: ClusterConfig) -> Request:
    spec = job.spec
    queue = config.queues.get(job.queue)
    cpus = spec.cpus_per_node()
    mem = spec.mem_per_node(config.scheduler.default_mem_per_cpu_mib * cpus)
    pc = config.priority_classes.get(job.priority_class) if job.priority_class else None
    if pc is None and queue is not None:
        pc = config.priority_classes.get(queue.priority_class)
    gpus = share = mig_count = 0
    mig = None
    models: frozenset[str] = frozenset()
    req = spec.gpu_request()
    if req is not None:
        models = frozenset(m.lower() for m in req.allowed_models())
        if req.share is not None:
            share = max(1, round(req.share * 1000))
        elif req.mig:
            mig, mig_count = req.mig, spec.gpus_per_node()
        else:
            gpus = spec.gpus_per_node()
    limit_error = None
    if queue is not None:
        try:
            check_limits(spec, config, job.queue)
        except InvalidJob as exc:
            limit_error = str(exc)
    pools = tuple(job.pools) or (tuple(queue.pools) if queue else ())
    fields = spec.__dict__  # optional JobSpec fields, read without pydantic's slow missing-attribute path
    tolerations = tuple(_toleration(t) for t in (fields.get("tolerations") or ()))
    selector = fields.get("node_selector") or {}
    constraint = fields.get("constraint")
    limit = spec.time_limit_seconds
    if limit is None and queue is not None and queue.default_time_minutes:
        limit = queue.default_time_minutes * 60
    service = fields.get("service")
    return Request(
        job_id=job.id, queue=job.queue, user=spec.user, priority=job.priority,
        preemptible=job.preemptible and service is None,
        can_preempt=pc is not None and pc.preemption_policy != "Never", pools=pools, nodes=spec.nodes,
        cpu_milli=cpu_milli(job, config)[0], memory_mib=mem, gpus=gpus, gpu_share_milli=share, mig=mig,
        mig_count=mig_count, models=models, nodelist=frozenset(spec.nodelist), exclude=frozenset(spec.exclude),
        node_selector=tuple(sorted(selector.items())), tolerations=tolerations,
        features=tuple(constraint_terms(constraint)) if constraint else (), anti_affinity=spec.anti_affinity,
        group=job.array_job_id if job.array_job_id is not None else job.id,
        topology_key=fields.get("topology"), exclusive=spec.exclusive,
        time_limit_s=float(limit) if limit else None, submit_time=job.submit_time,
        placement=spec.placement or (queue.placement if queue else "binpack"), limit_error=limit_error,
        grace_seconds=pc.grace_seconds if pc else 30, nice=spec.nice,
        service=service.name if service is not None else None,
        licenses=asked(fields.get("licenses"), config.licenses) if config.licenses else ())


def _toleration(t: dict[str, str] | Toleration) -> Toleration:
    if isinstance(t, tuple):
        return t
    return (t.get("key", ""), t.get("operator", "Equal"), t.get("value", ""), t.get("effect", ""))


def pool_tolerations(config: ClusterConfig, pool: str) -> tuple[Toleration, ...]:
    p = config.pools.get(pool)
    return tuple(_toleration(t) for t in p.tolerations) if p else ()
