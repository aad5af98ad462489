"""Starting, watching and stopping the cluster's daemons: munged, slurmctld, one slurmd per
node and the two slurmrestd instances.

Daemons exit 0 after daemonizing even when they die right afterwards, so readiness is
always polled. Dead daemons can linger as zombies for a while here, so liveness reads the
state field of /proc/PID/stat.
"""

from __future__ import annotations

import http.client
import os
import socket
import subprocess
from collections.abc import Callable
from pathlib import Path

from crossdock.dev.proc import GONE_STATES, live_pid, log_tail, proc_state, spawn, terminate, wait_until
from crossdock.dev.slurm.layout import NODES, RESTD_USER, ClusterError, Layout, NodeSpec

OPENAPI_PLUGIN = "openapi/v0.0.38"
READY_TIMEOUT_S = 60.0
READY_NODE_STATES = {"idle", "mixed", "allocated", "completing"}


def stop(pid: int, timeout: float = 10.0) -> None:
    """SIGTERM, then SIGKILL after ``timeout`` seconds."""
    terminate(pid, lambda: proc_state(pid) in GONE_STATES, timeout=timeout, interval=0.05)


def wait(predicate: Callable[[], object], timeout: float, what: str, logfile: Path | None = None) -> None:
    if wait_until(predicate, timeout):
        return
    detail = f"\n--- {logfile} ---\n{log_tail(logfile, 15)}" if logfile else ""
    raise ClusterError(f"timed out after {timeout:.0f}s waiting for {what}{detail}")


def _run_daemon(argv: list[str], env: dict[str, str], what: str) -> None:
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=30)
    if done.returncode != 0:
        raise ClusterError(f"{what} failed to start ({done.returncode}): {done.stderr[-2000:]}")


def _start_foreground(argv: list[str], env: dict[str, str], logfile: Path, pidfile: Path) -> None:
    """Start a daemon that does not fork itself; we keep its PID."""
    proc = spawn(argv, logfile, env=env)
    pidfile.write_text(f"{proc.pid}\n")


def start_munged(layout: Layout) -> None:
    if live_pid(layout.pidfile("munged"), "munged"):
        return
    _run_daemon(
        [
            "munged",
            f"--socket={layout.munge_socket}",
            f"--key-file={layout.munge_key}",
            f"--pid-file={layout.pidfile('munged')}",
            f"--log-file={layout.logs}/munged.log",
            f"--seed-file={layout.root / 'munge' / 'munge.seed'}",
        ],
        dict(os.environ),
        "munged",
    )
    wait(lambda: layout.munge_socket.exists(), 10, "munged socket", layout.logs / "munged.log")


def start_controller(layout: Layout) -> None:
    """Start slurmctld, keeping saved state (jobs survive a controller restart)."""
    if live_pid(layout.pidfile("slurmctld"), "slurmctld"):
        return
    _run_daemon(["slurmctld", "-f", str(layout.conf)], layout.client_env(), "slurmctld")
    wait(lambda: ping(layout), 20, "slurmctld to answer scontrol ping", layout.logs / "slurmctld.log")


def wait_nodes_ready(layout: Layout, timeout: float = READY_TIMEOUT_S) -> None:
    """Until every node is up in slurmctld's view (after a restart they are ``unknown`` until
    their slurmd registers again)."""

    def ready() -> bool:
        check_alive(layout, [(f"slurmd-{n.name}", "slurmd") for n in NODES])
        states = node_states(layout)
        return all(states.get(n.name, "").rstrip("*~#") in READY_NODE_STATES for n in NODES)

    wait(ready, timeout, "nodes to be idle", layout.logs / "slurmctld.log")


def stop_controller(layout: Layout) -> None:
    pid = live_pid(layout.pidfile("slurmctld"), "slurmctld")
    if pid:
        stop(pid)


def start_slurmd(layout: Layout, node: NodeSpec) -> None:
    if live_pid(layout.pidfile(f"slurmd-{node.name}"), "slurmd"):
        return
    _run_daemon(["slurmd", "-N", node.name, "-f", str(layout.conf)], layout.client_env(), f"slurmd {node.name}")
    # The daemonized child writes the pidfile a moment after the parent has returned.
    wait(lambda: live_pid(layout.pidfile(f"slurmd-{node.name}"), "slurmd"), 10, f"slurmd {node.name} pidfile",
         layout.logs / f"slurmd-{node.name}.log")


def start_restd(layout: Layout) -> None:
    env = {**layout.client_env(), "SLURM_CONF": str(layout.restd_etc / "slurm.conf")}
    plugins = ["-s", OPENAPI_PLUGIN]
    if not live_pid(layout.pidfile("slurmrestd-local"), "slurmrestd"):
        _start_foreground(
            ["slurmrestd", "-u", RESTD_USER, "-a", "rest_auth/local", *plugins, f"unix:{layout.restd_socket}"],
            env,
            layout.logs / "slurmrestd-local.log",
            layout.pidfile("slurmrestd-local"),
        )
    if not live_pid(layout.pidfile("slurmrestd-jwt"), "slurmrestd"):
        # SLURM_JWT=daemon breaks rest_auth/local in the same process, hence two instances.
        _start_foreground(
            ["slurmrestd", "-u", RESTD_USER, "-a", "rest_auth/jwt", *plugins, f"127.0.0.1:{layout.restd_port}"],
            {**env, "SLURM_JWT": "daemon"},
            layout.logs / "slurmrestd-jwt.log",
            layout.pidfile("slurmrestd-jwt"),
        )


def ping(layout: Layout) -> bool:
    try:
        done = subprocess.run(
            ["scontrol", "ping"], env=layout.client_env(), capture_output=True, text=True, timeout=10
        )
    except subprocess.TimeoutExpired:
        return False
    return done.returncode == 0 and "is UP" in done.stdout


def node_states(layout: Layout) -> dict[str, str]:
    """Node name → sinfo's long state (``idle``, ``mixed``, ``down*``…); empty when unreachable."""
    try:
        done = subprocess.run(
            ["sinfo", "-h", "-N", "-o", "%N %T"], env=layout.client_env(), capture_output=True, text=True, timeout=10
        )
    except subprocess.TimeoutExpired:
        return {}
    if done.returncode != 0:
        return {}
    return dict(line.split(None, 1) for line in done.stdout.splitlines() if line.strip())


def restd_ready(layout: Layout, token: str) -> bool:
    """Both slurmrestd instances answer a ping (the TCP one with the JWT)."""

    class _Unix(http.client.HTTPConnection):
        def connect(self) -> None:
            self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.sock.settimeout(5)
            self.sock.connect(str(layout.restd_socket))

    jwt_headers = {"X-SLURM-USER-NAME": "root", "X-SLURM-USER-TOKEN": token}
    checks = (
        (_Unix("localhost", timeout=5), {}),
        (http.client.HTTPConnection("127.0.0.1", layout.restd_port, timeout=5), jwt_headers),
    )
    for conn, headers in checks:
        try:
            conn.request("GET", f"/slurm/{OPENAPI_PLUGIN.split('/')[1]}/ping", headers=headers)
            if conn.getresponse().status != 200:
                return False
        except OSError:
            return False
        finally:
            conn.close()
    return True


def check_alive(layout: Layout, names: list[tuple[str, str]]) -> None:
    for name, binary in names:
        if not live_pid(layout.pidfile(name), binary):
            raise ClusterError(f"{name} died after starting\n--- log ---\n{log_tail(layout.logs / f'{name}.log', 15)}")
