"""End to end on this machine: real Redis, a real Celery worker, the scheduling loop, the local backend."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from crossdock import service
from crossdock.queue.models import ArraySpec, Dependency, DependencySpec, JobSpec
from crossdock.queue.states import JobState, Reason

pytestmark = [pytest.mark.redis, pytest.mark.celery]


def submit(rt, **kw):
    return service.submit(rt, [JobSpec(**kw)])


def test_job_runs_to_completion_with_output_file_and_exit_code(cluster, tmp_path):
    job, = submit(cluster.rt, command=["sh", "-c", 'echo "hello $SLURM_JOB_ID"; exit 0'], workdir=str(tmp_path),
                  stdout="out-%j.txt")
    done = cluster.wait(job.id)
    assert done.state is JobState.COMPLETED, done
    assert done.exit_code == 0
    assert (tmp_path / f"out-{job.id}.txt").read_text() == f"hello {job.id}\n"
    events = [e["to"] for e in cluster.rt.store.events(job.id)]
    assert events == ["PENDING", "SCHEDULED", "RUNNING", "COMPLETED"]


def test_failing_job_records_its_exit_code(cluster, tmp_path):
    job, = submit(cluster.rt, command=["sh", "-c", "exit 7"], workdir=str(tmp_path))
    done = cluster.wait(job.id)
    assert (done.state, done.exit_code, done.reason) == (JobState.FAILED, 7, Reason.NON_ZERO_EXIT)
