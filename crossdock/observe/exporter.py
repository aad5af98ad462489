"""The metrics endpoint every long-running crossdock process serves (``GET /metrics``).

Where: the config's ``metrics: {address, port}`` (default ``127.0.0.1:9640``), or
``CROSSDOCK_METRICS_ADDRESS`` (``host:port``, ``port``, or ``0`` to disable), which wins.

Several processes on one host each need a port: a process takes the first free port from its
base (``port + offset``) among :data:`PORT_SPAN`. ``crossdock up`` serves on the base port
itself (offset 0: it starts first), the Celery workers search from the next one (offset 1): so
one ``up`` with its worker and two fleet replicas serves 9640, 9641, 9642, 9643; the router
(``workers/routes.py``) searches from ``ROUTER_PORT_OFFSET`` (16: 9656). Each process
also writes its address to ``<state dir>/metrics/targets/<role>-<pid>.json``, a Prometheus
file-based discovery file (``file_sd_configs``), removed when it stops.

A Celery worker is several processes (prefork): its tasks record in the pool's children, so the
worker runs prometheus-client's multiprocess mode (:func:`prepare_multiprocess`, before
prometheus-client is imported) and its main process serves what every child wrote.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

log = logging.getLogger(__name__)

ENV = "CROSSDOCK_METRICS_ADDRESS"
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
PORT_SPAN = 32
ROUTER_PORT_OFFSET = 16
"""The router's metrics search from here: past the ports of ``up``, its worker and its fleets."""
"""Ports tried from a process's base before it serves nothing (and says so)."""


class BadAddress(ValueError):
    """CROSSDOCK_METRICS_ADDRESS that is not ``host:port``, ``port`` or ``0``."""


@dataclass(frozen=True)
class Address:
    host: str
    port: int


def parse(text: str) -> Address | None:
    """``host:port``, ``[v6]:port`` or ``port``; None for ``0``/``off`` (disabled)."""
    value = text.strip()
    if value.lower() in ("0", "off", "none", "false"):
        return None
    host, sep, port = value.rpartition(":")
    if not sep:
        host, port = "127.0.0.1", value
    host = host.strip("[]") or "127.0.0.1"
    if not port.isdigit() or not 0 <= int(port) <= 65535:
        raise BadAddress(f"{ENV}={text!r}: not host:port, a port or 0; e.g. 127.0.0.1:9640 (0 disables the exporter)")
    return None if int(port) == 0 else Address(host, int(port))


def resolve(metrics: Any, environ: Mapping[str, str] = os.environ) -> Address | None:
    """The base address from the environment, else from the config's ``metrics`` block; None: disabled."""
    named = environ.get(ENV, "")
    if named.strip():
        return parse(named)
    if metrics is None or not metrics.port:
        return None
    return Address(metrics.address, metrics.port)


# --- multiprocess (Celery's prefork workers) ----------------------------------------------------
def prepare_multiprocess(state_dir: Path) -> Path | None:
    """Point prometheus-client at a directory of this process (and its forked children): call it
    before prometheus-client is first imported. Directories of workers that are gone are removed.
    None when it is too late (imported already) or the directory cannot be made."""
    import sys

    if "prometheus_client" in sys.modules and MULTIPROC_ENV not in os.environ:
        log.warning("metrics: prometheus_client imported before the multiprocess setup; the pool's metrics are lost")
        return None
    base = state_dir / "metrics" / "proc"
    try:
        base.mkdir(parents=True, exist_ok=True, mode=0o700)
        for old in base.iterdir():
            if old.name.isdigit() and not _alive(int(old.name)):
                shutil.rmtree(old, ignore_errors=True)
        mine = base / str(os.getpid())
        shutil.rmtree(mine, ignore_errors=True)  # a reused pid's leftovers would be summed in
        mine.mkdir(mode=0o700)
    except OSError as exc:
        log.warning("metrics: cannot prepare %s: %s", base, exc)
        return None
    os.environ[MULTIPROC_ENV] = str(mine)
    return mine


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def multiprocess_registry() -> Any:
    from prometheus_client import CollectorRegistry
    from prometheus_client.multiprocess import MultiProcessCollector

    registry = CollectorRegistry()
    MultiProcessCollector(registry, path=os.environ[MULTIPROC_ENV])
    return registry


def child_exited(pid: int) -> None:
    """A pool child is gone: its live gauges no longer count."""
    if os.environ.get(MULTIPROC_ENV):
        from prometheus_client.multiprocess import mark_process_dead

        mark_process_dead(pid)


# --- serving ------------------------------------------------------------------------------------
class Exporter:
    """One process's endpoint: ``url``, ``stop()``; :meth:`report` for ``crossdock health``."""

    def __init__(self, server: Any, thread: Any, address: Address, target_file: Path | None):
        self.server, self.thread, self.address, self.target_file = server, thread, address, target_file

    @property
    def url(self) -> str:
        host = f"[{self.address.host}]" if ":" in self.address.host else self.address.host
        return f"http://{host}:{self.address.port}/metrics"

    def alive(self) -> bool:
        return self.thread.is_alive()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        if self.target_file is not None:
            self.target_file.unlink(missing_ok=True)


def serve(base: Address, role: str, offset: int = 0, state_dir: Path | None = None,
          registry: Any = None) -> Exporter | None:
    """Serve ``registry`` (default: this process's) on the first free port from ``base.port +
    offset``; None, with a warning, when none of :data:`PORT_SPAN` is free."""
    from prometheus_client import REGISTRY, start_http_server

    first = base.port + offset
    for port in range(first, min(first + PORT_SPAN, 65536)):
        try:
            server, thread = start_http_server(port, base.host, registry or REGISTRY)
        except OSError as exc:
            if exc.errno in (errno.EADDRINUSE, errno.EACCES):
                continue
            raise
        address = Address(base.host, port)
        target = write_target(state_dir, role, address) if state_dir is not None else None
        if port != first:
            log.info("metrics: port %s is taken; %s serves on %s", first, role, port)
        log.info("metrics: %s serves http://%s:%s/metrics", role, base.host, port)
        return Exporter(server, thread, address, target)
    log.warning("metrics: ports %s-%s on %s are all taken; %s serves no metrics (set %s)", first,
                first + PORT_SPAN - 1, base.host, role, ENV)
    return None


def write_target(state_dir: Path, role: str, address: Address) -> Path | None:
    """``<state dir>/metrics/targets/<role>-<pid>.json``: where this process serves, for Prometheus."""
    folder = state_dir / "metrics" / "targets"
    path = folder / f"{role}-{os.getpid()}.json"
    host = f"[{address.host}]" if ":" in address.host else address.host
    try:
        folder.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps([{"targets": [f"{host}:{address.port}"], "labels": {"role": role}}]))
        os.replace(tmp, path)
    except OSError as exc:
        log.warning("metrics: cannot write %s: %s", path, exc)
        return None
    return path


class MetricsPart:
    """The exporter as a part of ``crossdock up`` (``supervision.Part``): started with the
    service, restarted if its thread ends, its URL in ``up.json``."""

    name = "metrics"

    def __init__(self, base: Address, state_dir: Path, role: str = "up", offset: int = 0):
        self.base, self.state_dir, self.role, self.offset = base, state_dir, role, offset
        self.exporter: Exporter | None = None

    def start(self) -> None:
        from crossdock import observe

        observe.enable()
        self.exporter = serve(self.base, self.role, self.offset, self.state_dir)

    def alive(self) -> bool:
        return self.exporter is None or self.exporter.alive()

    def report(self) -> dict[str, Any]:
        return {"url": self.exporter.url if self.exporter else None, "alive": self.alive()}

    def stop(self) -> None:
        if self.exporter is not None:
            self.exporter.stop()
            self.exporter = None
