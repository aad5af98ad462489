"""The plane as a whole: ``up`` (certificates, flags, start in order, fake nodes, wait),
``down``, ``status``, ``restart_component`` and shared ``session``s."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import signal
import ssl
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from crossdock.dev.k8s import components, karpenter
from crossdock.dev.k8s.api import Api, etcd_healthy, nodes_ready, wait
from crossdock.dev.k8s.build import COMPONENTS, bin_dir, missing_binaries, stages_dir, versions
from crossdock.dev.k8s.errors import ControlPlaneError, MissingBinariesError
from crossdock.dev.k8s.nodes import DEFAULT_POOLS, NodePool
from crossdock.dev.k8s.pki import ensure_pki, write_kubeconfig
from crossdock.dev.k8s.processes import Launcher, pid_alive, stop_pid, stop_processes, unrecorded
from crossdock.dev.k8s.state import kubeconfig_path, locked, read_state, state_dir_of, write_state
from crossdock.dev.proc import free_port


@dataclasses.dataclass(frozen=True)
class ControlPlaneStatus:
    state_dir: Path
    kubeconfig: Path
    server: str | None
    version: str | None
    processes: dict[str, dict[str, Any]]
    ready: bool
    addons: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)

    @property
    def running(self) -> bool:
        """Every component alive and the API server ready (add-ons aside)."""
        return self.ready and all(self.processes.get(name, {}).get("alive") for name in COMPONENTS)

    def to_dict(self) -> dict[str, Any]:
        return {"state_dir": str(self.state_dir), "kubeconfig": str(self.kubeconfig),
                "server": self.server, "version": self.version, "processes": self.processes,
                "addons": self.addons, "ready": self.ready, "running": self.running}


def status(state_dir: str | os.PathLike[str] | None = None) -> ControlPlaneStatus:
    """What runs in ``state_dir``: PIDs, liveness and whether /readyz answers 200."""
    state = state_dir_of(state_dir)
    data = read_state(state)
    processes, addons = (
        {name: {"pid": info["pid"], "alive": pid_alive(info["pid"], info["exe"], info.get("start")),
                "log": info.get("log")}
         for name, info in data.get(section, {}).items()}
        for section in ("processes", "addons"))
    server = data.get("server")
    ready = False
    if server:
        with contextlib.suppress(OSError, ssl.SSLError):
            ready = Api(server, state / "pki").ready()
    return ControlPlaneStatus(state, kubeconfig_path(state), server, data.get("version"), processes, ready, addons)


def up(state_dir: str | os.PathLike[str] | None = None, *, pools: Sequence[NodePool] = DEFAULT_POOLS,
       timeout: float = 180.0, extra_args: Mapping[str, Sequence[str]] | None = None) -> Path:
    """Start the control plane in ``state_dir`` (idempotent) and return the admin kubeconfig path.

    ``extra_args`` appends flags per component, e.g.
    ``{"kube-apiserver": ["--feature-gates=…"], "kube-scheduler": ["--v=4"]}``; they
    apply when this call starts the plane, not to one already running.

    When everything already runs it returns at once (starting Karpenter beside a plane
    that runs without it). Otherwise it stops what is left, starts a fresh cluster (empty
    etcd; certificates are kept), creates the fake nodes of ``pools``, waits until they
    are Ready and the ``default`` service account exists, then starts Karpenter.
    """
    state = state_dir_of(state_dir)
    with locked(state):
        if status(state).running:
            data = read_state(state)
            karpenter.ensure(state, data, Api(data["server"], state / "pki"), timeout)
            return kubeconfig_path(state)
        _down(state)
        missing = missing_binaries()
        if missing:
            raise MissingBinariesError(
                f"missing {', '.join(missing)} in {bin_dir()}; run: python -m crossdock.dev.k8s build")
        data: dict[str, Any] = {"processes": {}}
        try:
            return _up(state, pools, timeout, data, extra_args or {})
        except BaseException:
            # Stop what this call started even if state.json was lost meanwhile.
            stop_processes(data)
            _down(state)
            raise


def _up(state: Path, pools: Sequence[NodePool], timeout: float, data: dict[str, Any],
        extra_args: Mapping[str, Sequence[str]]) -> Path:
    unknown = set(extra_args) - set(COMPONENTS)
    if unknown:
        raise ValueError(f"extra_args for unknown components {sorted(unknown)}; known: {COMPONENTS}")
    deadline = time.monotonic() + timeout

    def remaining() -> float:
        return max(1.0, deadline - time.monotonic())

    pki = state / "pki"
    ensure_pki(pki)
    etcd_dir = state / "etcd"
    if etcd_dir.exists():
        shutil.rmtree(etcd_dir)
    etcd_dir.mkdir(mode=0o700)

    ports = {name: free_port() for name in components.PORTS}
    server = f"https://127.0.0.1:{ports['kube-apiserver']}"
    conf = state / "conf"
    conf.mkdir(exist_ok=True)
    for user in ("kube-controller-manager", "kube-scheduler", "kwok"):
        write_kubeconfig(conf / f"{user}.kubeconfig", server, pki, user)
    write_kubeconfig(kubeconfig_path(state), server, pki, "admin")
    upstream = [p.read_text() for p in sorted(stages_dir().glob("*.yaml"))]
    (conf / "kwok.yaml").write_text(components.render_kwok_config(upstream))

    data.update({"version": versions()["KUBERNETES_VERSION"], "server": server,
                 "ports": ports, "processes": {}, "started_at": time.time()})
    write_state(state, data)
    launch = Launcher(state, data, extra_args)
    launch.start("etcd", components.etcd_args(etcd_dir, ports))
    wait("etcd /health", lambda: etcd_healthy(ports["etcd-client"]), remaining(),
         lambda: launch.check_alive("etcd"))

    launch.start("kube-apiserver", components.apiserver_args(ports, pki))
    api = Api(server, pki)
    wait("kube-apiserver /readyz", api.ready, remaining(), lambda: launch.check_alive("kube-apiserver"))

    for name in ("kube-controller-manager", "kube-scheduler"):
        launch.start(name, components.controller_args(name, ports, pki, conf))
    launch.start("kwok", components.kwok_args(conf))

    def all_alive() -> None:
        for name in COMPONENTS:
            launch.check_alive(name)

    expected: set[str] = set()
    for pool in pools:
        for node in pool.nodes():
            code, body = api.request("POST", "/api/v1/nodes", node)
            if code not in (201, 409):
                raise ControlPlaneError(f"creating node {node['metadata']['name']}: {code} {body}")
            expected.add(node["metadata"]["name"])
    wait(f"{len(expected)} nodes Ready", lambda: nodes_ready(api, expected), remaining(), all_alive, 0.5)
    wait("service account default/default",
         lambda: api.request("GET", "/api/v1/namespaces/default/serviceaccounts/default")[0] == 200,
         remaining(), all_alive, 0.5)
    karpenter.ensure(state, data, api, remaining())
    data["ready_at"] = time.time()
    write_state(state, data)
    return kubeconfig_path(state)


def _down(state: Path) -> None:
    data = read_state(state)
    stop_processes(data)
    for pid, exe in unrecorded(state):
        stop_pid(pid, exe)
    if data:
        data["processes"] = {}
        write_state(state, data)


def down(state_dir: str | os.PathLike[str] | None = None) -> None:
    """Stop every component started in ``state_dir`` by its recorded PID (idempotent).

    Components that run in ``state_dir`` without a record (state.json lost) are
    found by their binary path and working directory and stopped too.
    """
    state = state_dir_of(state_dir)
    if not state.exists():
        return
    with locked(state):
        _down(state)


def restart_component(name: str, state_dir: str | os.PathLike[str] | None = None, *,
                      pause: float = 1.0, timeout: float = 90.0, kill: bool = False) -> float:
    """Stop one running component by its PID and start it again with the same arguments.

    For fault-injection tests (an API server restart under a watch, an etcd
    restart). The stop is graceful (SIGTERM), or a crash with ``kill=True``
    (SIGKILL). Waits ``pause`` seconds between stop and start, then until the
    component is ready (kube-apiserver: /readyz; etcd: /health; the others:
    started). Returns the seconds it was away. etcd keeps its data.
    """
    if name not in COMPONENTS:
        raise ValueError(f"unknown component {name!r}; one of {COMPONENTS}")
    state = state_dir_of(state_dir)
    with locked(state):
        data = read_state(state)
        info = data.get("processes", {}).get(name)
        if not info or not pid_alive(int(info["pid"]), str(info["exe"]), info.get("start")):
            raise ControlPlaneError(f"{name} is not running in {state}")
        started = time.monotonic()
        stop_pid(int(info["pid"]), str(info["exe"]), info.get("start"),
                 sig=signal.SIGKILL if kill else signal.SIGTERM)
        time.sleep(pause)
        launch = Launcher(state, data)
        launch.start(name, info["args"], append=True)

        def check() -> None:
            launch.check_alive(name)

        if name == "kube-apiserver":
            wait("kube-apiserver /readyz", Api(data["server"], state / "pki").ready, timeout, check)
        elif name == "etcd":
            wait("etcd /health", lambda: etcd_healthy(data["ports"]["etcd-client"]), timeout, check)
        return time.monotonic() - started


def _session_users(state: Path) -> Path:
    users = state / "sessions"
    users.mkdir(exist_ok=True)
    return users


@contextlib.contextmanager
def session(state_dir: str | os.PathLike[str] | None = None, *, keep: bool = False,
            pools: Sequence[NodePool] = DEFAULT_POOLS) -> Iterator[Path]:
    """Use the control plane for the duration of the block; yields the kubeconfig path.

    Starts the plane when needed. At the end the last session still using it
    stops it, unless ``keep`` or it was started by ``python -m crossdock.dev.k8s
    up`` (then it stays up for the developer). Concurrent sessions (two pytest
    runs in one tree) share one plane safely.
    """
    state = state_dir_of(state_dir)
    was_running = status(state).running
    path = up(state, pools=pools)
    token = _session_users(state) / f"{os.getpid()}-{os.urandom(4).hex()}"
    with locked(state):
        data = read_state(state)
        if not was_running and "owner" not in data:
            data["owner"] = "session"
            write_state(state, data)
        token.write_text(str(os.getpid()))
    try:
        yield path
    finally:
        with locked(state):
            token.unlink(missing_ok=True)
            others = False
            for user in _session_users(state).iterdir():
                try:
                    pid = int(user.read_text())
                    os.kill(pid, 0)
                    others = True
                except (OSError, ValueError):
                    user.unlink(missing_ok=True)
            if not keep and not others and read_state(state).get("owner") == "session":
                _down(state)


def pin(state: Path) -> None:
    """Mark a running plane as the developer's: sessions leave it up."""
    with locked(state):
        data = read_state(state)
        data["owner"] = "cli"
        write_state(state, data)
