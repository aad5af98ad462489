"""The resilient loop runner: failures back off (bounded, jittered) and the loop resumes."""

from __future__ import annotations

import threading

import pytest

from crossdock.queue.errors import StoreUnavailable
from crossdock.workers.loops import BACKING_OFF, DEAD, RUNNING, STOPPED, Backoff, Part, resilient
from crossdock.workers.supervision import GaveUp, Restarts


@pytest.mark.parametrize("failures, low, high", [(1, 0.1, 0.2), (2, 0.2, 0.4), (5, 1.6, 3.2), (50, 2.5, 5.0)],
                         ids=["first", "second", "fifth", "capped"])
def test_backoff_is_exponential_jittered_and_bounded(failures, low, high):
    delays = [Backoff(base=0.2, cap=5.0).delay(failures) for _ in range(200)]
    assert all(low <= d <= high for d in delays)
    assert len(set(delays)) > 1  # jittered


def test_a_loop_resumes_after_store_errors_and_records_them():
    stop, calls = threading.Event(), []
    part = Part("test loop", Backoff(base=0.001, cap=0.002))

    def turn():
        calls.append(part.state)
        if len(calls) <= 3:
            raise StoreUnavailable("Redis is away")
        if len(calls) == 6:
            stop.set()

    resilient(part, stop, turn)
    assert len(calls) == 6
    assert calls[1:4] == [BACKING_OFF] * 3  # each retry came after a recorded failure
    assert calls[4] == RUNNING  # the success reset it
    assert part.state == STOPPED and part.failures == 0
    assert part.last_error == "StoreUnavailable: Redis is away" and part.last_success_at is not None


def test_a_bug_is_retried_too_but_a_base_exception_ends_the_loop_dead():
    stop, calls = threading.Event(), []
    part = Part("test loop", Backoff(base=0.001, cap=0.002))

    def turn():
        calls.append(1)
        if len(calls) == 1:
            raise KeyError("bug")
        raise SystemExit(3)

    with pytest.raises(SystemExit):
        resilient(part, stop, turn)
    assert len(calls) == 2 and part.state == DEAD and part.last_error == "SystemExit: 3"


def test_a_step_backing_off_is_skipped_until_its_retry_time():
    part = Part("step", Backoff(base=60, cap=60))
    assert not part.call(lambda: 1 / 0)
    ran = []
    assert not part.call(lambda: ran.append(1))  # still backing off
    assert ran == [] and part.report()["state"] == BACKING_OFF and part.report()["retry_in"] > 25


def test_too_many_deaths_within_the_window_give_up():
    r = Restarts("the thing", limit=2, window=60)
    r.note()
    r.note()
    with pytest.raises(GaveUp, match="the thing died 3 times within 60s; giving up"):
        r.note()
