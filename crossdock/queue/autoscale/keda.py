"""Queue-length scaling with KEDA's semantics, on top of :mod:`.hpa`.

KEDA (``kedacore/keda pkg/scaling/executor/scale_scaledobjects.go``) owns 0 ↔ 1 and the HPA it
generates owns 1 ↔ N:

- a trigger is active when its metric is strictly above ``activation`` (``activationListLength``,
  ``activationValue``: ``len > activation``);
- active at zero replicas: up to ``max(min, 1)`` at once (``scaleFromZeroOrIdle``);
- inactive with replicas and ``min == 0``: down to 0 once ``last_active + cooldown`` has passed
  (strictly: ``LastActiveTime.Add(cooldownPeriod).Before(now)``; never active → at once),
  ``scaleToZeroOrIdle``;
- otherwise the HPA, with ``minReplicas = max(min, 1)``, an External metric of target type
  ``AverageValue``: ``desired = ceil(metric / per_replica)`` through :func:`.hpa.recommend` and
  :func:`.hpa.normalize` (KEDA's cooldown does not apply to 1 ↔ N).

The metric is what crossdock knows exactly, not a Redis list length (kombu keeps one list per
priority step and reserved messages in ``unacked``, so ``LLEN`` undercounts): :func:`backlog`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from crossdock.queue.autoscale import hpa
from crossdock.queue.config import Elastic
from crossdock.queue.models import Job
from crossdock.queue.states import JobState, Reason

DEFAULT_MAX_REPLICAS = 100
"""KEDA's ``maxReplicaCount`` default: the bound of an ``elastic`` block without ``max``."""

_HELD = (Reason.JOB_HELD_USER, Reason.JOB_HELD_ADMIN)


def backlog(jobs: Iterable[Job], queue: str) -> int:
    """Pending + scheduled + running jobs of ``queue``: the work its replicas are for.

    KEDA counts whatever sits in the list it watches; crossdock counts what is eligible or running.
    A held job (``--hold``, or held by an admin or by Slurm) needs no replica until it is released,
    so it is left out; a job waiting for a dependency or its begin time is counted, since it will
    run without anyone acting on it. Terminal and preempted jobs are not work.
    """
    n = 0
    for job in jobs:
        if job.queue != queue:
            continue
        if job.state is JobState.PENDING:
            if job.spec.hold or job.reason in _HELD:
                continue
            n += 1
        elif job.state in (JobState.SCHEDULED, JobState.RUNNING):
            n += 1
    return n


NODE_BOUND = (Reason.RESOURCES, Reason.WAITING_FOR_CAPACITY, Reason.UNSCHEDULABLE, Reason.QUOTA_EXCEEDED,
              Reason.LICENSES, Reason.PRIORITY, Reason.PREEMPTING)
"""Pending reasons no worker lifts: the job waits on room on the nodes (or a quota, a license,
jobs ahead of it), and a worker only dispatches what the scheduling cycle placed."""


def no_capacity(jobs: Iterable[Job], queue: str, desired: int) -> str:
    """Why a fleet of more than one worker adds no capacity: every pending job of ``queue`` waits
    on something workers do not provide (:data:`NODE_BOUND`); "" when some would be helped."""
    pending: dict[str, int] = {}
    for job in jobs:
        if job.queue == queue and job.state is JobState.SCHEDULED and job.backend_ref is None:
            return ""  # placed, waiting for a worker to dispatch it
        if job.queue != queue or job.state is not JobState.PENDING or job.spec.hold or job.reason in _HELD:
            continue
        if job.reason not in NODE_BOUND:
            return ""
        pending[str(job.reason)] = pending.get(str(job.reason), 0) + 1
    if desired <= 1 or not pending:
        return ""
    reasons = ", ".join(f"{n} {reason}" for reason, n in sorted(pending.items()))
    return (f"more workers add no capacity: the {sum(pending.values())} pending jobs wait on room the workers"
            f" do not make ({reasons}); a worker only dispatches placed jobs: add nodes to the queue's pools"
            " (a provisioner) or lower the fleet's max")


@dataclass(frozen=True)
class FleetStep:
    """One pass for one elastic queue."""

    replicas: int
    """What the fleet is set to."""
    recommended: int
    """What the metric alone asks for (``hpa.recommend``, AverageValue)."""
    limited_by: str
    """The step that made ``replicas`` differ from ``recommended``: "" | "Activation" (KEDA's 0 ↔ 1:
    woken to max(min, 1), or kept at zero at or below the activation threshold) | "Cooldown" (kept
    above zero until the cooldown since the last activity ends) | a reason of
    :func:`.hpa.normalize_explained`."""
    active: bool
    """The metric is above the activation threshold: the caller sets ``last_active = now``."""


def scale_pass(*, metric: float, per_replica: float, activation: float, cooldown_seconds: float,
               min_replicas: int, max_replicas: int, current_replicas: int, last_active: float | None,
               now: float, behavior: dict | None, recommendations: list[tuple[float, int]],
               scale_up_events: list[tuple[float, int]],
               scale_down_events: list[tuple[float, int]]) -> FleetStep:
    """Decide one pass: KEDA's activation and cooldown, then the HPA's arithmetic.

    ``metric`` is the queue's backlog (``queue_length``) or its arrival rate (``qps``);
    ``per_replica`` the AverageValue target. ``behavior`` is defaulted (:func:`.hpa.behavior_dict`)
    or None (the HPA's legacy path); its tolerances apply. Times are seconds on one clock;
    history lists are as :func:`.hpa.normalize` takes them."""
    if not 0 <= min_replicas <= max_replicas or max_replicas < 1:
        raise ValueError(f"min, max: {min_replicas}, {max_replicas} need 0 ≤ min ≤ max and max ≥ 1")
    up_tol, down_tol = hpa.tolerances(behavior)
    recommended = hpa.recommend(current_replicas, metric, per_replica, target_type="AverageValue",
                                scale_up_tolerance=up_tol, scale_down_tolerance=down_tol)
    active = metric > activation

    def step(replicas: int, reason: str) -> FleetStep:
        return FleetStep(replicas, recommended, reason if replicas != recommended else "", active)

    if current_replicas == 0:
        if active:
            return step(max(min_replicas, 1), "Activation")
        if min_replicas > 0:  # scaled to zero outside crossdock: back to min (KEDA, idle count unset)
            return step(min_replicas, "TooFewReplicas")
        return step(0, "Activation")
    if not active and min_replicas == 0:
        if last_active is None or last_active + cooldown_seconds < now:
            return step(0, "Activation")
    hpa_min = max(min_replicas, 1)
    replicas, reason = hpa.normalize_explained(
        current_replicas, recommended, min_replicas=hpa_min, max_replicas=max_replicas, behavior=behavior,
        recommendations=recommendations, scale_up_events=scale_up_events, scale_down_events=scale_down_events)
    if reason == "TooFewReplicas" and min_replicas == 0:
        reason = "Cooldown"  # the HPA's floor of 1 holds only until KEDA's cooldown lets it go to zero
    return step(replicas, reason)


def elastic_pass(elastic: Elastic, metric: float, *, current_replicas: int, last_active: float | None,
                 now: float, recommendations: list[tuple[float, int]],
                 scale_up_events: list[tuple[float, int]],
                 scale_down_events: list[tuple[float, int]]) -> FleetStep:
    """:func:`scale_pass` for a queue's ``elastic`` block: ``metric`` is its backlog for
    ``queue_length`` (target ``per_replica``) or its requests per second for ``qps`` (target
    ``target``); ``max`` unset is KEDA's 100."""
    # the config requires the one its metric uses (Elastic._target_and_bounds)
    per_replica = elastic.per_replica if elastic.metric == "queue_length" else elastic.target
    return scale_pass(metric=metric, per_replica=per_replica, activation=elastic.activation,
                      cooldown_seconds=elastic.cooldown_seconds, min_replicas=elastic.min,
                      max_replicas=DEFAULT_MAX_REPLICAS if elastic.max is None else elastic.max,
                      current_replicas=current_replicas, last_active=last_active, now=now,
                      behavior=hpa.behavior_dict(elastic.behavior), recommendations=recommendations,
                      scale_up_events=scale_up_events, scale_down_events=scale_down_events)
