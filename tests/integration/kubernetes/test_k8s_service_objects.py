"""The Kubernetes backend's service side against the real control plane: replica pods with their
probe and labels, the Service whose EndpointSlices (made by the controller-manager) list the ready,
serving replicas, the drain that takes a replica out of them first, and the status pass's readiness.

On kwok no container runs: kwok's ``pod-ready`` Stage sets a Running pod's Ready condition at
once, without probing, so readiness here is the condition the status pass must report."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from kubernetes import client

from crossdock.backends.kubernetes import KubernetesBackend
from crossdock.backends.kubernetes import serving
from crossdock.queue.config import parse_config
from crossdock.queue.models import Job, JobSpec, ServiceReplica
from crossdock.queue.ports import RunsServices
from crossdock.queue.serving import ServiceSpec
from crossdock.queue.states import JobState
from k8s_helpers import wait_for
from service_nodes import endpoint_ips, pool_config, service_pools

pytestmark = [pytest.mark.kubernetes, pytest.mark.services]


@pytest.fixture
def nodes(k8s_client: client.ApiClient) -> Iterator[dict[str, list[str]]]:
    with service_pools(k8s_client, l4=2, cpu=0) as made:
        yield made


@pytest.fixture
def backend(k8s_client, k8s_namespace, nodes) -> Iterator[KubernetesBackend]:
    cfg = parse_config({
        "priority_classes": {"inference": {"value": 1000, "preemptible": False, "grace_seconds": 1}},
        "pools": pool_config(nodes["tag"][0]),
        "queues": {"inference": {"priority_class": "inference", "pools": ["l4", "cpu"], "placement": "spread"}},
        "default_queue": "inference",
    })
    b = KubernetesBackend(cfg, k8s_client, namespace=k8s_namespace, ttl_seconds_after_finished=None,
                          drain_seconds=1.5)
    b.sync_priority_classes()
    yield b
    b.close()


def replica(i: int, node: str, name: str) -> Job:
    spec = JobSpec(command=["python", "-m", "http.server", "8080"], cpus_per_task=1,
                   service=ServiceReplica(name=name, replica=i, port=8080, ready_path="/"))
    return Job(id=int(time.time() * 1000) % 10**9 * 10 + i, spec=spec, queue="inference", priority_class="inference",
               priority=1000, preemptible=False, pools=["l4"], pool="l4", nodes=[node], attempts=1, backend="k8s")


def test_replicas_behind_a_service_drain_out_of_its_endpoints(backend, k8s_client, k8s_namespace, nodes):
    name = f"chat-{nodes['tag'][0]}"
    assert isinstance(backend, RunsServices) and backend.capabilities.services
    jobs = [replica(i, node, name) for i, node in enumerate(nodes["l4"])]
    for job in jobs:
        backend.submit(job)
    address = backend.ensure_service(ServiceSpec(name=name, image="server:1", port=8080))
    svc_name = serving.service_object_name(name)
    assert address == f"{svc_name}.{k8s_namespace}.svc:8080"
    core = client.CoreV1Api(k8s_client)
    backend.ensure_service(ServiceSpec(name=name, image="server:1", port=9090))  # a new port: updated in place
    assert [p.port for p in core.read_namespaced_service(svc_name, k8s_namespace).spec.ports] == [9090]
    assert backend.ensure_service(ServiceSpec(name=name, image="server:1", port=8080)) == address
    assert [p.port for p in core.read_namespaced_service(svc_name, k8s_namespace).spec.ports] == [8080]

    up = wait_for("both replicas ready", lambda: (st := backend.status(jobs)) and all(
        s.state is JobState.RUNNING and s.extra.get("ready") == "true" and s.extra.get("host") for s in st.values())
        and len(st) == 2 and st, timeout=60)
    hosts = {up[j.id].extra["host"] for j in jobs}
    assert {up[j.id].nodes for j in jobs} == {(n,) for n in nodes["l4"]}
    assert {up[j.id].extra["port"] for j in jobs} == {"8080"}
    wait_for("the Service's endpoints list both", lambda: endpoint_ips(k8s_client, k8s_namespace, svc_name) == hosts)

    # Drain the first: it leaves the endpoints while its pod still runs, then reads as drained.
    first, second = jobs
    assert backend.drain_replica(first) == 1
    assert backend.drain_replica(first) == 0  # again: the first drain's clock stands
    keep = {up[second.id].extra["host"]}
    wait_for("the drained replica out of the endpoints", lambda: endpoint_ips(k8s_client, k8s_namespace, svc_name) == keep)
    st = wait_for("the drained replica's status to say so",
                  lambda: (s := backend.status([first])[first.id]).extra.get("draining") == "true" and s)
    assert st.state is JobState.RUNNING and st.extra["ready"] == "false"
    wait_for("drained after the drain delay", lambda: backend.status([first])[first.id].extra.get("drained") == "true",
             timeout=10)
    assert "draining" not in backend.status([second])[second.id].extra

    backend.delete_service(name)
    backend.delete_service(name)  # gone already: fine
    assert svc_name not in {s.metadata.name for s in core.list_namespaced_service(k8s_namespace).items}
