"""A worker fleet on the real control plane: a Deployment scaled through its /scale subresource
(the real Deployment and ReplicaSet controllers, pods Running on kwok nodes), and the pods known
to be busy kept through a scale-in by their pod-deletion-cost."""

from __future__ import annotations

import pytest

from crossdock.backends.kubernetes import KubernetesBackend
from crossdock.backends.kubernetes.fleet import BUSY_COST, DELETION_COST
from crossdock.queue.config import Fleet, parse_config
from tests.integration.kubernetes.conftest import _wait_for

kubernetes = pytest.importorskip("kubernetes")
from kubernetes import client  # noqa: E402

pytestmark = [pytest.mark.kubernetes, pytest.mark.autoscale]

CONFIG = parse_config({"priority_classes": {"p": {"value": 1}}, "pools": {"cpu": {"backend": "k8s"}},
                       "queues": {"prep": {"priority_class": "p", "pools": ["cpu"]}}})


def deployment(name: str, replicas: int) -> client.V1Deployment:
    labels = {"app": name}
    container = client.V1Container(name="worker", image="crossdock-fleet-worker",
                                   resources=client.V1ResourceRequirements(requests={"cpu": "10m", "memory": "16Mi"}))
    return client.V1Deployment(
        metadata=client.V1ObjectMeta(name=name),
        spec=client.V1DeploymentSpec(
            replicas=replicas, selector=client.V1LabelSelector(match_labels=labels),
            template=client.V1PodTemplateSpec(metadata=client.V1ObjectMeta(labels=labels),
                                              spec=client.V1PodSpec(containers=[container],
                                                                    termination_grace_period_seconds=0))))


def live_pods(core, ns: str) -> dict[str, client.V1Pod]:
    return {p.metadata.name: p for p in core.list_namespaced_pod(ns, label_selector="app=workers").items
            if p.metadata.deletion_timestamp is None}


def ready(pod: client.V1Pod) -> bool:
    return pod.status.phase == "Running" and any(c.type == "Ready" and c.status == "True"
                                                 for c in pod.status.conditions or [])


def test_a_deployment_follows_scale_fleet_and_busy_pods_survive_a_scale_in(k8s_client, k8s_namespace):
    ns = k8s_namespace
    apps, core = client.AppsV1Api(k8s_client), client.CoreV1Api(k8s_client)
    apps.create_namespaced_deployment(ns, deployment("workers", 1))
    backend = KubernetesBackend(CONFIG, k8s_client, namespace=ns, watch=False)
    fleet = Fleet(backend="k8s", name="workers", namespace=ns)
    try:
        assert backend.fleet_replicas(fleet) == 1
        assert backend.scale_fleet(fleet, 5) == 5
        assert apps.read_namespaced_deployment("workers", ns).spec.replicas == 5
        pods = _wait_for("5 ready pods", lambda: (p := live_pods(core, ns)) and len(p) == 5
                         and all(map(ready, p.values())) and p)
        # the newest two are busy: without their deletion cost, the ReplicaSet's own ranking (ready
        # for the shortest time first) would delete them first
        busy = set(sorted(pods, key=lambda n: (pods[n].metadata.creation_timestamp, n))[-2:])
        assert backend.scale_fleet(fleet, 2, busy=busy) == 2
        assert backend.fleet_replicas(fleet) == 2
        left = _wait_for("the idle pods deleted", lambda: set(live_pods(core, ns)) == busy and live_pods(core, ns))
        assert {n: p.metadata.annotations.get(DELETION_COST) for n, p in left.items()} == dict.fromkeys(busy, BUSY_COST)
        # asked below the busy count, the fleet stops at it: no busy pod is deleted
        assert backend.scale_fleet(fleet, 1, busy=busy) == 2
        assert apps.read_namespaced_deployment_scale("workers", ns).spec.replicas == 2
        assert set(live_pods(core, ns)) == busy
        # once idle, they may go
        assert backend.scale_fleet(fleet, 0) == 0
        _wait_for("every pod deleted", lambda: not live_pods(core, ns) or None)
    finally:
        apps.delete_namespaced_deployment("workers", ns)


@pytest.mark.redis
def test_the_autoscaler_scales_a_deployment_fleet_and_tells_it_the_busy_workers(k8s_client, k8s_namespace, runtime,
                                                                                 tmp_path, monkeypatch):
    """The loop with a Kubernetes fleet: replicas read and set through /scale, the workers that run
    a task (as Celery's remote control would name them: the pod's name) passed to the scale-in."""
    import yaml

    from crossdock.queue.autoscale.plan import AutoscalePlan, AutoscaleState, FleetDecision
    from crossdock.runtime import Runtime
    from crossdock.workers.autoscaler import Autoscaler

    ns = k8s_namespace
    cfg = tmp_path / "fleet.yaml"
    cfg.write_text(yaml.safe_dump({
        "priority_classes": {"p": {"value": 1}}, "pools": {"cpu": {"backend": "k8s"}},
        "queues": {"prep": {"priority_class": "p", "pools": ["cpu"], "elastic": {
            "metric": "queue_length", "per_replica": 1, "max": 4,
            "fleet": {"backend": "k8s", "name": "workers", "namespace": ns}}}}}))
    monkeypatch.setenv("CROSSDOCK_CONFIG", str(cfg))
    rt = Runtime.from_env()
    rt.backends.use("k8s", KubernetesBackend(rt.config, k8s_client, namespace=ns, watch=False))
    apps, core = client.AppsV1Api(k8s_client), client.CoreV1Api(k8s_client)
    apps.create_namespaced_deployment(ns, deployment("workers", 0))
    busy: set[str] = set()
    decided = []
    loop = Autoscaler(rt, "leader-k8s", lambda pending, active: None, lambda *a: None, busy=lambda: busy,
                      plan_fn=lambda inputs, state, config, now: decided.pop(0)(inputs))
    try:
        decided.append(lambda i: AutoscalePlan(fleets=(FleetDecision("prep", 3, i.fleets["prep"], 3, 3),),
                                               state=AutoscaleState()))
        loop.pass_once()
        assert apps.read_namespaced_deployment_scale("workers", ns).spec.replicas == 3
        pods = _wait_for("3 ready pods", lambda: (p := live_pods(core, ns)) and len(p) == 3
                         and all(map(ready, p.values())) and p)
        busy |= set(sorted(pods)[:2])
        decided.append(lambda i: AutoscalePlan(fleets=(FleetDecision("prep", 0, i.fleets["prep"], 0, 1),),
                                               state=AutoscaleState()))
        loop.pass_once()
        assert apps.read_namespaced_deployment_scale("workers", ns).spec.replicas == 2
        _wait_for("the idle pod deleted", lambda: set(live_pods(core, ns)) == busy)
        ev = [e for e in rt.store.events() if e.get("event") == "fleet_scaled"]
        assert [(e["from"], e["to"]) for e in ev] == [("0", "3"), ("3", "2")]
        assert "2 reached (busy replicas are not stopped)" in ev[-1]["reason"]
    finally:
        apps.delete_namespaced_deployment("workers", ns)
