"""The leader records from its own cycle over a real store: placements and queue waits when it
admits, the jobs gauge from what it read, an ended attempt (with its run time) when a job it
placed leaves the active set."""

from __future__ import annotations

from datetime import timedelta

import pytest
from prometheus_client import REGISTRY

from crossdock import service
from crossdock.backends.redis_store.store import utcnow
from crossdock.queue.models import JobSpec
from crossdock.queue.states import JobState
from crossdock.workers.leader import Scheduler

pytestmark = [pytest.mark.operate, pytest.mark.redis]


def value(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def test_the_cycle_records_placements_jobs_and_ended_attempts(runtime):
    sched = Scheduler(runtime, lambda *_: None, holder="metrics-test", fleets={}, busy=lambda: set())
    placed = value("crossdock_placements_total", queue="inference", pool="local", backend="local")
    waits = value("crossdock_job_queue_wait_seconds_count", queue="inference")
    ended = value("crossdock_jobs_finished_total", queue="inference", backend="local", state="COMPLETED")
    ran = value("crossdock_job_run_seconds_sum", queue="inference", backend="local", state="COMPLETED")
    a, b = service.submit(runtime, [JobSpec(command=["true"], queue="inference")] * 2)
    assert sched.cycle_once().admitted == 2
    assert value("crossdock_placements_total", queue="inference", pool="local", backend="local") - placed == 2
    assert value("crossdock_job_queue_wait_seconds_count", queue="inference") - waits == 2
    assert value("crossdock_jobs", queue="inference", state="PENDING", backend="none") == 2  # as the cycle read them
    start = utcnow() - timedelta(seconds=7)
    store = runtime.store
    assert store.transition(a.id, JobState.RUNNING, fields={"start_time": start}, actor="local")
    assert store.transition(a.id, JobState.COMPLETED, fields={"end_time": start + timedelta(seconds=7)},
                            actor="local")
    sched.cycle_once()  # nothing pending: the active set alone, and the attempt that left it
    assert value("crossdock_jobs_finished_total", queue="inference", backend="local", state="COMPLETED") - ended == 1
    assert value("crossdock_job_run_seconds_sum", queue="inference", backend="local", state="COMPLETED") - ran \
        == pytest.approx(7, abs=0.01)
    assert value("crossdock_jobs", queue="inference", state="SCHEDULED", backend="local") == 1
    assert value("crossdock_jobs", queue="inference", state="PENDING", backend="none") == 0
    assert b.id in sched._placed and a.id not in sched._placed
