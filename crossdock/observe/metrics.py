"""Every crossdock metric, and the functions that record them.

Names follow Prometheus' conventions: ``crossdock_`` first, base units (seconds), ``_total`` on
counters, no unit on counts of things. Every label takes values from a bounded set: queues,
pools, backend kinds and priority classes come from the config, states and reasons from
``crossdock.queue.states``, phases and operations from the code; never a job id, user or node.

Who records what:

- the leader (``workers/leader.py``), from each cycle's inputs and ``CycleResult``: jobs by
  queue/state/backend (a gauge set from the cycle's view of pending and active jobs, so that a
  scrape never reads Redis), pending reasons, placements, preemptions, queue wait, run time and
  ends of jobs that left the active set, cycle and phase durations;
- dispatch tasks and the follower: dispatch latency (scheduled to accepted by the backend),
  retries and resends, every backend call's duration and errors, backend up/down and outages;
- the autoscaler: backlog, current and desired replicas and nodes;
- the descheduler: migrations (:func:`record_migration`);
- the store: every Redis round trip (command, duration), through the hook of :mod:`crossdock.observe`.
"""

from __future__ import annotations

import time
from collections import Counter as _Count
from contextlib import contextmanager
from datetime import datetime, timezone
from typing import Any, Iterable, Iterator, Mapping

from prometheus_client import Counter, Gauge, Histogram

_GAUGE = {"multiprocess_mode": "livemostrecent"}
"""In a Celery worker (prefork, one file per child) a gauge is the live children's latest value."""

WAIT_BUCKETS = (0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 900, 1800, 3600, 4 * 3600, 12 * 3600, 86400)
RUN_BUCKETS = (1, 5, 10, 30, 60, 300, 900, 1800, 3600, 4 * 3600, 12 * 3600, 86400, 3 * 86400, 7 * 86400)
CYCLE_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)
CALL_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
DISPATCH_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900)
REDIS_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1)

NONE = "none"
"""Label value of a job that has no backend or pool yet (pending)."""

# --- jobs ------------------------------------------------------------------------------------
JOBS = Gauge("crossdock_jobs", "Jobs pending, scheduled or running, as the last scheduling cycle saw them",
             ["queue", "state", "backend"], **_GAUGE)
PENDING_REASONS = Gauge("crossdock_pending_jobs", "Pending jobs by the reason the last cycle gave them",
                        ["queue", "reason"], **_GAUGE)
QUEUE_WAIT = Histogram("crossdock_job_queue_wait_seconds",
                       "From submission (or eligibility: --begin, requeue) to placement by the scheduler",
                       ["queue"], buckets=WAIT_BUCKETS)
RUN_TIME = Histogram("crossdock_job_run_seconds", "Run time of ended attempts (start to end)",
                     ["queue", "backend", "state"], buckets=RUN_BUCKETS)
FINISHED = Counter("crossdock_jobs_finished_total", "Attempts that left the active set, by the state they ended in",
                   ["queue", "backend", "state"])

# --- the scheduling cycle -------------------------------------------------------------------
CYCLES = Counter("crossdock_scheduler_cycles_total", "Scheduling cycles run (leader only)")
CYCLE_TIME = Histogram("crossdock_scheduler_cycle_seconds", "One scheduling cycle: read, decide, commit, send",
                       buckets=CYCLE_BUCKETS)
PHASE_TIME = Histogram("crossdock_scheduler_cycle_phase_seconds",
                       "Phases of the cycle: read/snapshot/commit (I/O) and the pure pipeline's phases",
                       ["phase"], buckets=CYCLE_BUCKETS)
LEADER = Gauge("crossdock_scheduler_leader", "1 while this process holds the scheduling lease", **_GAUGE)
PLACEMENTS = Counter("crossdock_placements_total", "Jobs admitted to a pool by the scheduler",
                     ["queue", "pool", "backend"])
PREEMPTIONS = Counter("crossdock_preemptions_total", "Jobs the scheduler preempted (the victims' queue and pool)",
                      ["queue", "pool"])
MIGRATIONS = Counter("crossdock_migrations_total", "Jobs the descheduler moved, by strategy and outcome",
                     ["strategy", "outcome"])

# --- dispatch and backends -------------------------------------------------------------------
DISPATCH_LATENCY = Histogram("crossdock_dispatch_latency_seconds",
                             "From the cycle's commit (SCHEDULED) to the backend accepting the job",
                             ["backend"], buckets=DISPATCH_BUCKETS)
DISPATCHES = Counter("crossdock_dispatches_total", "Dispatch tasks by outcome",
                     ["backend", "outcome"])
DISPATCH_RETRIES = Counter("crossdock_dispatch_retries_total",
                           "Dispatches retried because the backend was unavailable", ["backend"])
DISPATCH_RESENDS = Counter("crossdock_dispatch_resends_total",
                           "Dispatches the follower sent again (nobody claimed them in time)", ["backend"])
BACKEND_CALL = Histogram("crossdock_backend_request_seconds", "Calls to a backend (submit, status, inventory...)",
                         ["backend", "operation"], buckets=CALL_BUCKETS)
BACKEND_ERRORS = Counter("crossdock_backend_errors_total", "Backend calls that failed, by error class",
                         ["backend", "operation", "error"])
BACKEND_UP = Gauge("crossdock_backend_up", "1 when the last call to the backend reached it, 0 when it was unavailable",
                   ["backend"], **_GAUGE)
BACKEND_OUTAGES = Counter("crossdock_backend_outages_total", "Times a backend went from reachable to unavailable",
                          ["backend"])

# --- the autoscaler --------------------------------------------------------------------------
AS_BACKLOG = Gauge("crossdock_autoscaler_backlog_jobs", "Backlog of a queue's worker fleet, as the last pass saw it",
                   ["queue"], **_GAUGE)
AS_CURRENT = Gauge("crossdock_autoscaler_current_replicas", "Worker fleet replicas now", ["queue"], **_GAUGE)
AS_DESIRED = Gauge("crossdock_autoscaler_desired_replicas", "Worker fleet replicas the last pass wanted",
                   ["queue"], **_GAUGE)
AS_POOL_CURRENT = Gauge("crossdock_autoscaler_current_nodes", "Nodes of a provisioned pool now", ["pool"], **_GAUGE)
AS_POOL_DESIRED = Gauge("crossdock_autoscaler_desired_nodes", "Nodes of a provisioned pool the last pass wanted",
                        ["pool"], **_GAUGE)
AS_POOL_WAITING = Gauge("crossdock_autoscaler_waiting_jobs", "Jobs waiting for a pool's new nodes", ["pool"], **_GAUGE)

# --- the store -------------------------------------------------------------------------------
REDIS_ROUND_TRIP = Histogram("crossdock_redis_round_trip_seconds",
                             "Redis round trips (a pipeline or transaction is one: PIPELINE, MULTI)",
                             ["command"], buckets=REDIS_BUCKETS)
REDIS_ERRORS = Counter("crossdock_redis_errors_total", "Redis round trips that failed", ["command"])

UNAVAILABLE_ERRORS = ("BackendUnavailable", "StoreUnavailable", "OSError", "ConnectionError", "TimeoutError",
                      "ImportError")
"""Error classes that mean the backend is away rather than that it refused one request."""


def _label(value: Any) -> str:
    return str(value) if value not in (None, "") else NONE


def _state(job: Any) -> str:
    state = job.state
    return getattr(state, "value", str(state))


# --- the leader ------------------------------------------------------------------------------
_job_series: set[tuple[str, str, str]] = set()
_reason_series: set[tuple[str, str]] = set()


def _set_all(gauge: Gauge, counts: Mapping[tuple, int], seen: set) -> None:
    """Set every series counted, and 0 for those of earlier calls that are gone (the label sets
    are bounded, so keeping them at 0 costs little and keeps rates and graphs continuous)."""
    for labels in seen - set(counts):
        gauge.labels(*labels).set(0)
    for labels, n in counts.items():
        gauge.labels(*labels).set(n)
    seen.update(counts)


def record_jobs(pending: Iterable[Any], active: Iterable[Any]) -> None:
    """Jobs by queue, state and backend from the cycle's own reads."""
    raw = _Count((job.queue, job.state, job.backend) for job in (*pending, *active))
    counts: dict[tuple[str, str, str], int] = {}
    for (queue, state, backend), n in raw.items():
        key = (_label(queue), getattr(state, "value", str(state)), _label(backend))
        counts[key] = counts.get(key, 0) + n
    _set_all(JOBS, counts, _job_series)


def record_reasons(pending_reasons: Mapping[int, str], jobs: Mapping[int, Any]) -> None:
    raw = _Count((getattr(jobs.get(i), "queue", None), reason) for i, reason in pending_reasons.items())
    counts: dict[tuple[str, str], int] = {}
    for (queue, reason), n in raw.items():
        key = (_label(queue), _label(reason))
        counts[key] = counts.get(key, 0) + n
    _set_all(PENDING_REASONS, counts, _reason_series)


def forget_cycle_view() -> None:
    """This process no longer runs cycles (it lost the lease): its jobs and reasons gauges go to 0,
    so that a sum over the leader and the standbys counts each job once."""
    _set_all(JOBS, {}, _job_series)
    _set_all(PENDING_REASONS, {}, _reason_series)


def _seconds_since(when: datetime | None, now: datetime) -> float | None:
    if when is None:
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return max((now - when).total_seconds(), 0.0)


def record_cycle(result: Any, jobs: Mapping[int, Any], now: datetime, seconds: float,
                 io_phases: Mapping[str, float]) -> None:
    """What one cycle decided (``result``: a ``CycleResult``; ``jobs``: the jobs it read by id)."""
    CYCLES.inc()
    CYCLE_TIME.observe(seconds)
    for phase, took in (*io_phases.items(), *result.timings.items()):
        PHASE_TIME.labels(phase).observe(took)
    placed: dict[tuple[str, str, str], int] = {}
    waits: dict[str, Any] = {}  # one labelled child per queue: labels() takes a lock each call
    for p in result.admitted:
        job = jobs.get(p.job_id)
        queue = _label(job.queue if job is not None else None)
        key = (queue, _label(p.pool), _label(p.backend))
        placed[key] = placed.get(key, 0) + 1
        if job is not None:
            wait = _seconds_since(job.eligible_time or job.submit_time, now)
            if wait is not None:
                child = waits.get(queue) or waits.setdefault(queue, QUEUE_WAIT.labels(queue))
                child.observe(wait)
    for key, n in placed.items():
        PLACEMENTS.labels(*key).inc(n)
    for pre in result.preemptions:
        victim = jobs.get(pre.victim_id)
        PREEMPTIONS.labels(_label(victim.queue if victim else None), _label(victim.pool if victim else None)).inc()
    record_reasons(result.pending, jobs)


def record_ended(jobs: Iterable[Any]) -> None:
    """Attempts that left the active set since the last cycle (read again after they left)."""
    for job in jobs:
        labels = (_label(job.queue), _label(job.backend), _state(job))
        FINISHED.labels(*labels).inc()
        if job.start_time is not None and job.end_time is not None:
            RUN_TIME.labels(*labels).observe(max((job.end_time - job.start_time).total_seconds(), 0.0))


def set_leader(leader: bool) -> None:
    LEADER.set(1 if leader else 0)


def record_migration(strategy: str, outcome: str) -> None:
    """One move the descheduler made or tried (``outcome``: evicted, refused_by_budget, gone...)."""
    MIGRATIONS.labels(_label(strategy), _label(outcome)).inc()


# --- dispatch and backends ---------------------------------------------------------------------
_up: dict[str, bool] = {}


def backend_reached(backend: str, reached: bool) -> None:
    """Whether the last call reached ``backend``; an outage is counted when it stops answering."""
    if not reached and _up.get(backend, True):
        BACKEND_OUTAGES.labels(backend).inc()
    _up[backend] = reached
    BACKEND_UP.labels(backend).set(1 if reached else 0)


@contextmanager
def backend_call(backend: str, operation: str) -> Iterator[None]:
    """Time one call to a backend; count its error, and mark the backend down when the error says
    it is away (unavailable, a connection error), up when it answered. The exception goes on."""
    backend = _label(backend)
    started = time.perf_counter()
    try:
        yield
    except Exception as exc:
        name = type(exc).__name__
        BACKEND_ERRORS.labels(backend, operation, name).inc()
        away = name in UNAVAILABLE_ERRORS or isinstance(exc, OSError) or bool(getattr(exc, "retryable", False))
        backend_reached(backend, not away)  # a refusal (SubmitFailed) is an answer
        raise
    else:
        backend_reached(backend, True)
    finally:
        BACKEND_CALL.labels(backend, operation).observe(time.perf_counter() - started)


def record_dispatch(backend: str, outcome: str, jobs: Iterable[Any] = ()) -> None:
    """One dispatch's outcome; for those the backend took, each job's latency since its commit."""
    backend = _label(backend)
    DISPATCHES.labels(backend, outcome).inc()
    if outcome != "submitted":
        return
    now = datetime.now(timezone.utc)
    for job in jobs:
        latency = _seconds_since(job.scheduled_time, now)
        if latency is not None:
            DISPATCH_LATENCY.labels(backend).observe(latency)


def dispatch_retried(backend: str) -> None:
    DISPATCH_RETRIES.labels(_label(backend)).inc()


def dispatch_resent(backend: str) -> None:
    DISPATCH_RESENDS.labels(_label(backend)).inc()


# --- the autoscaler ------------------------------------------------------------------------------
def record_autoscale(decisions: Mapping[str, Any]) -> None:
    """One pass's decisions as ``crossdock autoscale`` shows them (``workers/autoscaler.decisions``)."""
    for row in decisions.get("fleets", []):
        queue = _label(row.get("queue"))
        for gauge, key in ((AS_BACKLOG, "backlog"), (AS_CURRENT, "current"), (AS_DESIRED, "desired")):
            if row.get(key) is not None:
                gauge.labels(queue).set(row[key])
    for row in decisions.get("pools", []):
        pool = _label(row.get("pool"))
        for gauge, key in ((AS_POOL_CURRENT, "current"), (AS_POOL_DESIRED, "desired"), (AS_POOL_WAITING, "waiting")):
            if row.get(key) is not None:
                gauge.labels(pool).set(row[key])


# --- the store -----------------------------------------------------------------------------------
def redis_round_trip(command: str, seconds: float, ok: bool) -> None:
    REDIS_ROUND_TRIP.labels(command).observe(seconds)
    if not ok:
        REDIS_ERRORS.labels(command).inc()
