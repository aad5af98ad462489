"""One scheduling leader under a Redis lease; a standby takes over when the leader dies."""

import threading
import time

import pytest

from crossdock import service
from crossdock.queue.models import JobSpec
from crossdock.queue.states import JobState
from crossdock.workers.leader import Scheduler

pytestmark = pytest.mark.redis


def test_standby_takes_over_within_seconds_when_the_leader_dies(runtime, tmp_path):
    store = runtime.store
    lease = runtime.config.scheduler.lease_seconds
    assert store.acquire_lease("leader-a", lease)  # leader a holds the lease, then dies without releasing
    sent = []
    standby = Scheduler(runtime, lambda name, args, kind: sent.append((name, args[0])), holder="standby-b")
    job, = service.submit(runtime, [JobSpec(command=["true"], workdir=str(tmp_path))])
    stop = threading.Event()
    t = threading.Thread(target=standby.run, args=(stop,), daemon=True)
    started = time.monotonic()
    t.start()
    try:
        time.sleep(lease / 2)
        assert sent == [] and store.get(job.id).state is JobState.PENDING  # a standby does not schedule
        while not sent and time.monotonic() - started < lease + 5:
            time.sleep(0.05)
        took = time.monotonic() - started
        assert sent == [("crossdock.dispatch", job.id)]
        assert took <= lease + 2
        assert store.lease_holder() == "standby-b"
        assert store.get(job.id).state is JobState.SCHEDULED
    finally:
        stop.set()
        t.join(5)
    assert store.lease_holder() is None  # released on a clean stop


def test_only_the_leader_schedules(runtime, tmp_path):
    sent_a, sent_b = [], []
    a = Scheduler(runtime, lambda *x: sent_a.append(x), holder="a")
    b = Scheduler(runtime, lambda *x: sent_b.append(x), holder="b")
    service.submit(runtime, [JobSpec(command=["true"], workdir=str(tmp_path)) for _ in range(3)])
    stop = threading.Event()
    threads = [threading.Thread(target=s.run, args=(stop,), daemon=True) for s in (a, b)]
    for th in threads:
        th.start()
    time.sleep(2)
    stop.set()
    for th in threads:
        th.join(5)
    assert sorted([len(sent_a), len(sent_b)]) == [0, 3]
