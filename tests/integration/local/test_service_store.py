"""The service records against a real Redis: generations, status, override, endpoints with their
attempts, drain, traffic samples, events and deletion."""

from __future__ import annotations

import pytest

from crossdock.queue.models import Job, JobSpec, ServiceReplica
from crossdock.queue.services import ServiceMetrics, ServiceSpec, ServiceState, ServiceStatus

pytestmark = [pytest.mark.redis, pytest.mark.services]


def spec(**kw) -> ServiceSpec:
    return ServiceSpec(**{"name": "chat", "command": ["python", "-m", "server"], "user": "ana", **kw})


def replica_job(store, name: str = "chat", ordinal: int = 0) -> Job:
    job = Job(id=0, spec=JobSpec(command=["server"], user="ana",
                                 service=ServiceReplica(name=name, replica=ordinal)), queue="inference")
    return store.submit([job])[0]


def test_put_bumps_the_generation_only_when_the_workload_changes(store):
    svc = store.services
    assert svc.put(spec()) == 1
    assert svc.put(spec(max_replicas=5, target_qps=20)) == 1  # scaling only: same replicas
    assert svc.put(spec(command=["python", "-m", "server", "--v2"])) == 2
    assert svc.put(spec(cpus=2, command=["python", "-m", "server", "--v2"])) == 3
    rec = svc.get("chat")
    assert rec.generation == 3 and rec.spec.cpus == 2 and rec.status.state is ServiceState.DEPLOYING
    assert rec.created > 0 and svc.names() == ["chat"] and [r.spec.name for r in svc.list()] == ["chat"]
    assert svc.get("nope") is None


def test_status_override_address_and_delete_request_only_touch_an_existing_service(store):
    svc = store.services
    assert not svc.set_status("ghost", ServiceStatus(desired=3))
    assert not svc.set_override("ghost", 2) and not svc.request_delete("ghost")
    assert svc.get("ghost") is None and svc.names() == []
    svc.put(spec())
    assert svc.set_status("chat", ServiceStatus(state=ServiceState.AVAILABLE, desired=3, recommendations=[(1.5, 3)]))
    assert svc.set_override("chat", 4) and svc.set_address("chat", "127.0.0.1:9000")
    rec = svc.get("chat")
    assert (rec.status.state, rec.status.desired, rec.status.recommendations) == (ServiceState.AVAILABLE, 3, [(1.5, 3)])
    assert rec.override == 4 and rec.address == "127.0.0.1:9000" and not rec.deleting
    svc.put(spec(max_replicas=3))  # a new spec keeps the status and the override
    assert svc.get("chat").override == 4 and svc.get("chat").status.desired == 3
    assert svc.set_override("chat", None) and svc.get("chat").override is None
    assert svc.request_delete("chat") and svc.get("chat").deleting


def test_endpoints_follow_attempts_readiness_and_drain(store):
    svc = store.services
    svc.put(spec())
    a, b = replica_job(store, ordinal=0), replica_job(store, ordinal=1)
    svc.add_replicas("chat", [a.id, b.id])
    assert svc.replica_ids("chat") == sorted([a.id, b.id])
    svc.set_endpoint(a.id, 1, "127.0.0.1", 41001)
    svc.set_endpoint(b.id, 1, "127.0.0.1", 41002)
    assert svc.set_ready(a.id, 1, True)
    assert not svc.set_ready(b.id, 2, True)  # a report about another attempt is ignored
    eps = {e.job_id: e for e in svc.endpoints("chat")}
    assert (eps[a.id].ready, eps[a.id].port, eps[a.id].replica, eps[a.id].service) == (True, 41001, 0, "chat")
    assert not eps[b.id].ready and eps[b.id].replica == 1
    assert not svc.set_drained(a.id)  # not draining: a stray "drained" changes nothing
    svc.set_draining(a.id)
    first = svc.endpoint(a.id).draining_since
    svc.set_draining(a.id)
    assert svc.endpoint(a.id).draining_since == first is not None
    assert svc.set_drained(a.id)
    ep = svc.endpoint(a.id)
    assert ep.draining and ep.drained and ep.ready
    # a requeued attempt starts not ready, not drained, and stays draining
    svc.set_endpoint(a.id, 2, "127.0.0.1", 41005)
    ep = svc.endpoint(a.id)
    assert (ep.attempt, ep.port, ep.ready, ep.drained, ep.draining) == (2, 41005, False, False, True)
    svc.forget_replicas("chat", [a.id])
    assert svc.replica_ids("chat") == [b.id] and [e.job_id for e in svc.endpoints("chat")] == [b.id]
    assert svc.endpoint(a.id) is None


def test_an_endpoint_needs_a_replica_job(store):
    plain = store.submit([Job(id=0, spec=JobSpec(command=["true"]), queue="inference")])[0]
    with pytest.raises(LookupError, match="not a service replica"):
        store.services.set_endpoint(plain.id, 1, "127.0.0.1", 1)
    with pytest.raises(LookupError, match="no such job"):
        store.services.set_draining(987654)


def test_metrics_events_and_delete(store):
    svc = store.services
    svc.put(spec())
    assert svc.metrics("chat") is None
    sample = ServiceMetrics(qps=120.5, p95_seconds=0.031, replica_qps={0: 60.0, 3: 60.5}, in_flight={0: 2, 3: 1},
                            window_seconds=10, at=1000.0)
    svc.put_metrics("chat", sample)
    assert svc.metrics("chat") == sample
    assert 0 < store.r.ttl(store.k.service_metrics("chat")) <= 300
    svc.add_events("chat", [{"event": "scaled", "from": 1, "to": 3, "message": "qps 120.5"},
                            {"event": "replica_created", "replica": 2, "pools": ["l4"]}], actor="leader")
    events = svc.events("chat")
    assert [e["event"] for e in events] == ["scaled", "replica_created"]
    assert events[1]["pools"] == "l4" and events[0]["actor"] == "leader"
    assert any(e.get("service") == "chat" and e.get("event") == "scaled" for e in store.events())
    job = replica_job(store)
    svc.add_replicas("chat", [job.id])
    svc.set_endpoint(job.id, 1, "127.0.0.1", 5000)
    svc.delete("chat")
    assert svc.get("chat") is None and svc.names() == [] and svc.replica_ids("chat") == []
    assert svc.endpoints("chat") == [] and svc.endpoint(job.id) is None and svc.metrics("chat") is None
    assert store.get(job.id).spec.service.name == "chat"  # the job itself stays
