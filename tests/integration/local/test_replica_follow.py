"""A status pass's word on service replicas (address, readiness, drained) lands on their endpoints
in a real store, written only when it changes; batch jobs and statuses without it are left alone."""

from __future__ import annotations

import pytest

from crossdock.queue.models import Job, JobSpec, ServiceReplica
from crossdock.queue.ports import BackendStatus
from crossdock.queue.states import JobState
from crossdock.workers.replica_follow import record_replicas

pytestmark = [pytest.mark.redis, pytest.mark.services]


def submit(store, service: bool = True) -> Job:
    spec = JobSpec(command=["server"], service=ServiceReplica(name="chat", replica=0, port=8080) if service else None)
    return store.submit([Job(id=0, spec=spec, queue="inference")])[0].model_copy(update={"attempts": 1})


def status(**extra: str) -> BackendStatus:
    return BackendStatus("ns/cd-1-1", JobState.RUNNING, extra=dict(extra))


def test_address_readiness_and_drain_follow_the_status_pass(store):
    job, batch = submit(store), submit(store, service=False)
    pod = {"host": "10.244.0.9", "port": "8080"}
    assert record_replicas(store, [job, batch], {job.id: status(ready="false", **pod),
                                                 batch.id: status(ready="true", **pod)}) == 1
    ep = store.services.endpoint(job.id)
    assert (ep.host, ep.port, ep.attempt, ep.ready) == ("10.244.0.9", 8080, 1, False)
    assert store.services.endpoint(batch.id) is None

    assert record_replicas(store, [job], {job.id: status(ready="true", **pod)}) == 1
    assert store.services.endpoint(job.id).ready
    assert record_replicas(store, [job], {job.id: status(ready="true", **pod)}) == 0  # nothing changed

    # drained only counts once the controller asked for the drain
    assert record_replicas(store, [job], {job.id: status(ready="false", drained="true", **pod)}) == 1
    assert not store.services.endpoint(job.id).drained
    store.services.set_draining(job.id)
    assert record_replicas(store, [job], {job.id: status(ready="false", drained="true", **pod)}) == 1
    ep = store.services.endpoint(job.id)
    assert ep.draining and ep.drained and not ep.ready


def test_no_address_no_readiness_and_a_status_without_replica_words_is_ignored(store):
    job = submit(store)
    assert record_replicas(store, [job], {job.id: status(ready="true")}) == 0  # no pod IP yet
    assert store.services.endpoint(job.id) is None
    assert record_replicas(store, [job], {job.id: status()}) == 0
    assert record_replicas(store, [job], {}) == 0
