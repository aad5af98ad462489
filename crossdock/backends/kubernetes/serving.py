"""Service replicas on Kubernetes: what a replica's pod adds to a batch pod, the ``Service`` in
front of them, and how a replica drains. Pure: no I/O.

A replica is an ordinary crossdock Job (``JobSpec.service`` set), so its pod is built by
``manifests.build`` and this module adds:

* a container port and a ``readinessProbe`` (``httpGet`` on the replica's port and path);
* labels ``crossdock.io/service=<name>`` and ``crossdock.io/serving=true``: the Service selects
  both, so a pod whose ``serving`` label turns ``false`` leaves its endpoints at once;
* ``PORT``, ``CROSSDOCK_SERVICE`` and ``CROSSDOCK_REPLICA`` in its environment (as on the local
  backend);
* where crossdock did not pin the node, a soft topology spread on hostname over the service's
  pods (one per node where possible: ``ScheduleAnyway``).

Drain: ``drain_patch`` turns ``serving`` to ``false`` and stamps when; once ``drain_seconds``
have passed (the endpoints' consumers have dropped the pod and its in-flight requests are done)
the status pass reports the replica drained and the service controller stops it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from crossdock.queue.models import Job

LABEL_SERVICE = "crossdock.io/service"
LABEL_SERVING = "crossdock.io/serving"
LABEL_REPLICA = "crossdock.io/replica"
ANNOTATION_DRAINING = "crossdock.io/draining-since"
"""Unix time at which the replica left its Service (set with ``serving=false``)."""
PORT_NAME = "http"
READINESS = {"periodSeconds": 2, "timeoutSeconds": 1, "failureThreshold": 2, "successThreshold": 1}


def service_object_name(service: str) -> str:
    """The Kubernetes Service of a crossdock service: ``cd-svc-<name>`` (a DNS label)."""
    label = re.sub(r"[^a-z0-9-]+", "-", service.lower()).strip("-")[:56] or "x"
    return f"cd-svc-{label}".rstrip("-")


def label_value(service: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", service)[:63].strip("-_.")


def selector(service: str) -> dict[str, str]:
    """The pods that receive the service's traffic: its replicas that are not draining."""
    return {LABEL_SERVICE: label_value(service), LABEL_SERVING: "true"}


def decorate(job: Job, labels: dict[str, str], container: dict[str, Any], pod_spec: dict[str, Any]) -> None:
    """Add to a replica's pod what a service needs (see the module docstring); jobs without
    ``spec.service`` are left as they are."""
    replica = job.spec.service
    if replica is None:
        return
    labels.update({LABEL_SERVICE: label_value(replica.name), LABEL_SERVING: "true",
                   LABEL_REPLICA: str(replica.replica)})
    container["ports"] = [{"name": PORT_NAME, "containerPort": replica.port, "protocol": "TCP"}]
    container["readinessProbe"] = {"httpGet": {"path": replica.ready_path, "port": replica.port},
                                   **READINESS}
    names = {e["name"] for e in container.get("env", [])}
    container.setdefault("env", []).extend(
        {"name": k, "value": v} for k, v in (("PORT", str(replica.port)), ("CROSSDOCK_SERVICE", replica.name),
                                             ("CROSSDOCK_REPLICA", str(replica.replica))) if k not in names)
    if not job.nodes:
        pod_spec.setdefault("topologySpreadConstraints", []).append(
            {"maxSkew": 1, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "ScheduleAnyway",
             "labelSelector": {"matchLabels": {LABEL_SERVICE: label_value(replica.name)}}})


def service_manifest(name: str, port: int, namespace: str) -> dict[str, Any]:
    """The ``v1`` Service in front of a crossdock service's serving replicas."""
    return {
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": service_object_name(name), "namespace": namespace,
                     "labels": {"app.kubernetes.io/managed-by": "crossdock", LABEL_SERVICE: label_value(name)},
                     "annotations": {"crossdock.io/name": name}},
        "spec": {"type": "ClusterIP", "selector": selector(name),
                 "ports": [{"name": PORT_NAME, "port": port, "targetPort": PORT_NAME, "protocol": "TCP"}]},
    }


def drain_patch(now: float) -> dict[str, Any]:
    """The patch that takes a replica's pod out of its Service (its labels and annotations merge)."""
    return {"metadata": {"labels": {LABEL_SERVING: "false"}, "annotations": {ANNOTATION_DRAINING: f"{now:.3f}"}}}


def _ready(pod: Mapping[str, Any]) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (pod.get("status") or {}).get("conditions") or [])


def replica_status(pods: list[Mapping[str, Any]], now: float, drain_seconds: float) -> dict[str, str]:
    """What the status pass tells about a replica's pod, as ``BackendStatus.extra`` entries:
    ``ready`` (the pod's Ready condition while it serves), ``host`` and ``port`` (its address),
    ``draining`` and ``drained`` (``drain_seconds`` after it left the Service)."""
    live = [p for p in pods if not (p.get("metadata") or {}).get("deletionTimestamp")]
    if not live:
        return {}
    pod = live[0]
    meta, status = pod.get("metadata") or {}, pod.get("status") or {}
    labels, annotations = meta.get("labels") or {}, meta.get("annotations") or {}
    draining = labels.get(LABEL_SERVING) == "false"
    out = {"ready": "true" if _ready(pod) and not draining else "false"}
    if status.get("podIP"):
        out["host"] = str(status["podIP"])
    ports = [p for c in (pod.get("spec") or {}).get("containers") or [] for p in c.get("ports") or []]
    if ports:
        out["port"] = str(ports[0]["containerPort"])
    if draining:
        out["draining"] = "true"
        try:
            since = float(annotations.get(ANNOTATION_DRAINING, "0"))
        except ValueError:
            since = 0.0
        if now - since >= drain_seconds:
            out["drained"] = "true"
    return out
