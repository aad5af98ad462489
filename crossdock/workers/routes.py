"""The router's view of the store (:class:`crossdock.workers.router.RouteSource`): which services
it fronts and where their replicas listen.

It fronts a service whose replicas may run on a local pool (the service's ``pools``, else its
queue's); the others are reached through their backend's own address (a Kubernetes Service).
A service keeps the port it had (``address`` in its record), so clients' URLs survive a restart
of ``crossdock up``.
"""

from __future__ import annotations

from crossdock.backends.redis_store.services import ServiceStore
from crossdock.queue.config import ClusterConfig
from crossdock.queue.serving import Endpoint, ServiceMetrics, ServiceRecord
from crossdock.workers.router import RouterPart, RouterSettings, RouteSpec


def local_pools(cfg: ClusterConfig) -> frozenset[str]:
    return frozenset(name for name, pool in cfg.pools.items() if pool.backend == "local")


def fronted(record: ServiceRecord, cfg: ClusterConfig) -> bool:
    """Whether the router fronts this service: one of its pools is local."""
    spec = record.spec
    queue = cfg.queue_name(spec.queue)
    pools = spec.pools if spec.pools is not None else cfg.pools_of(queue) if queue in cfg.queues else []
    return bool(local_pools(cfg) & set(pools))


def address_port(address: str | None) -> int:
    try:
        return int((address or "").rsplit(":", 1)[1])
    except (IndexError, ValueError):
        return 0


class StoreRoutes:
    def __init__(self, services: ServiceStore, cfg: ClusterConfig):
        self.services, self.cfg = services, cfg

    def routes(self) -> dict[str, RouteSpec]:
        return {r.spec.name: RouteSpec(r.spec.ready_path, address_port(r.address))
                for r in self.services.list() if fronted(r, self.cfg)}

    def endpoints(self, service: str) -> list[Endpoint]:
        return self.services.endpoints(service)

    def set_ready(self, job_id: int, attempt: int, ready: bool) -> None:
        self.services.set_ready(job_id, attempt, ready)

    def set_drained(self, job_id: int) -> None:
        self.services.set_drained(job_id)

    def set_route(self, service: str, host: str, port: int) -> None:
        self.services.set_address(service, f"{host}:{port}")

    def put_metrics(self, service: str, sample: ServiceMetrics) -> None:
        self.services.put_metrics(service, sample)


def router_part(rt) -> list[RouterPart]:
    """The router as a part of ``crossdock up`` (``rt``: its Runtime), where a pool is local; it
    opens a listener only for services that exist, so without any it reads the store and waits."""
    cfg = rt.config
    if not local_pools(cfg):
        return []
    return [RouterPart(StoreRoutes(rt.store.services, cfg), router_settings(cfg))]


def router_settings(cfg: ClusterConfig) -> RouterSettings:
    """From ``services.router``; samples are published at least twice per controller pass."""
    r = cfg.services.router
    return RouterSettings(probe_seconds=r.probe_seconds, window_seconds=r.window_seconds, wait_seconds=r.wait_seconds,
                          metrics_port=r.metrics_port,
                          publish_seconds=min(1.0, cfg.services.interval_seconds / 2),
                          refresh_seconds=min(0.5, cfg.services.interval_seconds / 2))
