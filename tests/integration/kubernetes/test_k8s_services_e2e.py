"""Inference services on Kubernetes driven by crossdock end to end: the scheduler leader (cycle,
service controller, follower), a Celery worker dispatching to the real control plane, kwok nodes
of the test's own in an ``l4`` and a ``cpu`` pool.

* replicas spread one per node;
* when the L4 pool is full a new replica lands in the CPU pool after the fallback delay, and moves
  back (a new L4 replica ready first, then the CPU one drains and stops) when L4 frees;
* a training job is preempted to make room for a replica, never the reverse;
* the replica count follows the request rate read from a real Prometheus.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from crossdock import service
from crossdock.queue.models import Job, JobSpec
from crossdock.queue.serving import ServiceSpec
from crossdock.queue.states import TERMINAL, JobState
from k8s_helpers import wait_for
from crossdock.backends.kubernetes import serving as serving_module
from service_nodes import endpoint_ips, pool_config, service_pools
from tests.prometheus_server import scraped

pytestmark = [pytest.mark.kubernetes, pytest.mark.services, pytest.mark.redis, pytest.mark.celery]

FALLBACK_SECONDS = 3


def crossdock_config(tag: str, services: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "priority_classes": {
            "inference": {"value": 1000, "preemptible": False, "grace_seconds": 1},
            "preprocessing": {"value": 500, "preemptible": False, "grace_seconds": 1},
            "training": {"value": 100, "preemptible": True, "grace_seconds": 1},
        },
        "pools": pool_config(tag),
        "queues": {
            "inference": {"priority_class": "inference", "pools": ["l4", "cpu"], "placement": "spread",
                          "cpu_request_ratio": 1.0},
            "batch": {"priority_class": "preprocessing", "pools": ["l4"], "placement": "binpack"},
            "training": {"priority_class": "training", "pools": ["l4"], "placement": "binpack"},
        },
        "default_queue": "batch",
        "scheduler": {"interval_seconds": 0.3, "lease_seconds": 2, "kill_wait_seconds": 1},
        "services": {"interval_seconds": 0.5, **(services or {})},
    }


@pytest.fixture
def start(tmp_path: Path, redis_url: str, monkeypatch, k8s_kubeconfig: Path, k8s_namespace: str
          ) -> Iterator[Callable[..., Any]]:
    """``start(tag, services={...})`` → a running crossdock over the test's nodes."""
    from crossdock.runtime import Runtime
    from tests.conftest import Cluster

    started: list[Cluster] = []

    def run(tag: str, services: dict[str, Any] | None = None) -> Cluster:
        path = tmp_path / "crossdock.yaml"
        path.write_text(yaml.safe_dump(crossdock_config(tag, services)))
        env = {"CROSSDOCK_REDIS_URL": redis_url, "CROSSDOCK_STATE_DIR": str(tmp_path / "state"),
               "CROSSDOCK_CONFIG": str(path), "CROSSDOCK_PREFIX": f"s{uuid.uuid4().hex[:10]}",
               "CROSSDOCK_KUBECONFIG": str(k8s_kubeconfig), "CROSSDOCK_K8S_NAMESPACE": k8s_namespace,
               "CROSSDOCK_K8S_TTL_SECONDS": "600", "CROSSDOCK_K8S_DRAIN_SECONDS": "1"}
        for k, v in env.items():
            monkeypatch.setenv(k, v)
        c = Cluster(Runtime.from_env(), tmp_path)
        started.append(c)
        return c

    yield run
    for c in started:
        c.close()


def deploy(rt, name: str, fallback_after_seconds: float = FALLBACK_SECONDS, **kw: Any) -> None:
    rt.store.services.put(ServiceSpec(name=name, image="registry.local/chat:1", port=8080, ready_path="/healthz",
                                      queue="inference", user="root", fallback_after_seconds=fallback_after_seconds,
                                      drain_timeout_seconds=20, **kw))


def replicas(rt, name: str) -> list[Job]:
    return rt.store.get_many(rt.store.services.replica_ids(name))


def serving(rt, name: str) -> list[Job]:
    """Running replicas that are ready and not draining."""
    eps = {e.job_id: e for e in rt.store.services.endpoints(name)}
    return [j for j in replicas(rt, name) if j.state is JobState.RUNNING and j.id in eps
            and eps[j.id].ready and not eps[j.id].draining]


def until(what: str, fn: Callable[[], Any], rt, name: str, timeout: float = 90) -> Any:
    """``wait_for`` that shows the service's replicas, endpoints and events when it times out."""
    try:
        return wait_for(what, fn, timeout=timeout)
    except BaseException:
        rec = rt.store.services.get(name)
        print("status:", rec.status if rec else None)
        for j in replicas(rt, name):
            print("replica", j.id, j.state.value, j.reason, j.pools, j.pool, j.nodes, j.spec.service)
        print("endpoints:", rt.store.services.endpoints(name))
        print("events:", rt.store.services.events(name)[-20:])
        raise


def node_of(job: Job) -> str:
    (node,) = job.nodes
    return node


def test_replicas_spread_fall_back_to_cpu_and_move_back(start, k8s_client):
    with service_pools(k8s_client, l4=3, cpu=2) as nodes:
        cluster = start(nodes["tag"][0])
        rt = cluster.rt
        l4, cpu = set(nodes["l4"]), set(nodes["cpu"])
        # A non-preemptible job fills one L4 node whole (6 of 8 CPUs; a replica asks for 4).
        (blocker,) = service.submit(rt, [JobSpec(command=["hold"], cpus_per_task=6, queue="batch",
                                                 nodelist=[nodes["l4"][0]])])
        cluster.wait(blocker.id, {JobState.RUNNING})

        name = f"chat-{nodes['tag'][0]}"
        deploy(rt, name, cpus=4, min_replicas=2, max_replicas=2)
        up = until("two replicas serving", lambda: len(s := serving(rt, name)) == 2 and s, rt, name, 90)
        assert len({node_of(j) for j in up}) == 2 and {node_of(j) for j in up} <= l4 - {nodes["l4"][0]}
        # where clients reach it: its Kubernetes Service, recorded for `crossdock services show`
        address = rt.store.services.get(name).address
        assert address is not None and address.startswith("cd-svc-") and address.endswith(".svc:8080"), address

        # Two more fill the two free L4 nodes (a second replica each); the fifth finds L4 full.
        rt.store.services.set_override(name, 5)
        five = until("five replicas serving", lambda: len(s := serving(rt, name)) == 5 and s, rt, name, 120)
        on_cpu = [j for j in five if node_of(j) in cpu]
        assert len(on_cpu) == 1 and len([j for j in five if node_of(j) in l4]) == 4
        (fallback,) = on_cpu
        assert fallback.pool == "cpu"
        waited = (fallback.start_time - fallback.submit_time).total_seconds()
        assert waited >= FALLBACK_SECONDS, f"widened to cpu after {waited:.1f}s, before the fallback delay"

        # L4 frees: a replica pinned to L4 comes up, then the CPU one drains and stops.
        service.cancel(rt, [str(blocker.id)], cluster.send)
        cluster.wait(blocker.id)
        # The CPU replica leaves traffic only once its replacement serves (seen as it starts draining).
        def drain_started() -> tuple[Any, list[Job]] | None:
            ep = rt.store.services.endpoint(fallback.id)
            return (ep, serving(rt, name)) if ep is not None and ep.draining else None

        _ep, at_drain = until("the CPU replica draining", drain_started, rt, name, 120)
        (newcomer,) = [j for j in at_drain if j.spec.service.replaces == fallback.id]
        assert node_of(newcomer) == nodes["l4"][0]
        back = until("all five serving on L4", lambda: len(s := serving(rt, name)) == 5
                     and all(node_of(j) in l4 for j in s) and s, rt, name, 60)
        assert newcomer.id in {j.id for j in back}
        moved = until("the CPU replica stopped", lambda: (j := rt.store.get(fallback.id)).state in TERMINAL and j,
                      rt, name, 60)
        assert moved.state is JobState.CANCELLED and moved.end_time >= newcomer.start_time
        (stopped,) = [e for e in rt.store.services.events(name, 1000)
                      if e["event"] == "replica_stopped" and e.get("job_id") == str(fallback.id)]
        assert "drained" in stopped["message"], stopped  # the pod's drain delay, not the drain timeout


def test_training_is_preempted_for_a_replica_never_the_reverse(start, k8s_client):
    with service_pools(k8s_client, l4=1, cpu=1) as nodes:
        cluster = start(nodes["tag"][0])
        rt = cluster.rt
        (train,) = service.submit(rt, [JobSpec(command=["train"], cpus_per_task=8, queue="training")])
        cluster.wait(train.id, {JobState.RUNNING})
        name = f"chat-{nodes['tag'][0]}"
        # The CPU fallback only after the wait below: a preemption slower than FALLBACK_SECONDS
        # (a loaded machine) would rightly serve from CPU first, which is the other test's story.
        deploy(rt, name, fallback_after_seconds=600, cpus=4, min_replicas=1, max_replicas=1)
        (up,) = until("the replica serving", lambda: serving(rt, name), rt, name, 90)
        assert node_of(up) == nodes["l4"][0]  # it made room on L4 instead of falling back to CPU
        assert rt.store.get(train.id).state is JobState.PENDING  # requeued
        history = rt.store.events(train.id)
        assert any(e.get("to") == JobState.PREEMPTED.value for e in history), history
        # The requeued training job waits; the replica is never its victim.
        cluster.wait_cycles(10)
        assert rt.store.get(up.id).state is JobState.RUNNING and rt.store.get(up.id).attempts == up.attempts
        assert rt.store.get(train.id).state is JobState.PENDING


def test_replicas_follow_the_request_rate_from_prometheus(start, k8s_client, k8s_namespace, tmp_path):
    from prometheus_client import Gauge

    with service_pools(k8s_client, l4=2, cpu=2) as nodes, scraped(tmp_path) as (registry, url):
        name = f"chat-{nodes['tag'][0]}"
        qps = Gauge("chat_requests_per_second", "offered load", ["service"], registry=registry)
        qps.labels(name).set(5)
        cluster = start(nodes["tag"][0], services={"metrics": {
            "source": "prometheus", "url": url, "qps_query": 'sum(chat_requests_per_second{service="{service}"})',
            "window_seconds": 1}})
        rt = cluster.rt
        deploy(rt, name, cpus=1, min_replicas=1, max_replicas=6, target_qps=10,
               scale_down_stabilization_seconds=4)
        until("one replica at 5 qps", lambda: len(serving(rt, name)) == 1, rt, name, 90)
        qps.labels(name).set(38)  # ceil(38 / 10) = 4
        t0 = time.monotonic()
        until("four replicas at 38 qps", lambda: len(serving(rt, name)) == 4, rt, name, 90)
        up_after = time.monotonic() - t0
        svc = serving_module.service_object_name(name)
        wait_for("the Service's endpoints: four", lambda: len(endpoint_ips(k8s_client, k8s_namespace, svc)) == 4)
        qps.labels(name).set(12)  # ceil(12 / 10) = 2, once the stabilization window has passed
        t1 = time.monotonic()
        until("two replicas at 12 qps", lambda: len([j for j in replicas(rt, name) if not j.state.terminal]) == 2,
              rt, name, 90)
        down_after = time.monotonic() - t1  # the stabilization window: the controller's unit tests
        assert len(serving(rt, name)) == 2
        wait_for("the Service's endpoints: two", lambda: len(endpoint_ips(k8s_client, k8s_namespace, svc)) == 2)
        print(f"scale-up to 4 ready replicas: {up_after:.1f}s; scale-in to 2: {down_after:.1f}s")
