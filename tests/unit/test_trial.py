"""--test-only: where and when the scheduler would start a job."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from crossdock.queue.config import parse_config
from crossdock.queue.models import Job, JobSpec
from crossdock.queue.snapshot import Node
from crossdock.queue.states import JobState, Reason
from crossdock.queue.trial import trial

NOW = datetime(2026, 1, 1, tzinfo=timezone.utc)
CFG = parse_config({
    "priority_classes": {"normal": {"value": 100}},
    "pools": {"p": {"backend": "local"}},
    "queues": {"q": {"priority_class": "normal", "pools": ["p"]}},
    "scheduler": {"default_mem_per_cpu_mib": 0},
})
NODES = [Node("n1", "p", "local", 4000, 8000)]


def job(i, cpus=1, **kw):
    extra = {k: kw.pop(k) for k in ("state", "nodes", "start_time", "eligible_time", "alloc_cpu_milli") if k in kw}
    spec = JobSpec(command=["true"], cpus_per_task=cpus, time_limit_seconds=3600, **kw)
    return Job(id=i, spec=spec, queue="q", priority=100, pools=["p"], submit_time=NOW, **extra)


RUNNING = job(1, cpus=4, state=JobState.RUNNING, nodes=["n1"], start_time=NOW - timedelta(minutes=30),
              alloc_cpu_milli=4000)


@pytest.mark.parametrize("active,new,start,nodes", [
    pytest.param([], job(9, cpus=2), NOW, ("n1",), id="fits-now"),
    pytest.param([RUNNING], job(9, cpus=2), NOW + timedelta(minutes=30), ("n1",), id="after-the-running-job"),
    pytest.param([], job(9, eligible_time=NOW + timedelta(hours=2)), NOW + timedelta(hours=2), (), id="begin"),
])
def test_start_and_nodes(active, new, start, nodes):
    t = trial(new, [], active, NODES, CFG, NOW)
    assert (t.start, t.nodes) == (start, nodes)
    assert t.line("q").startswith(f"job to start at {start.isoformat(timespec='seconds')} using")


def test_held_job_has_no_start_and_says_why():
    t = trial(job(9, hold=True), [], [], NODES, CFG, NOW)
    assert t.start is None and t.reason.startswith(Reason.JOB_HELD_USER)
    assert t.line("q") == f"job would pend in queue q: {t.reason}"
