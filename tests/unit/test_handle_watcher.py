"""The client's watcher: one pass over the watched jobs at a time, passes at least POLL_SECONDS
apart however fast handles come (a burst of submissions once made one full read of every watched
job per submission: quadratic, and the Python API slower than REST)."""

from __future__ import annotations

import concurrent.futures as cf
import threading
import time
from datetime import datetime, timezone

from crossdock import handles
from crossdock.client import Client
from crossdock.queue.models import Job, JobSpec
from crossdock.queue.states import JobState
from tests.waiting import eventually

T0 = datetime(2026, 12, 1, 12, 0, 0, tzinfo=timezone.utc)


def job(job_id: int, state: JobState = JobState.PENDING) -> Job:
    spec = JobSpec(command=["true"], workdir="/work/x", user="alice")
    return Job(id=job_id, spec=spec, state=state, queue="batch", submit_time=T0)


class Gateway:
    """Answers every pass with the watched jobs; records when each pass came and how many it read."""

    def __init__(self):
        self.passes: list[tuple[float, int]] = []
        self.ended: set[int] = set()
        self.lock = threading.Lock()

    def jobs(self, ids):
        with self.lock:
            self.passes.append((time.monotonic(), len(ids)))
            return [job(i, JobState.COMPLETED if i in self.ended else JobState.PENDING) for i in ids]


def client_over(gateway) -> Client:
    client = Client.__new__(Client)
    client.gateway = gateway
    return client


def test_a_burst_of_handles_is_read_in_passes_at_least_the_poll_interval_apart():
    gw = Gateway()
    client = client_over(gw)
    made = [handles.JobHandle(client, job(i)) for i in range(1, 301)]
    eventually("a pass that reads every handle", lambda: gw.passes and gw.passes[-1][1] == len(made))
    gw.ended.update(h.id for h in made)
    done, not_done = cf.wait(made, timeout=60)  # settled by the watcher, as the stdlib's wait sees them
    assert not not_done and {cf.Future.result(h, 0).state for h in done} == {JobState.COMPLETED}
    times = [t for t, _n in gw.passes]
    gaps = [b - a for a, b in zip(times, times[1:])]
    assert len(gw.passes) < len(made)
    assert min(gaps, default=handles.POLL_SECONDS) >= handles.POLL_SECONDS - 0.01, gaps


def test_a_handle_that_comes_while_the_watcher_idles_is_read_and_settled():
    gw = Gateway()
    client = client_over(gw)
    first = handles.JobHandle(client, job(1))
    # let the watcher back off to its idle interval: passes that end nothing
    eventually("the watcher backing off", lambda: len(gw.passes) >= 6, timeout=60)
    second = handles.JobHandle(client, job(2))
    eventually("a pass that reads the new handle", lambda: any(n == 2 for _t, n in gw.passes))
    gw.ended.update({1, 2})
    _done, not_done = cf.wait([first, second], timeout=60)
    assert not not_done
