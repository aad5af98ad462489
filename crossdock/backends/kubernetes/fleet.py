"""Worker fleets on Kubernetes: a Deployment's replicas, through its ``/scale`` subresource.

``replicas`` reads ``GET …/deployments/{name}/scale``; ``scale`` patches it, as the HPA does.
Before a scale-in the fleet's pods get ``controller.kubernetes.io/pod-deletion-cost`` (the
ReplicaSet controller removes lower costs first, after unscheduled, pending and unready pods):
``BUSY_COST`` on the pods that run a task, ``0`` on the others, each patched only when it
changes (the annotation is a hint for the next scale-in, not a metric to update continuously).
A scale-in never goes below the number of busy pods, so that the ReplicaSet has enough idle
pods to remove; it answers the replicas it set.

Which pods are busy is the caller's to say (``busy``: pod names). crossdock's autoscaler asks the
fleet's Celery workers through Celery's remote control: a worker in a pod is ``celery@<pod
name>`` (a pod's hostname is its name), and one with an active or reserved task is busy.
"""

from __future__ import annotations

from typing import Any, Collection

from kubernetes import client

DELETION_COST = "controller.kubernetes.io/pod-deletion-cost"
BUSY_COST = "1000"
IDLE_COST = "0"


class DeploymentFleets:
    def __init__(self, api_client: client.ApiClient, errors: Any):
        self.apps = client.AppsV1Api(api_client)
        self.core = client.CoreV1Api(api_client)
        self.errors = errors
        """``api_error(exc, what)``: the backend's mapping of API failures to crossdock's errors."""

    def replicas(self, fleet: Any) -> int:
        try:
            scale = self.apps.read_namespaced_deployment_scale(fleet.name, fleet.namespace)
        except Exception as exc:  # noqa: BLE001 - mapped to crossdock's errors
            raise self.errors(exc, f"reading the scale of deployment {fleet.namespace}/{fleet.name}") from exc
        return scale.spec.replicas or 0

    def pods(self, fleet: Any) -> list[Any]:
        """The Deployment's pods that are not being deleted."""
        try:
            dep = self.apps.read_namespaced_deployment(fleet.name, fleet.namespace)
            labels = dep.spec.selector.match_labels or {}
            selector = ",".join(f"{k}={v}" for k, v in sorted(labels.items()))
            pods = self.core.list_namespaced_pod(fleet.namespace, label_selector=selector).items
        except Exception as exc:  # noqa: BLE001
            raise self.errors(exc, f"listing the pods of deployment {fleet.namespace}/{fleet.name}") from exc
        return [p for p in pods if p.metadata.deletion_timestamp is None]

    def scale(self, fleet: Any, replicas: int, busy: Collection[str] = frozenset()) -> int:
        current = self.replicas(fleet)
        if replicas < current:
            pods = self.pods(fleet)
            busy_pods = {p.metadata.name for p in pods if p.metadata.name in busy}
            replicas = max(replicas, len(busy_pods))
            for pod in pods:
                cost = BUSY_COST if pod.metadata.name in busy_pods else IDLE_COST
                if (pod.metadata.annotations or {}).get(DELETION_COST, IDLE_COST) != cost:
                    self._annotate(fleet, pod.metadata.name, cost)
        if replicas != current:
            try:
                self.apps.patch_namespaced_deployment_scale(fleet.name, fleet.namespace, {"spec": {"replicas": replicas}})
            except Exception as exc:  # noqa: BLE001
                raise self.errors(exc, f"scaling deployment {fleet.namespace}/{fleet.name} to {replicas}") from exc
        return replicas

    def _annotate(self, fleet: Any, pod: str, cost: str) -> None:
        try:
            self.core.patch_namespaced_pod(pod, fleet.namespace, {"metadata": {"annotations": {DELETION_COST: cost}}})
        except client.ApiException as exc:
            if exc.status != 404:  # gone meanwhile: nothing to rank
                raise self.errors(exc, f"annotating pod {fleet.namespace}/{pod}") from exc
