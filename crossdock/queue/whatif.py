"""Why a job pends, and the smallest changes that would start it sooner: ``crossdock why``.

Each change is one edit of the job's request — fewer GPUs, another GPU model, another pool or
queue, a shorter time limit (the longest that fits a backfill hole now) — admitted as a new
submission would be (a change a queue's limits refuse is no option) and tried in a dry cycle over
the queue as it stands (:func:`crossdock.queue.trial.trial`), the job itself taken out: each
option's start is the scheduler's own prediction, not a guess. Only changes that start the job
sooner than it would start as it is are kept, soonest first.

Pure: the caller hands in the pending and running jobs, the nodes, the config and ``now``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Callable, Sequence

from crossdock.queue.admission import admit
from crossdock.queue.config import ClusterConfig
from crossdock.queue.durations import duration
from crossdock.queue.errors import CrossdockError
from crossdock.queue.models import Gres, Job, JobSpec
from crossdock.queue.snapshot import Node
from crossdock.queue.trial import Trial, trial

SHORTEST_LIMIT_S = 60
LONGEST_SEARCHED_S = 7 * 86400
"""Without a time limit of its own, a job's shorter limits are searched up to this."""


@dataclass(frozen=True)
class Option:
    change: str
    """The change, as the user would write it (``--gpus=4 (not 8)``)."""
    field: str
    """``gpus``, ``gpu_model``, ``pool``, ``queue`` or ``time_limit_seconds``."""
    value: Any
    start: datetime
    pool: str | None = None
    nodes: tuple[str, ...] = ()
    apply: str = ""
    """How to make it: ``crossdock update …`` where a pending job takes the change, else a resubmit."""


@dataclass(frozen=True)
class Why:
    job_id: int
    reason: str
    """Why it pends, as the scheduler says it (a reason and its explanation)."""
    start: datetime | None
    """When it would start as it is (None: not known)."""
    options: tuple[Option, ...] = field(default_factory=tuple)

    def as_dict(self) -> dict[str, Any]:
        return {"job": self.job_id, "reason": self.reason, "start": _iso(self.start),
                "options": [{"change": o.change, "field": o.field, "value": o.value, "start": _iso(o.start),
                             "pool": o.pool, "nodes": list(o.nodes), "apply": o.apply} for o in self.options]}


def _iso(at: datetime | None) -> str | None:
    return at.isoformat(timespec="seconds") if at is not None else None


def why(job: Job, pending: Sequence[Job], active: Sequence[Job], nodes: Sequence[Node], config: ClusterConfig,
        now: datetime) -> Why:
    """``job`` (pending) as the scheduler sees it now, and the options that start it sooner."""
    others = [j for j in pending if j.id != job.id]
    as_is = trial(job, others, active, nodes, config, now)
    recorded = f"{job.reason}: {job.explanation}" if job.explanation else job.reason  # the leader's last cycle
    if as_is.start == now:  # nothing starts it sooner
        return Why(job.id, "fits now", now)
    reason = as_is.reason or recorded
    options = []
    for change, name, value, spec, apply in _changes(job, config, nodes, others, active, now):
        tried = _try(job, spec, others, active, nodes, config, now)
        if tried is not None and tried.start is not None and (as_is.start is None or tried.start < as_is.start):
            options.append(Option(change, name, value, tried.start, tried.pool, tried.nodes, apply))
    options.sort(key=lambda o: o.start)  # stable: of two as soon, the smaller change (tried first)
    return Why(job.id, reason, as_is.start, tuple(options))


def _try(job: Job, spec: JobSpec, others: Sequence[Job], active: Sequence[Job], nodes: Sequence[Node],
         config: ClusterConfig, now: datetime) -> Trial | None:
    """The changed job admitted as a new submission would be (None: admission refuses it), keeping
    the original's place in the queue, tried in a dry cycle."""
    try:
        changed = admit(spec, config, nodes, now)[0]
    except CrossdockError:
        return None
    kept = {"id": job.id, "submit_time": job.submit_time, "eligible_time": job.eligible_time,
            "attempts": job.attempts, "array_job_id": job.array_job_id, "array_task_id": job.array_task_id}
    return trial(changed.model_copy(update=kept), others, active, nodes, config, now)


def _changes(job: Job, config: ClusterConfig, nodes: Sequence[Node], others: Sequence[Job], active: Sequence[Job],
             now: datetime):
    """(change, field, value, changed spec, how to apply) for every one-edit change worth trying."""
    spec = job.spec
    resubmit = f"resubmit job {job.id} with it"
    asked = _gpu_request(spec)
    if asked is not None:
        count, models, edit = asked
        for n in sorted({count // 2, 1}, reverse=True):
            if n < count:
                yield f"--gpus={n} (not {count})", "gpus", n, edit(count=n), resubmit
        known = {m.lower() for m in models}
        for model in sorted({d.model for n in nodes for d in n.gpus if known and d.model.lower() not in known}):
            yield f"GPU model {model} (not {'|'.join(models)})", "gpu_model", model, edit(model=model), resubmit
    if spec.pool is not None and job.queue in config.queues:
        for pool in config.queues[job.queue].pools:
            if pool != spec.pool:
                yield f"pool {pool} (not {spec.pool})", "pool", pool, spec.model_copy(update={"pool": pool}), resubmit
    for queue in sorted(config.queues):
        if queue != job.queue:
            yield (f"-p {queue} (not {job.queue})", "queue", queue,
                   spec.model_copy(update={"queue": queue, "partition": None, "pool": None}), resubmit)
    limit = _longest_limit_starting_now(job, others, active, nodes, config, now)
    if limit is not None:
        yield (f"--time={duration(limit)} (not {duration(spec.time_limit_seconds)})", "time_limit_seconds", limit,
               spec.model_copy(update={"time_limit_seconds": limit}), f"crossdock update {job.id} TimeLimit={duration(limit)}")


def _gpu_request(spec: JobSpec) -> tuple[int, list[str], Callable[..., JobSpec]] | None:
    """The job's whole-GPU request (``--gpus`` or ``--gres=gpu``) as (count, models, an editor of
    its count or model); None without one, or for a shared or MIG GPU (no count to lower)."""
    if spec.gpus is not None:
        g = spec.gpus
        if g.share is not None or g.mig is not None:
            return None

        def edit_gpus(count: int | None = None, model: str | None = None) -> JobSpec:
            change: dict[str, Any] = {"count": count} if count is not None else {"type": model, "models": []}
            return spec.model_copy(update={"gpus": g.model_copy(update=change)})
        return g.count, g.allowed_models(), edit_gpus
    for i, r in enumerate(spec.gres):
        if r.name == "gpu":
            def edit_gres(count: int | None = None, model: str | None = None, i: int = i, r: Gres = r) -> JobSpec:
                gres = list(spec.gres)
                gres[i] = r.model_copy(update={"count": count} if count is not None else {"type": model})
                return spec.model_copy(update={"gres": gres})
            return r.count, [r.type] if r.type else [], edit_gres
    return None


def _longest_limit_starting_now(job: Job, others: Sequence[Job], active: Sequence[Job], nodes: Sequence[Node],
                                config: ClusterConfig, now: datetime) -> int | None:
    """The longest time limit, in whole minutes, with which ``job`` starts now (a backfill hole
    that long is open); None when even :data:`SHORTEST_LIMIT_S` does not. A shorter limit never
    fits fewer holes, so a binary search finds it."""
    def starts_now(seconds: int) -> bool:
        tried = _try(job, job.spec.model_copy(update={"time_limit_seconds": seconds}), others, active, nodes,
                     config, now)
        return tried is not None and tried.start == now

    current = job.spec.time_limit_seconds or LONGEST_SEARCHED_S
    lo, hi = SHORTEST_LIMIT_S // 60, current // 60  # minutes: lo starts now (checked), hi does not (it is the job as it is)
    if hi <= lo or not starts_now(lo * 60):
        return None
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if starts_now(mid * 60) else (lo, mid)
    return lo * 60
