"""What every backend promises when the store fails at the worst moments of a dispatch or a
follow pass (a Redis outage seen from this process: redis-py raises ``ConnectionError``, the store
``StoreUnavailable``): the job
still ends once, in its true state, on one backend object, with nothing resent."""

from __future__ import annotations

import time

import pytest
import redis

from crossdock.queue.errors import StoreUnavailable
from crossdock.queue.states import TERMINAL, JobState

pytestmark = pytest.mark.redis


def follow_through_errors(contract, job_id: int, timeout: float = 90):
    """``contract.follow`` for passes that may raise store errors (the leader's loop survives them)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            return contract.follow(job_id, *TERMINAL, timeout=0)
        except StoreUnavailable:
            pass
        except AssertionError:  # not ended yet
            pass
        time.sleep(0.2)
    raise AssertionError(f"job {job_id} not ended after {timeout}s; went {contract.history(job_id)}")


def test_a_dispatch_that_cannot_record_its_reference_is_followed_by_tag(contract, monkeypatch):
    """The backend took the job, then the store went away before ``set_backend_refs``: the claim
    stays, the reference is missing. Follow finds the job by its tag or name (or the local
    supervisor reports it), records the reference and the end; nobody resends it."""
    job = contract.job(None)

    def store_gone(refs):
        raise StoreUnavailable("the store does not answer (ConnectionError: Connection refused); try again shortly")

    with monkeypatch.context() as patched, pytest.raises(StoreUnavailable):
        patched.setattr(contract.store, "set_backend_refs", store_gone)
        contract.dispatch(job)
    running = contract.follow(job.id, JobState.RUNNING)
    assert running.backend_ref
    assert contract.objects(job) == 1
    contract.release(job, exit_code=0)
    done = contract.follow(job.id, *TERMINAL)
    assert (done.state, done.exit_code, done.attempts) == (JobState.COMPLETED, 0, 1)
    assert contract.sent == []


def test_a_follow_pass_that_cannot_write_loses_nothing(contract, monkeypatch):
    """The follower read the backend's statuses, then the store went away before it wrote them:
    that pass records nothing, and a later one records the end once, with its exit code."""
    job = contract.job(None)
    contract.dispatch(job)
    contract.follow(job.id, JobState.RUNNING)
    assert contract.objects(job) == 1
    contract.release(job, exit_code=3)
    failures = {"left": 3}
    pipeline = redis.client.Pipeline  # under the store's translation: what redis-py raises in an outage
    execute = pipeline.execute

    def execute_or_fail(self, *args, **kw):
        if failures["left"] > 0:
            failures["left"] -= 1
            self.reset()
            raise redis.ConnectionError("Connection refused (the store went away mid-pass)")
        return execute(self, *args, **kw)

    with monkeypatch.context() as patched:
        patched.setattr(pipeline, "execute", execute_or_fail)
        done = follow_through_errors(contract, job.id)
    assert failures["left"] == 0
    assert (done.state, done.exit_code, done.attempts) == (JobState.FAILED, 3, 1)
    assert contract.history(job.id).count("FAILED") == 1
    assert contract.sent == []
