"""Kubernetes backend: node pools as label selectors, crossdock jobs as ``batch/v1`` Jobs.

``from_config(config, store)`` connects with, in order: ``CROSSDOCK_KUBECONFIG``,
``KUBECONFIG``, the in-cluster service account, ``~/.kube/config``. Other settings:
``CROSSDOCK_K8S_NAMESPACE`` (default ``default``), ``CROSSDOCK_K8S_IMAGE`` (the container image
when a job names none), ``CROSSDOCK_K8S_TTL_SECONDS`` (``ttlSecondsAfterFinished``, default
3600), ``CROSSDOCK_K8S_DEADLINE_SLACK_SECONDS`` (the Job-level deadline beyond the time limit,
default 300: it also counts time spent Pending, so it is only a backstop for the pod-level one),
``CROSSDOCK_K8S_SYNC_PRIORITY_CLASSES`` (``0`` to leave PriorityClasses alone),
``CROSSDOCK_KARPENTER_NODE_CLASS`` (``group/Kind/name`` of the node class that ``provisioner:
karpenter`` pools launch from; default: a KWOKNodeClass per pool), ``CROSSDOCK_K8S_DRAIN_SECONDS``
(how long a service replica that left its Service stays up before it is stopped, default 5).
"""

from __future__ import annotations

import os
from typing import Any, ClassVar, Mapping

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from crossdock.backends.kubernetes.backend import KubernetesBackend, api_error
from crossdock.backends.kubernetes.informer import Informer
from crossdock.backends.kubernetes.states import K8S_STATES, translate_job, translate_pod
from crossdock.queue.config import ClusterConfig
from crossdock.queue.ports import Orphan, StopRequests, settings_error

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


CAPABILITIES = KubernetesBackend.capabilities


class KubernetesSettings(BaseModel):
    """The Kubernetes backend's settings, from the environment (see the module docstring)."""

    model_config = ConfigDict(extra="forbid")
    kubeconfig: str | None = None
    namespace: str = Field("default", min_length=1, max_length=63)
    image: str = Field("python:3.11-slim", min_length=1)
    ttl_seconds_after_finished: int | None = Field(3600, ge=0)
    deadline_slack_seconds: int = Field(300, ge=0)
    sync_priority_classes: bool = True
    karpenter_node_class: str | None = Field(None, pattern=r"^[^/\s]+/[^/\s]+/[^/\s]+$")
    drain_seconds: float = Field(5.0, ge=0)

    ENV: ClassVar[dict[str, str]] = {
        "namespace": "CROSSDOCK_K8S_NAMESPACE", "image": "CROSSDOCK_K8S_IMAGE",
        "ttl_seconds_after_finished": "CROSSDOCK_K8S_TTL_SECONDS",
        "deadline_slack_seconds": "CROSSDOCK_K8S_DEADLINE_SLACK_SECONDS",
        "sync_priority_classes": "CROSSDOCK_K8S_SYNC_PRIORITY_CLASSES",
        "karpenter_node_class": "CROSSDOCK_KARPENTER_NODE_CLASS",
        "drain_seconds": "CROSSDOCK_K8S_DRAIN_SECONDS",
    }

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> "KubernetesSettings":
        values: dict[str, Any] = {f: env[var] for f, var in cls.ENV.items() if var in env}
        kubeconfig = env.get("CROSSDOCK_KUBECONFIG") or env.get("KUBECONFIG")
        if kubeconfig:
            values["kubeconfig"] = kubeconfig
        try:
            return cls.model_validate(values)
        except ValidationError as exc:
            raise settings_error(exc, cls.ENV) from None


def from_config(config: ClusterConfig, store: StopRequests | None = None, environ: Mapping[str, str] | None = None,
                **overrides: Any) -> KubernetesBackend:
    """The backend for ``config``'s k8s pools, with PriorityClasses synced from its classes."""
    settings = KubernetesSettings.from_env(os.environ if environ is None else environ)
    kwargs: dict[str, Any] = settings.model_dump(exclude={"kubeconfig", "sync_priority_classes"})
    kwargs.update(overrides)
    backend = KubernetesBackend(config, api_client(kwargs.pop("kubeconfig", settings.kubeconfig)), store=store,
                                **kwargs)
    if settings.sync_priority_classes:
        backend.sync_priority_classes()
    return backend


def create(ctx: Any) -> KubernetesBackend:
    return from_config(ctx.config, ctx.store, ctx.environ, installation=ctx.store.installation)
