"""Submit-time checks of a spec against the admin config: the queue, pool and priority class
exist, the queue's per-job limits hold, and some node could ever hold the job.

Called before anything is stored, so a job that can never run is refused with a message that
names the field and the fix instead of waiting forever.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Callable, Sequence, get_args

from pydantic import ValidationError

from crossdock.queue.bounds import spec_problems
from crossdock.queue.config import ClusterConfig, Placement
from crossdock.queue.errors import InvalidJob, LimitExceeded
from crossdock.queue.models import Job, JobSpec, validation_message
from crossdock.queue.sbatch_extras import constraint_terms
from crossdock.queue.snapshot import Node
from crossdock.queue.states import Reason


@dataclass(frozen=True)
class Resolved:
    queue: str
    priority_class: str
    priority: int
    preemptible: bool
    pools: tuple[str, ...]


def _names(d: dict) -> str:
    return ", ".join(sorted(d)) or "none"


def _partition(names: str, cfg: ClusterConfig) -> tuple[str | None, tuple[str, ...]]:
    """``-p`` as Slurm reads it: a comma list, each name a queue, a pool or a pool's Slurm partition."""
    queues: list[str] = []
    pools: list[str] = []
    for name in names.split(","):
        if name in cfg.queues:
            queues.append(name)
        elif name in cfg.pools:
            pools.append(name)
        elif by_partition := [p for p, pool in cfg.pools.items() if pool.partition == name]:
            pools.extend(by_partition)
        else:
            raise InvalidJob(f"--partition: unknown queue, pool or Slurm partition {name!r}; queues:"
                             f" {_names(cfg.queues)}; pools: {_names(cfg.pools)}")
    if len(set(queues)) > 1:
        raise InvalidJob(f"--partition: {names!r} names the queues {', '.join(dict.fromkeys(queues))}; a job waits in"
                         " one queue: name one, or pools of one queue")
    return (queues[0] if queues else None), tuple(dict.fromkeys(pools))


def resolve(spec: JobSpec, cfg: ClusterConfig) -> Resolved:
    """Queue and priority class for ``spec``; ``-p`` may name queues, pools or pools' partitions, as in Slurm."""
    queue = spec.queue
    wanted: tuple[str, ...] = (spec.pool,) if spec.pool is not None else ()
    if spec.partition:
        p_queue, p_pools = _partition(spec.partition, cfg)
        queue = queue or p_queue
        wanted = wanted or p_pools
    for pool in wanted:
        if pool not in cfg.pools:
            raise InvalidJob(f"--pool: unknown pool {pool!r}; defined: {_names(cfg.pools)}")
    if queue is None and wanted:
        # the default queue if it holds the pools, else the first queue that does
        holding = [q for q in dict.fromkeys([cfg.queue_name(None), *cfg.queues]) if set(wanted) <= set(cfg.queues[q].pools)]
        queue = holding[0] if holding else None
    qname = cfg.queue_name(queue)
    if qname not in cfg.queues:
        raise InvalidJob(f"--queue: unknown queue {qname!r}; defined: {_names(cfg.queues)}")
    q = cfg.queues[qname]
    for pool in wanted:
        if pool not in q.pools:
            raise InvalidJob(f"--pool: pool {pool!r} is not one of queue {qname!r}'s pools ({', '.join(q.pools)})")
    pools = wanted or tuple(q.pools)
    if spec.backend is not None:
        pools = tuple(p for p in pools if cfg.pools[p].backend == spec.backend)
        if not pools:
            raise InvalidJob(f"--backend: queue {qname!r} has no {spec.backend!r} pool; its pools: {', '.join(q.pools)}")
    if spec.constraint is not None:
        pools = _with_features(spec.constraint, cfg, pools)
    if spec.licenses is not None:
        _check_licenses(spec.licenses, cfg, pools)
    if spec.slurm_options:
        slurm = tuple(p for p in pools if cfg.pools[p].partition is not None)
        if not slurm:
            where = [p for p, pool in cfg.pools.items() if pool.partition is not None]
            raise InvalidJob(f"{spec.slurm_options[0]}: only a Slurm pool can honour it, and the job may run only in"
                             f" {', '.join(pools)}; send it to a Slurm pool ({', '.join(where) or 'none configured'})"
                             " with -p, or remove the option")
        pools = slurm
    pcname = spec.priority_class or q.priority_class
    if pcname not in cfg.priority_classes:
        raise InvalidJob(f"--priority-class/--qos: unknown priority class {pcname!r}; defined: {_names(cfg.priority_classes)}")
    pc = cfg.priority_classes[pcname]
    return Resolved(qname, pcname, pc.value, pc.preemptible, pools)


def _with_features(constraint: str, cfg: ClusterConfig, pools: tuple[str, ...]) -> tuple[str, ...]:
    """The pools that can hold ``--constraint``'s features: Slurm pools judge them themselves;
    other pools map each feature to node labels (``features``)."""
    terms = constraint_terms(constraint)
    keep: list[str] = []
    why: list[str] = []
    for name in pools:
        pool = cfg.pools[name]
        if pool.features is None:
            if pool.partition is not None:
                keep.append(name)  # Slurm knows its nodes' features
            else:
                why.append(f"pool {name!r} maps no features (add features: {{{terms[0][0]}: {{label: value}}}})")
            continue
        missing = [term for term in terms if not any(f in pool.features for f in term)]
        if missing:
            why.append(f"pool {name!r} has no feature {'|'.join(missing[0])} (it has: {_names(pool.features)})")
        else:
            keep.append(name)
    if not keep:
        raise InvalidJob(f"--constraint: no pool can place {constraint!r}: " + "; ".join(why))
    return tuple(keep)


def _license_items(licenses: str) -> list[tuple[str, int]]:
    """(name, count) of a normalized ``--licenses`` value, either form (``,`` all, ``|`` any)."""
    return [(name, int(n or 1)) for name, _, n in (i.partition(":") for i in licenses.replace("|", ",").split(","))]


def _check_licenses(licenses: str, cfg: ClusterConfig, pools: tuple[str, ...]) -> None:
    """Each license is one the config counts (``licenses:``), for no more than exist; one it does
    not count only when Slurm pools alone may run the job (Slurm judges it)."""
    counted = cfg.licenses
    items = _license_items(licenses)
    known = f"licenses: {_names(counted)} (an admin declares them under licenses: in the config)"
    if "|" in licenses and any(name in counted for name, _ in items):
        raise InvalidJob(f"--licenses: {licenses!r} asks for any one of several; crossdock counts {known} and takes"
                         " a , list of all the job needs")
    for name, n in items:
        if name in counted:
            if n > counted[name]:
                raise InvalidJob(f"--licenses: {name}:{n} is more than the {counted[name]} that exist; ask for at"
                                 f" most {counted[name]}")
        elif any(cfg.pools[p].partition is None for p in pools):
            raise InvalidJob(f"--licenses: unknown license {name!r}; {known}")


def advisories(spec: JobSpec, cfg: ClusterConfig, pools: Sequence[str],
               signals: Callable[[str], bool] = lambda pool: False) -> list[str]:
    """Warnings for options some pools ignore, when the job may run there; one line each.
    ``signals``: whether a pool's backend delivers ``--signal`` (``Capabilities.signals``)."""
    others = [p for p in pools if cfg.pools[p].partition is None]
    sig = spec.kill_signal
    uncounted = spec.licenses and any(name not in cfg.licenses for name, _ in _license_items(spec.licenses))
    given = [(o, v) for o, v in (("--reservation", spec.reservation), ("--licenses", uncounted and spec.licenses),
                                  ("--time-min", spec.time_min_seconds and f"{spec.time_min_seconds // 60}")) if v]
    lines = [f"{o}={v}: only Slurm pools honour it; ignored if the job runs in pool(s) {', '.join(others)}"
             for o, v in given if others]
    deaf = [p for p in pools if not signals(p)]
    if sig is not None and deaf:
        lines.append(f"--signal={sig.number}@{sig.seconds}: not delivered if the job runs in pool(s) {', '.join(deaf)}")
    return lines


def check_limits(spec: JobSpec, cfg: ClusterConfig, queue: str) -> None:
    lim = cfg.queues[queue].per_job
    cpus = spec.cpus_per_task * spec.ntasks
    if lim.cpu is not None and cpus > lim.cpu:
        raise InvalidJob(f"--cpus-per-task x --ntasks: {cpus} CPUs exceeds queue {queue!r}'s per-job limit of {lim.cpu:g};"
                         " ask for fewer or use another queue")
    gpus = spec.total_gpus()
    if lim.gpu is not None and gpus > lim.gpu:
        raise InvalidJob(f"--gpus: {gpus:g} GPUs exceeds queue {queue!r}'s per-job limit of {lim.gpu:g};"
                         " ask for fewer or use another queue")
    mem = spec.mem_per_node(0) * spec.nodes
    if lim.mem_mib is not None and mem > lim.mem_mib:
        raise InvalidJob(f"--mem: {mem} MiB exceeds queue {queue!r}'s per-job limit of {lim.mem_mib} MiB")
    if lim.nodes is not None and spec.nodes > lim.nodes:
        raise InvalidJob(f"--nodes: {spec.nodes} exceeds queue {queue!r}'s per-job limit of {lim.nodes}")


def fits_empty(spec: JobSpec, node: Node, default_mem_per_cpu: int = 0) -> bool:
    """Could ``node``, with nothing running on it, ever hold one node's share of ``spec``?"""
    if spec.cpus_per_node() * 1000 > node.cpu_milli:
        return False
    if spec.mem_per_node(default_mem_per_cpu * spec.cpus_per_node()) > node.memory_mib:
        return False
    req = spec.gpu_request()
    if req is None:
        return True
    models = req.allowed_models()
    usable = [g for g in node.gpus if not models or g.model.lower() in {m.lower() for m in models}]
    if req.share is not None:
        return bool(usable) and node.gpu_sharing
    return len(usable) >= spec.gpus_per_node()


def check_satisfiable(spec: JobSpec, cfg: ClusterConfig, resolved: Resolved, nodes: Sequence[Node]) -> None:
    """Refuse a job no node of its pools could ever hold (nodes known for those pools only)."""
    known = [n for n in nodes if n.pool in resolved.pools]
    if not known:
        return  # pools whose inventory is not known here (remote backends) are checked by them
    default_mem = cfg.scheduler.default_mem_per_cpu_mib
    if sum(fits_empty(spec, n, default_mem) for n in known) >= spec.nodes:
        return
    req = spec.gpu_request()
    biggest_gpu = max((len(n.gpus) for n in known), default=0)
    if req is not None and spec.gpus_per_node() > biggest_gpu:
        raise InvalidJob(f"--gpus: {spec.gpus_per_node()} GPUs per node, but the largest node in pools"
                         f" {', '.join(resolved.pools)} has {biggest_gpu}; ask for at most {biggest_gpu} per node")
    if req is not None and req.allowed_models():
        have = sorted({g.model for n in known for g in n.gpus})
        if not any(fits_empty(spec, n, default_mem) for n in known):
            raise InvalidJob(f"--gpus: no node in pools {', '.join(resolved.pools)} has {spec.gpus_per_node()} GPUs"
                             f" of model {'|'.join(req.allowed_models())}; models there: {', '.join(have) or 'none'}")
    biggest_cpu = max(n.cpu_milli for n in known) // 1000
    if spec.cpus_per_node() > biggest_cpu:
        raise InvalidJob(f"--cpus-per-task: {spec.cpus_per_node()} CPUs per node, but the largest node in pools"
                         f" {', '.join(resolved.pools)} has {biggest_cpu}")
    biggest_mem = max(n.memory_mib for n in known)
    if spec.mem_per_node(default_mem * spec.cpus_per_node()) > biggest_mem:
        raise InvalidJob(f"--mem: {spec.mem_per_node(0)} MiB per node, but the largest node in pools"
                         f" {', '.join(resolved.pools)} has {biggest_mem} MiB")
    raise InvalidJob(f"--nodes: {spec.nodes} nodes requested, but only {len(known)} nodes exist in pools"
                     f" {', '.join(resolved.pools)} and fewer can hold one task group")


def check_names(spec: JobSpec, resolved: Resolved, nodes: Sequence[Node]) -> None:
    """Refuse a placement or host names that exist nowhere, rather than run as binpack or wait forever."""
    placements = get_args(Placement)
    if spec.placement is not None and spec.placement not in placements:
        raise InvalidJob(f"--placement: unknown placement {spec.placement!r}; accepted: {', '.join(placements)}")
    known = {n.pool for n in nodes}
    if not (spec.nodelist or spec.exclude) or not all(p in known for p in resolved.pools):
        return  # a pool whose inventory is not known here: its backend judges the names
    names = {n.name for n in nodes if n.pool in resolved.pools}
    for option, hosts in (("--nodelist", spec.nodelist), ("--exclude", spec.exclude)):
        unknown = [h for h in hosts if h not in names]
        if unknown:
            shown = ", ".join(sorted(names)[:20]) + (", …" if len(names) > 20 else "")
            raise InvalidJob(f"{option}: unknown node {unknown[0]!r}; nodes in pools {', '.join(resolved.pools)}: {shown}")


def to_jobs(spec: JobSpec, resolved: Resolved, now: datetime) -> list[Job]:
    """The job records for one submission: one job, or one per array task (ids assigned by the store)."""
    base = dict(spec=spec, queue=resolved.queue, priority_class=resolved.priority_class, priority=resolved.priority,
                preemptible=resolved.preemptible, pools=list(resolved.pools), submit_time=now,
                reason=Reason.JOB_HELD_USER if spec.hold else Reason.NONE, eligible_time=spec.begin)
    if spec.array is None:
        return [Job(id=0, **base)]
    return [Job(id=0, array_job_id=-1, array_task_id=t, **base) for t in spec.array.task_ids]


def admit(spec: JobSpec, cfg: ClusterConfig, nodes: Sequence[Node], now: datetime) -> list[Job]:
    """Validate ``spec`` against the config and known nodes and return its job records, or raise InvalidJob."""
    try:
        # once more as a whole: a face's model_copy(update=…) (user, environment, workdir) skips validation
        spec = JobSpec.model_validate(spec.model_dump())
    except ValidationError as exc:
        raise InvalidJob(validation_message(exc)) from None
    over = spec_problems(spec, cfg.limits)
    if spec.array is not None and max(spec.array.task_ids) >= cfg.scheduler.max_array_size:
        over.append(f"--array: task id {max(spec.array.task_ids)} is not below scheduler.max_array_size"
                    f" ({cfg.scheduler.max_array_size}, Slurm's MaxArraySize); use smaller task ids, or ask an admin"
                    " to raise scheduler.max_array_size")
    if over:
        raise LimitExceeded("; ".join(over))
    # a service replica may name only an image: a Kubernetes pod runs the image's entrypoint
    image_only = spec.service is not None and spec.image is not None
    if spec.command is None and spec.script is None and spec.python is None and not image_only:
        raise InvalidJob("nothing to run: give a script, a command (--wrap) or a Python callable")
    if spec.script is not None and not spec.script.startswith("#!"):
        raise InvalidJob("script: the first line must start with #! followed by the path to an interpreter,"
                         " as sbatch requires (e.g. #!/bin/bash)")
    resolved = resolve(spec, cfg)
    check_names(spec, resolved, nodes)
    check_limits(spec, cfg, resolved.queue)
    check_satisfiable(spec, cfg, resolved, nodes)
    return to_jobs(spec, resolved, now)
