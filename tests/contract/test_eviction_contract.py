"""What every backend that evicts (``Capabilities.evicts``) promises the descheduler: a running job
evicted is requeued for a new attempt, like a preemption; a job it no longer runs is ``GONE``."""

from __future__ import annotations

import pytest

from crossdock.queue.ports import Eviction, EvictsJobs
from crossdock.queue.states import TERMINAL, JobState, Reason

pytestmark = [pytest.mark.redis, pytest.mark.descheduler]


def _evicting(contract):
    if not contract.capabilities.evicts:
        pytest.skip(f"{contract.adapter.kind} does not evict (Capabilities.evicts is False)")
    assert isinstance(contract.backend, EvictsJobs)
    return contract.backend


def test_an_evicted_job_is_requeued(contract):
    backend = _evicting(contract)
    job = contract.job(None)
    contract.dispatch(job)
    running = contract.follow(job.id, JobState.RUNNING)
    assert backend.evict(running, 0) is Eviction.EVICTED
    again = contract.follow(job.id, JobState.PENDING)
    assert contract.history(job.id)[-3:] == ["RUNNING", "PREEMPTED", "PENDING"]
    assert again.reason == Reason.PREEMPTED and (again.attempts, again.nodes, again.preempt_requested) == (1, [], False)


def test_a_finished_job_is_gone(contract):
    backend = _evicting(contract)
    job = contract.job(0)
    contract.dispatch(job)
    done = contract.follow(job.id, *TERMINAL)
    assert backend.evict(done, 0) is Eviction.GONE
