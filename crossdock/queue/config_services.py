"""The ``services:`` section of the admin config (``crossdock.queue.config`` holds it): the
controller's pace, where traffic comes from, the local router, services declared to deploy."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from crossdock.queue.config_base import _Cfg
from crossdock.queue.serving import ServiceSpec


class ServiceMetricsSource(_Cfg):
    """Where services' traffic comes from: crossdock's router (its samples in the store) or a
    Prometheus server's HTTP API (``url``, with PromQL for one service's QPS and p95 in seconds;
    ``{service}`` in a query is the service's name)."""

    source: Literal["router", "prometheus"] = "router"
    url: str | None = Field(None, min_length=1)
    qps_query: str | None = Field(None, min_length=1)
    p95_query: str | None = Field(None, min_length=1)
    in_flight_query: str | None = Field(None, min_length=1)
    """Prometheus: requests in flight, ``by (replica)``."""
    cpu_query: str | None = Field(None, min_length=1)
    """Prometheus: CPU cores used, ``by (replica)`` (the throttling check)."""
    window_seconds: float = Field(30, gt=0, le=3600)
    """Prometheus: the range the queries' ``rate()`` covers, reported with each sample."""

    @model_validator(mode="after")
    def _needs_url(self) -> "ServiceMetricsSource":
        if self.source == "prometheus" and not self.url:
            raise ValueError("url: a prometheus source needs the server's URL, e.g. http://127.0.0.1:9090")
        return self


class ServiceRouter(_Cfg):
    """crossdock's router in front of the replicas of services on local pools
    (``crossdock/workers/router.py``, run by ``crossdock up``)."""

    probe_seconds: float = Field(0.5, ge=0.05, le=60)
    """How often each replica's readiness path is probed."""
    window_seconds: float = Field(10, ge=1, le=600)
    """The sliding window its QPS and p95 are over."""
    wait_seconds: float = Field(5, ge=0, le=300)
    """How long a request waits for a ready replica when none is, before a 503."""
    metrics_port: int = Field(0, ge=0, le=65535)
    """Its Prometheus ``/metrics`` on 127.0.0.1 (0: the first free port from the exporters' base plus
    16, or any free port when they are off; listed in Prometheus' file-discovery targets and
    shown by ``crossdock health``)."""


class Services(_Cfg):
    """Inference services: the controller's pace, the traffic source, and services to deploy."""

    interval_seconds: float = Field(2.0, ge=0.1, le=3600)
    """How often the leader's controller step looks at every service."""
    metrics: ServiceMetricsSource = Field(default_factory=ServiceMetricsSource)
    router: ServiceRouter = Field(default_factory=ServiceRouter)
    deploy: dict[str, dict[str, Any]] = Field(default_factory=dict)
    """Name → a service spec (``crossdock serve``'s fields: command, image, port, ready_path,
    min_replicas, max_replicas, target_qps, p95_ms, cpus, mem_mib, gpus, queue, pools …),
    deployed (created or updated) by the leader; owned by ``user`` (default: admins only)."""

    def declared(self) -> list[ServiceSpec]:
        return [ServiceSpec.model_validate({**entry, "name": name}) for name, entry in self.deploy.items()]
