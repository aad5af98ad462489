"""The leader's services step on the local backend, with a real Celery worker: replica jobs are
created, placed and started like any job, a ready replica drains before it stops, a not-ready one
stops at once, and a deleted service's replicas all end before its record goes."""

from __future__ import annotations

import sys

import pytest

from crossdock.queue.services import ServiceSpec, ServiceState
from crossdock.queue.states import JobState
from crossdock.settings import current_user
from tests.waiting import eventually

pytestmark = [pytest.mark.redis, pytest.mark.celery, pytest.mark.services, pytest.mark.timeout(240)]


def replicas(store, name):
    return store.get_many(store.services.replica_ids(name))


def test_replicas_are_created_placed_drained_and_stopped_by_the_leader(cluster, tmp_path):
    store = cluster.rt.store
    svc = store.services
    spec = ServiceSpec(name="echo", user=current_user(), command=[sys.executable, "-c", "import time; time.sleep(600)"],
                       workdir=str(tmp_path), queue="inference", min_replicas=2, max_replicas=2, cpus=1,
                       drain_timeout_seconds=120)
    svc.put(spec)
    running = eventually("two running replicas", lambda: (lambda js: js if len(js) == 2 and all(
        j.state is JobState.RUNNING for j in js) else None)(replicas(store, "echo")))
    assert sorted(j.spec.service.replica for j in running) == [0, 1]
    assert all(j.spec.service.name == "echo" and not j.preemptible and j.spec.time_limit_seconds is None
               and j.priority_class == "inference" for j in running)
    ready, other = sorted(running, key=lambda j: j.id)
    svc.set_endpoint(ready.id, ready.attempts, "127.0.0.1", 45001)  # what the router does once it answers
    svc.set_ready(ready.id, ready.attempts, True)
    eventually("one ready replica in the status", lambda: svc.get("echo").status.ready == 1)

    # scale to 0 by hand: the not-ready replica stops at once, the ready one drains first
    svc.set_override("echo", 0)
    assert cluster.wait(other.id, timeout=60).state is JobState.CANCELLED
    eventually("the ready replica draining", lambda: (svc.endpoint(ready.id) or None) and svc.endpoint(ready.id).draining)
    assert store.get(ready.id).state is JobState.RUNNING  # still serving its last requests
    svc.set_drained(ready.id)  # the router saw its in-flight count reach 0
    assert cluster.wait(ready.id, timeout=60).state is JobState.CANCELLED
    eventually("the finished replicas forgotten", lambda: svc.replica_ids("echo") == [])
    events = [e["event"] for e in svc.events("echo")]
    assert events.count("replica_created") == 2 and "replica_draining" in events and "replica_stopped" in events

    # the override cleared: back to min_replicas; then delete: the replicas end, then the record goes
    svc.set_override("echo", None)
    again = eventually("two new replicas running", lambda: (lambda js: js if len(js) == 2 and all(
        j.state is JobState.RUNNING for j in js) else None)(replicas(store, "echo")))
    assert sorted(j.spec.service.replica for j in again) == [2, 3]  # ordinals are never reused
    svc.request_delete("echo")
    eventually("the record removed", lambda: svc.get("echo") is None)
    assert all(j.state is JobState.CANCELLED for j in store.get_many(j.id for j in again))
    states = [e["to"] for e in store.events() if e.get("service") == "echo" and e.get("event") == "state"]
    assert states[-2:] == [ServiceState.DELETING, ServiceState.DELETED]
