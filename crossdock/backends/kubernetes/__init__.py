"""Kubernetes backend: node pools as label selectors, crossdock jobs as ``batch/v1`` Jobs.

``from_config(config, store)`` connects with, in order: ``CROSSDOCK_KUBECONFIG``,
``KUBECONFIG``, the in-cluster service account, ``~/.kube/config``. Other settings:
``CROSSDOCK_K8S_NAMESPACE`` (default ``default``), ``CROSSDOCK_K8S_IMAGE`` (the container image
when a job names none), ``CROSSDOCK_K8S_TTL_SECONDS`` (``ttlSecondsAfterFinished``, default
3600), ``CROSSDOCK_K8S_DEADLINE_SLACK_SECONDS`` (the Job-level deadline beyond the time limit,
default 300: it also counts time spent Pending, so it is only a backstop for the pod-level one),
``CROSSDOCK_K8S_SYNC_PRIORITY_CLASSES`` (``0`` to leave PriorityClasses alone).
"""

from __future__ import annotations

import os
from typing import Any

from crossdock.backends.kubernetes.backend import KubernetesBackend, Orphan, api_error
from crossdock.backends.kubernetes.informer import Informer
from crossdock.backends.kubernetes.states import K8S_STATES, translate_job, translate_pod
from crossdock.queue.config import ClusterConfig

__all__ = ["K8S_STATES", "Informer", "KubernetesBackend", "Orphan", "api_client", "api_error", "from_config",
           "translate_job", "translate_pod"]


def api_client(kubeconfig: str | None = None) -> Any:
    """A ``kubernetes.client.ApiClient`` from a kubeconfig path, the environment or the pod's service account."""
    from kubernetes import config

    path = kubeconfig or os.environ.get("CROSSDOCK_KUBECONFIG") or os.environ.get("KUBECONFIG")
    if path:
        return config.new_client_from_config(config_file=path.split(os.pathsep)[0])
    if os.environ.get("KUBERNETES_SERVICE_HOST"):
        config.load_incluster_config()
        from kubernetes import client

        return client.ApiClient()
    return config.new_client_from_config()


def from_config(config: ClusterConfig, store: Any = None, **overrides: Any) -> KubernetesBackend:
    """The backend for ``config``'s k8s pools, with PriorityClasses synced from its classes."""
    env = os.environ
    kwargs: dict[str, Any] = {
        "namespace": env.get("CROSSDOCK_K8S_NAMESPACE", "default"),
        "image": env.get("CROSSDOCK_K8S_IMAGE", "python:3.11-slim"),
        "ttl_seconds_after_finished": int(env.get("CROSSDOCK_K8S_TTL_SECONDS", "3600")),
        "deadline_slack_seconds": int(env.get("CROSSDOCK_K8S_DEADLINE_SLACK_SECONDS", "300")),
    }
    kwargs.update(overrides)
    backend = KubernetesBackend(config, api_client(kwargs.pop("kubeconfig", None)), store=store, **kwargs)
    if env.get("CROSSDOCK_K8S_SYNC_PRIORITY_CLASSES", "1") != "0":
        backend.sync_priority_classes()
    return backend
