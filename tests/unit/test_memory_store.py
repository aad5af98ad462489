"""What only the in-memory store can show without waiting: heartbeats, the lease and a dispatcher's
liveness expire on the clock it is given (the contract suite covers the rest, on both stores)."""

from __future__ import annotations

from crossdock.backends.memory_store import MemoryStore
from crossdock.queue.jobstore import DISPATCHER_TTL_SECONDS
from crossdock.queue.models import Job, JobSpec
from crossdock.queue.states import JobState
from tests.clock import Clock


def test_heartbeats_lease_and_dispatchers_expire_on_the_store_clock():
    clock = Clock(1000.0)
    store = MemoryStore(clock=clock)
    [job] = store.submit([Job(id=0, spec=JobSpec(command=["true"], user="alice"))])
    store.transition(job.id, JobState.SCHEDULED, bump_attempt=True)
    store.heartbeat(job.id, ttl=10)
    assert store.acquire_lease("a", 5)
    store.claim_dispatch([job.id], 1, "w1")
    clock.now += 5
    assert store.alive([job.id]) == {job.id: True}
    assert store.lease_holder() is None and store.acquire_lease("b", 5)  # a's lease ran out
    assert store.dispatcher_alive(job.id, 1)
    clock.now += DISPATCHER_TTL_SECONDS
    assert store.alive([job.id]) == {job.id: False}
    assert not store.dispatcher_alive(job.id, 1) and store.dispatch_claimed(job.id, 1)
