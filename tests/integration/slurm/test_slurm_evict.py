"""The Slurm backend's ``evict`` (the descheduler's move) against the real local cluster: Slurm's own
requeue, then crossdock cancels the requeued Slurm job and requeues the job as a new attempt."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from slurm_helpers import wait_file, wait_for, wait_terminal

from crossdock.backends.slurm import SlurmBackend
from crossdock.queue.ports import Eviction, EvictsJobs
from crossdock.queue.states import JobState

pytestmark = [pytest.mark.slurm, pytest.mark.descheduler]

WORKER = """#!/bin/bash
echo "run ${SLURM_RESTART_COUNT:-0}"
while :; do sleep 0.2; done
"""


@pytest.fixture
def followed(runtime, slurm_cluster):
    """A Slurm backend (the default ``cancel`` preempt policy) over a real store, and the follower's status pass."""
    from crossdock.workers.leader import Scheduler

    backend = SlurmBackend.from_env(slurm_cluster, driver="cli", store=runtime.store)
    runtime.backends.use("slurm", backend)
    sched = Scheduler(runtime, send=lambda *a: None, holder="test")
    return backend, lambda ids: sched.follower._by_status("slurm", runtime.store.get_many(ids))


def running(store, backend, follow, job) -> tuple:
    (job,) = store.submit([job.model_copy(update={"id": 0})])
    store.transition(job.id, JobState.SCHEDULED, bump_attempt=True, fields={"nodes": ["cpu1"], "backend": "slurm"})
    ref = backend.submit(store.get(job.id))
    store.set_backend_refs({job.id: ref})
    deadline = time.monotonic() + 30
    while store.get(job.id).state is not JobState.RUNNING:
        assert time.monotonic() < deadline, store.get(job.id)
        follow([job.id])
        time.sleep(0.2)
    return store.get(job.id), ref


def test_evict_requeues_through_slurm_and_crossdock_makes_a_new_attempt(followed, store, make_job):
    backend, follow = followed
    assert isinstance(backend, EvictsJobs) and backend.capabilities.evicts
    job, ref = running(store, backend, follow, make_job(WORKER, nodelist=["cpu1"]))
    out = Path(job.spec.stdout)
    wait_file(out, "run 0")

    assert backend.evict(job, grace_seconds=0) is Eviction.EVICTED
    assert store.get(job.id).preempt_requested
    deadline = time.monotonic() + 60
    while store.get(job.id).state is not JobState.PENDING:
        assert time.monotonic() < deadline, (store.get(job.id), backend.status_refs([ref])[ref])
        follow([job.id])
        time.sleep(0.25)
    again = store.get(job.id)
    assert (again.attempts, again.preempt_requested, again.nodes) == (1, False, [])
    assert [e["to"] for e in store.events(job.id)][-3:] == ["RUNNING", "PREEMPTED", "PENDING"]
    # Slurm requeued it (the restart count went up) and crossdock cancelled that requeued job: it does
    # not run again on the node it left; the next attempt is crossdock's to place.
    final = wait_for(backend, ref, lambda s: s.state is None or s.state.terminal)
    assert final.state in (None, JobState.CANCELLED), final
    assert "run 1" not in out.read_text()


def test_evicting_a_finished_job_is_gone(followed, store, make_job):
    backend, follow = followed
    job, ref = running(store, backend, follow, make_job("#!/bin/bash\nsleep 1\n", nodelist=["cpu1"]))
    wait_terminal(backend, ref)
    assert backend.evict(job, grace_seconds=0) is Eviction.GONE
    assert not store.get(job.id).preempt_requested
