"""The router as ``crossdock up`` runs it: a process of its own (:class:`RouterProcess`,
``python -m crossdock.workers.routes``) over the store (:class:`StoreRoutes`, the
:class:`crossdock.workers.router.RouteSource`): which services it fronts and where their
replicas listen.

It fronts a service whose replicas may run on a pool whose backend is ``routed`` (the local one:
the service's ``pools``, else its queue's); the others are reached through their backend's own
address (a Kubernetes Service).
A service keeps the port it had (``address`` in its record), so clients' URLs survive a restart
of ``crossdock up``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any, Mapping

from crossdock.backends.redis_store.services import ServiceStore
from crossdock.backends.registry import capabilities
from crossdock.observe import exporter
from crossdock.queue.config import ClusterConfig
from crossdock.queue.serving import Endpoint, ServiceMetrics, ServiceRecord
from crossdock.workers.router import Router, RouterSettings, RouteSpec

log = logging.getLogger(__name__)


def routed_pools(cfg: ClusterConfig) -> frozenset[str]:
    """The pools whose backend's replicas are reached through the router (``Capabilities.routed``)."""
    return frozenset(name for name, pool in cfg.pools.items() if capabilities(pool.backend).routed)


def fronted(record: ServiceRecord, cfg: ClusterConfig) -> bool:
    """Whether the router fronts this service: one of its pools is routed."""
    spec = record.spec
    queue = cfg.queue_name(spec.queue)
    pools = spec.pools if spec.pools is not None else cfg.pools_of(queue) if queue in cfg.queues else []
    return bool(routed_pools(cfg) & set(pools))


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


def router_part(rt) -> list["RouterProcess"]:
    """The router as a part of ``crossdock up`` (``rt``: its Runtime), where a pool is local; it
    opens a listener only for services that exist, so without any it reads the store and waits."""
    if not routed_pools(rt.config):
        return []
    return [RouterProcess(rt)]


class RouterProcess:
    """The router in a process of its own (``python -m crossdock.workers.routes``), so that its
    requests and the scheduling loop do not share one interpreter lock. It stops when ``up``
    does (SIGTERM: requests under way get ``STOP_SECONDS`` to finish, then SIGKILL; ``up`` must
    stop within seconds) or, should ``up`` die, by itself; it writes what ``report`` shows to
    ``state_dir/router.json`` every second."""

    name = "router"
    STOP_SECONDS = 2.0

    def __init__(self, rt):
        self.rt = rt
        self.proc: subprocess.Popen | None = None
        self.report_path = Path(rt.settings.state_dir) / "router.json"

    def start(self) -> None:
        log_dir = Path(self.rt.settings.state_dir) / "log"
        log_dir.mkdir(parents=True, exist_ok=True)
        self.report_path.unlink(missing_ok=True)
        env = {**self.rt.child_env(), PARENT_ENV: str(os.getpid())}
        with open(log_dir / "router.log", "ab") as out:
            self.proc = subprocess.Popen([sys.executable, "-m", "crossdock.workers.routes"], env=env, stdout=out,
                                         stderr=out, stdin=subprocess.DEVNULL, start_new_session=True)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def report(self) -> dict[str, Any]:
        try:
            data = json.loads(self.report_path.read_text())
        except (OSError, ValueError):
            data = {}
        return {"alive": self.alive(), "pid": self.proc.pid if self.proc else None,
                "services": data.get("services", {}), "metrics_port": data.get("metrics_port"),
                "errors": data.get("errors", {})}

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(self.STOP_SECONDS)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


PARENT_ENV = "CROSSDOCK_ROUTER_PARENT"
"""The pid of the ``up`` that started the router process: it stops when that one is gone."""


async def _watch(router: Router, state_dir: Path, parent: int | None, target: list[Path]) -> None:
    report = state_dir / "router.json"
    while True:
        await asyncio.sleep(1.0)
        if parent is not None and os.getppid() != parent:
            log.warning("router: crossdock up (pid %s) is gone; stopping", parent)
            router.stop()
            return
        if router.metrics_port and not target:  # listening: Prometheus' file discovery finds it
            found = exporter.write_target(state_dir, "router", exporter.Address(router.settings.host,
                                                                                router.metrics_port))
            target.extend([found] if found else [])
        data = {"services": router.ports(), "metrics_port": router.metrics_port, "errors": router.errors}
        tmp = report.with_suffix(".tmp")
        tmp.write_text(json.dumps(data))
        os.replace(tmp, report)


async def _serve(rt) -> None:
    router = Router(StoreRoutes(rt.store.services, rt.config), router_settings(rt.config))
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, router.stop)
    parent = os.environ.get(PARENT_ENV)
    target: list[Path] = []
    watcher = asyncio.create_task(_watch(router, Path(rt.settings.state_dir), int(parent) if parent else None,
                                         target))
    try:
        await router.serve()
    finally:
        watcher.cancel()
        for path in target:
            path.unlink(missing_ok=True)


def main() -> int:
    from crossdock.runtime import Runtime

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    asyncio.run(_serve(Runtime.from_env()))
    return 0



def router_settings(cfg: ClusterConfig, environ: Mapping[str, str] = os.environ) -> RouterSettings:
    """From ``services.router``; samples are published at least twice per controller pass. Its
    metrics port 0 is the first free one from the exporters' base (``metrics``, or
    CROSSDOCK_METRICS_ADDRESS) plus ``ROUTER_PORT_OFFSET``, or any free port when they are off."""
    r = cfg.services.router
    port, span = r.metrics_port, 1
    if not port:
        try:
            base = exporter.resolve(cfg.metrics, environ)
        except exporter.BadAddress:  # `up` refuses it before it starts the router
            base = None
        if base is not None:
            port, span = base.port + exporter.ROUTER_PORT_OFFSET, exporter.PORT_SPAN
    return RouterSettings(probe_seconds=r.probe_seconds, window_seconds=r.window_seconds, wait_seconds=r.wait_seconds,
                          metrics_port=port, metrics_port_span=span,
                          publish_seconds=min(1.0, cfg.services.interval_seconds / 2),
                          refresh_seconds=min(0.5, cfg.services.interval_seconds / 2))


if __name__ == "__main__":
    sys.exit(main())
