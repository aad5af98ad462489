"""The service controller: one pure pass from what a service is to what should happen to it.

``reconcile(inputs) -> Plan``, run by the leader every ``services.interval_seconds``. It reads the
service record, its replica jobs (job state, pool, node), their endpoints (ready, draining,
drained), the latest traffic sample and how many more replicas each pool can take now, and
returns actions — it performs none:

1. **Forget** finished replica jobs; one of the current generation that ended on its own
   (crashed, lost) is a failure, and three failures within a minute hold new replicas (a crash
   loop: the service is DEGRADED). An update that bumps the generation (the fix) starts the count
   afresh: the failures of what ran before do not hold what runs now.
2. **Drain → stop**: a draining replica stops once the router (or the backend) says it drained,
   or after ``drain_timeout_seconds``. A replica taken out that never was ready has no traffic to
   drain: it stops at once.
3. **Replacements** (a move back to the preferred pool, a rolling update): a replica created with
   ``replaces=X`` drains X once it is ready — never before, so capacity never dips. A move-back
   that cannot land on the preferred pool within ``fallback_after_seconds`` is given up.
4. **Scale**: desired replicas from :mod:`.scaling` (HPA arithmetic, or the override); a pair
   (a replacement and the replica it replaces) counts once. Missing ones are created on the first
   pool; extra ones go pending first, then not ready, then outdated, on a fallback pool, newest.
5. **Rolling update** (surge 1): while replicas of an older generation are alive and no
   replacement is in flight, one ready outdated replica gets a replacement; one that is not ready
   stops at once.
6. **Move back**: with no replacement in flight, nothing pending and room on the preferred pool,
   one replica on a fallback pool gets a replacement pinned to the preferred pool.
7. **Fallback**: a replica pending ``fallback_after_seconds`` is widened to the next pool, one
   pool per period.
8. **Delete**: every replica drains, then stops; with none left the record goes (``remove``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from crossdock.queue.models import Job
from crossdock.queue.serving import (Endpoint, ServiceMetrics, ServiceRecord, ServiceReplica, ServiceState,
                                     ServiceStatus, service_transition)
from crossdock.queue.services import scaling
from crossdock.queue.services.replicas import is_ready, most_cpu
from crossdock.queue.states import JobState

CRASH_WINDOW_SECONDS = 60.0
CRASH_LIMIT = 3
"""Replicas ending on their own within the window before new ones are held."""


@dataclass(frozen=True)
class Inputs:
    record: ServiceRecord
    jobs: Sequence[Job]
    """The replica jobs the service follows (finished ones included until forgotten)."""
    endpoints: Mapping[int, Endpoint]
    metrics: ServiceMetrics | None
    pools: tuple[str, ...]
    """The pools replicas may use, preferred first (``replicas.service_pools``)."""
    room: Mapping[str, int]
    """Pool → replicas of this service it could take now on a node that has none (for move-back)."""
    now: float


@dataclass(frozen=True)
class Create:
    replica: ServiceReplica
    pools: tuple[str, ...]
    why: str


@dataclass(frozen=True)
class Widen:
    job_id: int
    pools: tuple[str, ...]


@dataclass(frozen=True)
class Stop:
    job_id: int
    why: str


@dataclass(frozen=True)
class Plan:
    status: ServiceStatus
    creates: tuple[Create, ...] = ()
    drains: tuple[int, ...] = ()
    """Replica jobs to take out of traffic (``set_draining`` and the backend's ``drain_replica``)."""
    stops: tuple[Stop, ...] = ()
    """Replica jobs to cancel (SIGTERM, as ``crossdock cancel``)."""
    widens: tuple[Widen, ...] = ()
    forget: tuple[int, ...] = ()
    events: tuple[dict[str, Any], ...] = ()
    remove: bool = False
    """Deleted: every replica is gone; drop the record."""


@dataclass
class _Pass:
    inputs: Inputs
    status: ServiceStatus
    creates: list[Create] = field(default_factory=list)
    drains: list[int] = field(default_factory=list)
    stops: list[Stop] = field(default_factory=list)
    widens: list[Widen] = field(default_factory=list)
    forget: list[int] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)
    out: set[int] = field(default_factory=set)
    """Replica jobs this pass takes out (drained or stopped): no longer counted."""

    def event(self, event: str, message: str, **fields: Any) -> None:
        self.events.append({"event": event, "message": message, **fields})

    def take_out(self, job: Job, why: str) -> None:
        """Drain a replica that takes traffic; stop one that never was ready."""
        self.out.add(job.id)
        name = job.spec.service.replica if job.spec.service else "?"
        if is_ready(job, self.inputs.endpoints.get(job.id)):
            self.drains.append(job.id)
            self.event("replica_draining", f"replica {name} (job {job.id}) drains: {why}", job_id=job.id)
        else:
            self.stops.append(Stop(job.id, why))
            self.event("replica_stopped", f"replica {name} (job {job.id}) stops: {why}", job_id=job.id)

    def create(self, why: str, pools: tuple[str, ...], replaces: int | None = None, pinned: bool = False) -> None:
        rec = self.inputs.record
        ordinal = self.status.next_replica
        self.status.next_replica += 1
        replica = ServiceReplica(name=rec.spec.name, replica=ordinal, generation=rec.generation, port=rec.spec.port,
                                 ready_path=rec.spec.ready_path, replaces=replaces, pinned=pinned)
        self.creates.append(Create(replica, pools, why))
        self.event("replica_created", f"replica {ordinal} on {', '.join(pools)}: {why}", replica=ordinal,
                   pools=list(pools))


def _ordinal(job: Job) -> int:
    return job.spec.service.replica if job.spec.service else -1


def reconcile(inputs: Inputs) -> Plan:
    rec, now = inputs.record, inputs.now
    p = _Pass(inputs, rec.status.model_copy(deep=True))
    old_state = rec.status.state
    alive = _forget_finished(p)
    _drain_to_stop(p, alive)
    live = [j for j in alive if j.id not in p.out and not _draining(p, j)]
    ready = [j for j in live if is_ready(j, inputs.endpoints.get(j.id))]
    if rec.deleting:
        for job in live:
            p.take_out(job, "the service is being deleted")
        remaining = alive  # the record goes once every replica job has ended
        state = ServiceState.DELETED if not remaining else ServiceState.DELETING
        if state is ServiceState.DELETED and old_state is not ServiceState.DELETING:  # nothing to drain: both steps now
            old_state = _finish(p, old_state, ServiceState.DELETING, 0, [], [], "deleting").status.state
        return _finish(p, old_state, state, desired=0, live=[], ready=[],
                       message="deleting: draining every replica" if remaining else "deleted", remove=not remaining)
    _replacements(p, live)
    live = [j for j in live if j.id not in p.out]
    scale = scaling.desired_replicas(rec.spec, p.status, inputs.metrics, rec.override, len(ready), now)
    p.status.recommended = scale.recommended
    p.status.recommendations, p.status.scale_events = scale.recommendations, scale.scale_events
    if scale.desired != p.status.desired and p.status.updated_at:
        p.event("scaled", f"{p.status.desired} → {scale.desired} replicas: {scale.message}",
                **{"from": p.status.desired, "to": scale.desired, "reason": scale.limited_by})
    outdated = [j for j in live if j.spec.service and j.spec.service.generation < rec.generation]
    _rolling_update(p, live, outdated)
    live = [j for j in live if j.id not in p.out]
    held = _crash_loop(p)
    _scale(p, live, scale.desired, held)
    live = [j for j in live if j.id not in p.out]
    if not outdated:
        _move_back(p, live)
    _widen(p, live)
    ready = [j for j in live if is_ready(j, inputs.endpoints.get(j.id))]
    if outdated:
        state = ServiceState.UPDATING
    elif len(ready) >= scale.desired and not held:
        state = ServiceState.AVAILABLE
    else:
        state = ServiceState.DEPLOYING if old_state is ServiceState.DEPLOYING and not held else ServiceState.DEGRADED
    message = scale.message + (f"; {held}" if held else "")
    if state is not ServiceState.AVAILABLE and (pending := _pending_why(live)):
        message += f"; {pending}"
    if inputs.metrics is not None and inputs.metrics.cpu_used:
        p.status.cpu_used = most_cpu(inputs.metrics.cpu_used)
    return _finish(p, old_state, state, scale.desired, live, ready, message)


def _finish(p: _Pass, old: ServiceState, state: ServiceState, desired: int, live: list[Job], ready: list[Job],
            message: str, remove: bool = False) -> Plan:
    state = service_transition(p.inputs.record.spec.name, old, state)
    if state is not old:
        p.event("state", f"{old} → {state}: {message}", **{"from": str(old), "to": str(state)})
    s = p.status
    s.state, s.desired, s.replicas, s.ready, s.message, s.updated_at = (state, desired, len(live), len(ready), message,
                                                                         p.inputs.now)
    live_ids = {j.id for j in live}
    s.pending_since = {k: v for k, v in s.pending_since.items() if k in live_ids}
    return Plan(s, tuple(p.creates), tuple(p.drains), tuple(p.stops), tuple(p.widens), tuple(p.forget),
                tuple(p.events), remove)


EXPLANATION_CHARS = 200


def _pending_why(live: list[Job]) -> str:
    """Why the pending replicas pend, as the scheduling cycle recorded it (reason and explanation)."""
    pending = [j for j in live if j.state is JobState.PENDING]
    if not pending:
        return ""
    reasons: dict[str, int] = {}
    for job in pending:
        reasons[str(job.reason)] = reasons.get(str(job.reason), 0) + 1
    counted = ", ".join(f"{n} {reason}" for reason, n in reasons.items())
    explained = next((" ".join(j.explanation.split()) for j in pending if j.explanation), "")
    if len(explained) > EXPLANATION_CHARS:
        explained = explained[:EXPLANATION_CHARS - 1] + "…"
    return (f"{len(pending)} replica{'s' * (len(pending) != 1)} pending ({counted})"
            + (f": {explained}" if explained else ""))


def _draining(p: _Pass, job: Job) -> bool:
    ep = p.inputs.endpoints.get(job.id)
    return ep is not None and ep.draining


def _forget_finished(p: _Pass) -> list[Job]:
    """The replica jobs still alive; finished ones are forgotten, failures counted."""
    alive = []
    now, generation = p.inputs.now, p.inputs.record.generation
    if p.status.failures_generation != generation:  # the update that fixes a crash loop lifts its hold
        p.status.failures, p.status.failures_generation = [], generation
    p.status.failures = [t for t in p.status.failures if now - t < CRASH_WINDOW_SECONDS]
    for job in p.inputs.jobs:
        if not job.state.terminal:
            if job.cancel_requested:
                p.out.add(job.id)  # being stopped already
            alive.append(job)
            continue
        p.forget.append(job.id)
        if not job.cancel_requested and job.state is not JobState.CANCELLED:
            if job.spec.service is None or job.spec.service.generation >= generation:
                p.status.failures.append(now)
            p.event("replica_failed", f"replica {_ordinal(job)} (job {job.id}) ended {job.state}"
                    f" ({job.reason}); a new one takes its place", job_id=job.id, state=str(job.state))
    return alive


def _drain_to_stop(p: _Pass, alive: list[Job]) -> None:
    spec, now = p.inputs.record.spec, p.inputs.now
    for job in alive:
        ep = p.inputs.endpoints.get(job.id)
        if job.id in p.out or ep is None or not ep.draining:
            continue
        p.out.add(job.id)
        waited = now - (ep.draining_since or now)
        if ep.drained:
            p.stops.append(Stop(job.id, "drained: its last request is done"))
        elif waited >= spec.drain_timeout_seconds or job.state is not JobState.RUNNING:
            p.stops.append(Stop(job.id, f"drain timeout ({spec.drain_timeout_seconds:g} s)"
                                if job.state is JobState.RUNNING else "draining and not running"))
        else:
            continue
        p.event("replica_stopped", f"replica {_ordinal(job)} (job {job.id}) stops: {p.stops[-1].why}", job_id=job.id)


def _pairs(live: list[Job]) -> dict[int, Job]:
    """Replaced job id → its live replacement (both alive)."""
    ids = {j.id for j in live}
    return {j.spec.service.replaces: j for j in live
            if j.spec.service and j.spec.service.replaces is not None and j.spec.service.replaces in ids}


def _replacements(p: _Pass, live: list[Job]) -> None:
    by_id = {j.id: j for j in live}
    spec, now = p.inputs.record.spec, p.inputs.now
    for old_id, new in _pairs(live).items():
        if is_ready(new, p.inputs.endpoints.get(new.id)):
            p.take_out(by_id[old_id], f"replica {_ordinal(new)} (job {new.id}) took over and is ready")
            continue
        since = p.status.pending_since.get(new.id)
        if (new.spec.service and new.spec.service.pinned and new.state is JobState.PENDING and since is not None
                and now - since >= spec.fallback_after_seconds):
            p.out.add(new.id)
            p.stops.append(Stop(new.id, "move back given up: the preferred pool had no room after all"))
            p.event("replica_stopped", f"replica {_ordinal(new)} (job {new.id}) stops: move back given up"
                    f" after {spec.fallback_after_seconds:g} s pending", job_id=new.id)


def _crash_loop(p: _Pass) -> str:
    n = len(p.status.failures)
    if n < CRASH_LIMIT:
        return ""
    return (f"crash loop: {n} replicas ended on their own in the last {CRASH_WINDOW_SECONDS:g} s;"
            " no new replica until that calms")


def _scale(p: _Pass, live: list[Job], desired: int, held: str) -> None:
    pairs = _pairs(live)
    slots = len(live) - len(pairs)
    first = p.inputs.pools[:1]
    if slots < desired and not held:
        for _ in range(desired - slots):
            p.create(f"scale up to {desired}", first)
    elif slots > desired:
        replacing = {j.id for j in pairs.values()}
        singles = [j for j in live if j.id not in pairs and j.id not in replacing]
        pools = p.inputs.pools
        gen = p.inputs.record.generation

        def order(j: Job) -> tuple:  # first to go: pending, not ready, outdated, on a fallback pool, newest
            ready = is_ready(j, p.inputs.endpoints.get(j.id))
            rank = pools.index(j.pool) if j.pool in pools else len(pools)
            return (j.state is not JobState.PENDING, ready, (j.spec.service.generation if j.spec.service else 0) >= gen,
                    -rank, -_ordinal(j))

        going = sorted(singles, key=order)[:slots - desired]
        for job in going:
            p.take_out(job, f"scale down to {desired}")
        for old_id, new in list(pairs.items())[:max(0, slots - desired - len(going))]:
            p.take_out(new, f"scale down to {desired}")
            p.take_out(next(j for j in live if j.id == old_id), f"scale down to {desired}")


def _rolling_update(p: _Pass, live: list[Job], outdated: list[Job]) -> None:
    if not outdated:
        return
    gen = p.inputs.record.generation
    for job in outdated:
        if not is_ready(job, p.inputs.endpoints.get(job.id)) and job.id not in _pairs(live):
            p.take_out(job, f"generation {job.spec.service.generation} is outdated (now {gen})")
    live = [j for j in live if j.id not in p.out]
    if _pairs(live):
        return  # surge 1: one replacement at a time
    waiting = [j for j in outdated if j.id not in p.out]
    if waiting:
        oldest = min(waiting, key=lambda j: (j.spec.service.generation, _ordinal(j)))
        p.create(f"rolling update to generation {gen}: replaces replica {_ordinal(oldest)}", p.inputs.pools[:1],
                 replaces=oldest.id)


def _move_back(p: _Pass, live: list[Job]) -> None:
    pools = p.inputs.pools
    if len(pools) < 2 or _pairs(live) or p.creates:
        return
    if any(j.state is JobState.PENDING for j in live) or p.inputs.room.get(pools[0], 0) <= 0:
        return
    away = [j for j in live if j.pool in pools[1:] and is_ready(j, p.inputs.endpoints.get(j.id))]
    if not away:
        return
    job = max(away, key=lambda j: (pools.index(j.pool), _ordinal(j)))
    p.create(f"move back: {pools[0]} has room; replaces replica {_ordinal(job)} on {job.pool}", pools[:1],
             replaces=job.id, pinned=True)


def _widen(p: _Pass, live: list[Job]) -> None:
    spec, now, pools = p.inputs.record.spec, p.inputs.now, p.inputs.pools
    for job in live:
        if job.state is not JobState.PENDING:
            continue
        # a fresh replica's clock starts at its submission, a requeued one's when it is seen pending
        fresh = job.attempts == 0 and job.submit_time is not None
        since = p.status.pending_since.setdefault(job.id, min(now, job.submit_time.timestamp()) if fresh else now)
        if job.spec.service is None or job.spec.service.pinned:
            continue
        steps = len(pools) if spec.fallback_after_seconds <= 0 else 1 + int((now - since) // spec.fallback_after_seconds)
        want = pools[:min(len(pools), steps)]
        if len(want) > len(job.pools) and tuple(job.pools) == want[:len(job.pools)]:
            p.widens.append(Widen(job.id, want))
            p.event("replica_widened", f"replica {_ordinal(job)} (job {job.id}) pended {now - since:.0f} s on"
                    f" {', '.join(job.pools)}: may now use {', '.join(want)}", job_id=job.id, pools=list(want))
