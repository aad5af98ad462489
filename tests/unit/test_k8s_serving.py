"""Service replicas on Kubernetes, without a cluster: what a replica's pod adds to a batch pod, the
Service in front of the replicas, the drain patch and what the status pass reports."""

from __future__ import annotations

from typing import Any

import pytest

from crossdock.backends.kubernetes import manifests as m
from crossdock.backends.kubernetes import serving
from crossdock.queue.config import parse_config
from crossdock.queue.models import Job, JobSpec, ServiceReplica

CONFIG = parse_config({
    "priority_classes": {"inference": {"value": 1000, "preemptible": False},
                         "training": {"value": 100, "preemptible": True}},
    "pools": {"l4": {"backend": "k8s", "selector": {"crossdock.io/pool": "l4"}},
              "cpu": {"backend": "k8s", "selector": {"crossdock.io/pool": "cpu"}}},
    "queues": {"inference": {"priority_class": "inference", "pools": ["l4", "cpu"], "placement": "spread",
                             "cpu_request_ratio": 1.0},
               "squeezed": {"priority_class": "inference", "pools": ["l4"], "cpu_request_ratio": 0.5},
               "training": {"priority_class": "training", "pools": ["l4"]}},
})


def replica_job(*, queue: str = "inference", nodes: list[str] | None = None, service: bool = True,
                env: dict[str, str] | None = None) -> Job:
    spec = JobSpec(command=["python", "-m", "server"], cpus_per_task=4, env=env or {},
                   service=ServiceReplica(name="chat", replica=3, port=8080, ready_path="/ready") if service else None)
    return Job(id=77, spec=spec, queue=queue, priority_class=CONFIG.queues[queue].priority_class, attempts=1,
               pools=list(CONFIG.queues[queue].pools), pool="l4", nodes=nodes or [])


def pod_of(job: Job) -> tuple[dict[str, Any], dict[str, Any]]:
    template = m.build(job, CONFIG)["spec"]["template"]
    return template, template["spec"]["containers"][0]


def test_a_replica_pod_carries_its_port_probe_labels_and_class():
    template, container = pod_of(replica_job(nodes=["l4-0"]))
    labels = template["metadata"]["labels"]
    assert labels[serving.LABEL_SERVICE] == "chat" and labels[serving.LABEL_SERVING] == "true"
    assert labels[serving.LABEL_REPLICA] == "3"
    assert container["ports"] == [{"name": "http", "containerPort": 8080, "protocol": "TCP"}]
    assert container["readinessProbe"]["httpGet"] == {"path": "/ready", "port": 8080}
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert (env["PORT"], env["CROSSDOCK_SERVICE"], env["CROSSDOCK_REPLICA"]) == ("8080", "chat", "3")
    assert template["spec"]["priorityClassName"] == "crossdock-inference"
    assert "activeDeadlineSeconds" not in template["spec"]  # a replica has no time limit
    # pinned by crossdock: no spread for kube-scheduler to second-guess
    assert not any(c["labelSelector"]["matchLabels"].get(serving.LABEL_SERVICE)
                   for c in template["spec"].get("topologySpreadConstraints", []))


def test_an_unpinned_replica_spreads_softly_over_its_services_pods():
    template, _ = pod_of(replica_job())
    (soft,) = [c for c in template["spec"]["topologySpreadConstraints"]
               if c["labelSelector"]["matchLabels"].get(serving.LABEL_SERVICE) == "chat"]
    assert (soft["topologyKey"], soft["whenUnsatisfiable"], soft["maxSkew"]) == (
        "kubernetes.io/hostname", "ScheduleAnyway", 1)


@pytest.mark.parametrize(("queue", "request_cpu"), [("inference", "4"), ("squeezed", "2")], ids=["equal", "ratio"])
def test_cpu_requests_follow_the_queues_ratio(queue, request_cpu):
    _, container = pod_of(replica_job(queue=queue))
    assert container["resources"]["limits"]["cpu"] == "4"
    assert container["resources"]["requests"]["cpu"] == request_cpu


def test_a_batch_job_is_left_as_it_was():
    template, container = pod_of(replica_job(queue="training", service=False))
    assert serving.LABEL_SERVICE not in template["metadata"]["labels"]
    assert "readinessProbe" not in container and "ports" not in container


def test_the_service_selects_serving_replicas_only():
    svc = serving.service_manifest("chat", 8080, "ns1")
    assert svc["metadata"]["name"] == "cd-svc-chat" and svc["metadata"]["namespace"] == "ns1"
    assert svc["spec"]["selector"] == {serving.LABEL_SERVICE: "chat", serving.LABEL_SERVING: "true"}
    assert svc["spec"]["ports"] == [{"name": "http", "port": 8080, "targetPort": "http", "protocol": "TCP"}]


def pod(*, ready: bool = True, serving_label: str = "true", since: float | None = None,
        deleting: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"labels": {serving.LABEL_SERVING: serving_label}, "annotations": {}}
    if since is not None:
        meta["annotations"][serving.ANNOTATION_DRAINING] = str(since)
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {"metadata": meta, "spec": {"containers": [{"ports": [{"containerPort": 8080}]}]},
            "status": {"podIP": "10.0.0.7", "phase": "Running",
                       "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}}


@pytest.mark.parametrize(("pods", "want"), [
    ([pod()], {"ready": "true", "host": "10.0.0.7", "port": "8080"}),
    ([pod(ready=False)], {"ready": "false", "host": "10.0.0.7", "port": "8080"}),
    ([pod(serving_label="false", since=98.0)], {"ready": "false", "host": "10.0.0.7", "port": "8080",
                                                 "draining": "true"}),
    ([pod(serving_label="false", since=90.0)], {"ready": "false", "host": "10.0.0.7", "port": "8080",
                                                 "draining": "true", "drained": "true"}),
    ([pod(deleting=True)], {}),
], ids=["ready", "not-ready", "draining", "drained", "deleting"])
def test_replica_status(pods, want):
    assert serving.replica_status(pods, now=100.0, drain_seconds=5) == want


def test_the_drain_patch_takes_the_pod_out_and_stamps_when():
    patch = serving.drain_patch(123.5)
    assert patch["metadata"]["labels"] == {serving.LABEL_SERVING: "false"}
    assert float(patch["metadata"]["annotations"][serving.ANNOTATION_DRAINING]) == 123.5



def test_an_image_only_replica_is_admitted_and_runs_the_images_entrypoint():
    from datetime import datetime, timezone

    from crossdock.queue.admission import admit
    from crossdock.queue.errors import InvalidJob
    from crossdock.queue.services.replicas import replica_spec
    from crossdock.queue.serving import ServiceSpec

    spec = replica_spec(ServiceSpec(name="chat", image="registry.local/chat:1", queue="inference"),
                        ServiceReplica(name="chat", replica=0))
    (job,) = admit(spec, CONFIG, [], datetime.now(timezone.utc))
    job = job.model_copy(update={"id": 5, "attempts": 1, "pool": "l4"})
    _, container = pod_of(job)
    assert container["image"] == "registry.local/chat:1" and "command" not in container
    with pytest.raises(InvalidJob, match="nothing to run"):  # a batch job still needs something to run
        admit(JobSpec(image="registry.local/chat:1", queue="inference"), CONFIG, [], datetime.now(timezone.utc))
