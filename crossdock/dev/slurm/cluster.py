"""The cluster as a whole: ``up`` (install, configure, start, wait), ``down``, ``status``, and
what a client needs to reach it (``read_env``, ``issue_token``)."""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import time
from pathlib import Path

from crossdock.backends.slurm.envfile import parse_env
from crossdock.dev.proc import live_pid, port_is_free, write_private
from crossdock.dev.slurm.config import prepare, render_slurm_conf
from crossdock.dev.slurm.daemons import (
    READY_NODE_STATES,
    check_alive,
    node_states,
    restd_ready,
    start_controller,
    start_munged,
    start_restd,
    start_slurmd,
    stop,
    wait,
    wait_nodes_ready,
)
from crossdock.dev.slurm.layout import ELASTIC_NODES, NODES, ClusterError, Layout
from crossdock.dev.slurm.packages import ensure_packages

log = logging.getLogger(__name__)


def up(state_dir: str | os.PathLike[str] | None = None, with_rest: bool = True, port_base: int | None = None) -> Path:
    """Install, configure and start the cluster; a no-op when it is already up. Returns the env file."""
    layout = Layout.of(state_dir, port_base)
    current = status(layout.root, port_base=layout.port_base)
    if current["up"] and (current["rest"] or not with_rest):
        if not _needs_restart(layout):
            _reconfigure_if_changed(layout)
            return layout.env_file
        log.warning("slurm.conf's nodes or power saving changed, which slurmctld takes only at a start:"
                    " restarting the cluster (%s)", layout.root)
        down(layout.root, port_base=layout.port_base)
    elif any(d["pid"] for d in current["daemons"].values()):
        # Half up: start over rather than guess which half is sound.
        down(layout.root, port_base=layout.port_base)
    started = time.monotonic()
    _check_ports_free(layout, with_rest)
    ensure_packages()
    prepare(layout, fresh_state=True)
    start_munged(layout)
    start_controller(layout)
    for node in NODES:
        start_slurmd(layout, node)
    if with_rest:
        start_restd(layout)
    wait_nodes_ready(layout)
    env = {
        "SLURM_CONF": str(layout.conf),
    }
    if with_rest:
        check_alive(layout, [("slurmrestd-local", "slurmrestd"), ("slurmrestd-jwt", "slurmrestd")])
        token = issue_token(layout, "root")
        wait(lambda: restd_ready(layout, token), 20, "slurmrestd", layout.logs / "slurmrestd-jwt.log")
        env["SLURMRESTD_SOCKET"] = str(layout.restd_socket)
        env["SLURMRESTD_URL"] = layout.restd_url
        env["SLURM_LOCAL_JWT"] = token
    tmp = layout.env_file.with_suffix(".tmp")
    tmp.unlink(missing_ok=True)
    write_private(tmp, "".join(f"{k}={v}\n" for k, v in env.items()).encode())
    tmp.replace(layout.env_file)
    log.info("slurm cluster up in %.2fs (%s)", time.monotonic() - started, layout.root)
    return layout.env_file


def _check_ports_free(layout: Layout, with_rest: bool) -> None:
    ports = [layout.ctld_port] + [layout.node_port(i) for i in range(len(NODES) + len(ELASTIC_NODES))]
    ports += [layout.restd_port] if with_rest else []
    for port in ports:
        if not port_is_free(port):
            raise ClusterError(
                f"port {port} on 127.0.0.1 is taken (another cluster? `status --dir` shows which is up);"
                f" stop it or give this one other ports with CROSSDOCK_SLURM_PORT_BASE"
            )


RESTART_KEYS = ("NodeName=", "PartitionName=", "ResumeProgram=", "SuspendProgram=", "SuspendTime=")
"""slurm.conf lines ``scontrol reconfigure`` cannot apply on 22.05 (nodes added or removed, power
saving turned on the first time)."""


def _needs_restart(layout: Layout) -> bool:
    def lines(text: str) -> list[str]:
        return [line for line in text.splitlines() if line.startswith(RESTART_KEYS)]

    return lines(layout.conf.read_text()) != lines(render_slurm_conf(layout))


def _reconfigure_if_changed(layout: Layout) -> None:
    """A running cluster whose slurm.conf this module now writes differently is reconfigured
    in place (``scontrol reconfigure``), keeping its jobs."""
    wanted = render_slurm_conf(layout)
    if layout.conf.read_text() == wanted:
        return
    for directory in (layout.etc, layout.restd_etc):
        (directory / "slurm.conf").write_text(wanted)
    subprocess.run(["scontrol", "reconfigure"], env=layout.client_env(), capture_output=True, timeout=30, check=True)
    log.info("slurm.conf changed: cluster reconfigured (%s)", layout.root)


def issue_token(layout: Layout, user: str, lifespan_s: int = 7 * 86400) -> str:
    done = subprocess.run(
        ["scontrol", "token", f"username={user}", f"lifespan={lifespan_s}"],
        env=layout.client_env(),
        capture_output=True,
        text=True,
        timeout=20,
    )
    if done.returncode != 0 or "SLURM_JWT=" not in done.stdout:
        raise ClusterError(f"scontrol token failed ({done.returncode}): {done.stderr.strip()}")
    return done.stdout.strip().split("SLURM_JWT=", 1)[1]


def read_env(state_dir: str | os.PathLike[str] | None = None) -> dict[str, str]:
    """The variables ``up`` wrote, as a dict (raises ClusterError when the cluster was never up)."""
    path = Layout.of(state_dir).env_file
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise ClusterError(f"{path} does not exist; run `python -m crossdock.dev.slurm up` first") from None
    return parse_env(text)


def clear_jobs(state_dir: str | os.PathLike[str] | None = None, timeout_s: float = 60,
               port_base: int | None = None) -> list[str]:
    """Cancel every job the cluster still holds and wait until none is left, those already
    completing included: the ids cancelled. Raises ClusterError when one has not ended within
    ``timeout_s``."""
    env = Layout.of(state_dir, port_base).client_env()

    def listed(states: str) -> list[str] | None:
        out = subprocess.run(["squeue", "-h", "-t", states, "-o", "%A"], env=env, capture_output=True, text=True,
                             timeout=30)
        return out.stdout.split() if out.returncode == 0 else None

    ids = listed("pending,running,suspended") or []
    if ids:
        subprocess.run(["scancel", *ids], env=env, capture_output=True, timeout=30)
    wait(lambda: listed("pending,running,completing,suspended") == [], timeout_s,
         f"jobs {','.join(ids) or '(completing)'} to end")
    return ids


def down(state_dir: str | os.PathLike[str] | None = None, port_base: int | None = None) -> list[str]:
    """Cancel every job and stop every daemon; returns the names of the daemons stopped."""
    layout = Layout.of(state_dir, port_base)
    if live_pid(layout.pidfile("slurmctld"), "slurmctld"):
        try:
            clear_jobs(layout.root, timeout_s=15, port_base=layout.port_base)
        except (subprocess.TimeoutExpired, ClusterError) as exc:
            log.warning("could not cancel every job before stopping: %s", exc)
    stopped = []
    # Elastic nodes' slurmd run only while powered up (started by the ResumeProgram).
    for name, binary in [*((f"slurmd-{n.name}", "slurmd") for n in ELASTIC_NODES), *reversed(layout.daemons())]:
        pid = live_pid(layout.pidfile(name), binary)
        if pid:
            stop(pid)
            stopped.append(name)
        layout.pidfile(name).unlink(missing_ok=True)
    layout.env_file.unlink(missing_ok=True)
    # Sockets, the spool and the config copy: nothing there outlives the daemons.
    shutil.rmtree(layout.runtime, ignore_errors=True)
    return stopped


def status(state_dir: str | os.PathLike[str] | None = None, port_base: int | None = None) -> dict:
    """Daemons (PID or None), node states, and whether the cluster (and its REST API) is up."""
    layout = Layout.of(state_dir, port_base)
    daemons = {name: {"pid": live_pid(layout.pidfile(name), binary)} for name, binary in layout.daemons()}
    core_up = all(v["pid"] for k, v in daemons.items() if not k.startswith("slurmrestd"))
    nodes = node_states(layout) if core_up and layout.conf.exists() else {}
    always_on = [nodes.get(n.name, "") for n in NODES]
    nodes_up = all(s.rstrip("*~#") in READY_NODE_STATES for s in always_on)
    rest = all(v["pid"] for k, v in daemons.items() if k.startswith("slurmrestd"))
    return {
        "dir": str(layout.root),
        "up": core_up and nodes_up and layout.env_file.exists(),
        "rest": rest,
        "daemons": daemons,
        "nodes": nodes,
        "env_file": str(layout.env_file),
    }
