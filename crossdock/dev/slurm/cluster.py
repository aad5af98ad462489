"""A real multi-node Slurm 22.05 cluster on this machine, for tests, CI and benchmarks.

``up(dir)`` installs Debian's Slurm packages when they are missing, writes ``slurm.conf`` and
``gres.conf`` into ``dir``, creates fake GPU device files and starts munged, slurmctld, one
slurmd per node and two slurmrestd instances (unix socket with local auth, TCP with JWT). It
returns once every node is idle and writes ``dir/env`` with what a client needs::

    SLURM_CONF=...            SLURMRESTD_SOCKET=...   (local auth; requests run as user slurm)
    SLURMRESTD_URL=http://127.0.0.1:16820           SLURM_LOCAL_JWT=...  (token for user root)

The token is deliberately not called ``SLURM_JWT``: with that set, srun switches to auth/jwt
and fails. ``down(dir)`` cancels every job and stops each daemon by the PID in its pidfile.

Cluster: nodes cpu1, cpu2 (8 CPUs, 16 GB), gpu-a100-1 (16 CPUs, 8 fake A100), gpu-l4-1
(8 CPUs, 4 fake L4); partitions cpu (default), gpu-a100, gpu-l4 and high (every node, higher
priority tier, preempts the others by requeue). No cgroups: a "GPU" job only gets
CUDA_VISIBLE_DEVICES.

Daemons exit 0 after daemonizing even when they die right afterwards, so readiness is
always polled. Dead daemons can linger as zombies for a while here, so liveness reads the
state field of /proc/PID/stat.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import logging
import os
import pwd
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import typer

log = logging.getLogger(__name__)

PACKAGES = ("slurmctld", "slurmd", "slurm-client", "munge", "slurmrestd", "slurm-wlm-jwt-plugin")
RESTD_USER = "slurm"
OPENAPI_PLUGIN = "openapi/v0.0.38"
# Deliberately short: slurm's credential lifetime is also the delay before a requeued job
# may start again (cred_expire + 1 s); values under 5 are ignored.
CRED_EXPIRE_S = 10
READY_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class NodeSpec:
    name: str
    cpus: int
    memory_mib: int
    gpu_type: str | None = None
    gpus: int = 0


@dataclass(frozen=True)
class PartitionSpec:
    name: str
    nodes: str
    priority_tier: int
    default: bool = False
    preempt_mode: str | None = None


NODES: tuple[NodeSpec, ...] = (
    NodeSpec("cpu1", 8, 16000),
    NodeSpec("cpu2", 8, 16000),
    NodeSpec("gpu-a100-1", 16, 64000, "a100", 8),
    NodeSpec("gpu-l4-1", 8, 32000, "l4", 4),
)
PARTITIONS: tuple[PartitionSpec, ...] = (
    PartitionSpec("cpu", "cpu[1-2]", 1, default=True),
    PartitionSpec("gpu-a100", "gpu-a100-1", 1),
    PartitionSpec("gpu-l4", "gpu-l4-1", 1),
    PartitionSpec("high", "ALL", 10, preempt_mode="OFF"),
)


class ClusterError(RuntimeError):
    """The local cluster could not be installed, started or reached."""


def default_dir() -> Path:
    base = os.environ.get("CROSSDOCK_STATE_DIR")
    if base:
        return Path(base) / "slurm"
    return Path.home() / ".local" / "state" / "crossdock" / "slurm"


def default_port_base() -> int:
    return int(os.environ.get("CROSSDOCK_SLURM_PORT_BASE", "16817"))


@dataclass(frozen=True)
class Layout:
    """Every path and port of one cluster, derived from its directory.

    Sockets live in a short runtime directory under /run: a unix socket path is limited to
    108 bytes, and slurmrestd, which runs as user slurm, must reach both sockets even when the
    state directory sits under a private home.
    """

    root: Path
    port_base: int

    @classmethod
    def of(cls, state_dir: str | os.PathLike[str] | None = None, port_base: int | None = None) -> Layout:
        root = Path(state_dir).expanduser().resolve() if state_dir else default_dir().resolve()
        return cls(root, default_port_base() if port_base is None else port_base)

    @property
    def runtime(self) -> Path:
        digest = hashlib.sha1(str(self.root).encode()).hexdigest()[:10]
        return Path("/run/crossdock-slurm") / digest

    etc = property(lambda self: self.root / "etc")
    conf = property(lambda self: self.etc / "slurm.conf")
    gres_conf = property(lambda self: self.etc / "gres.conf")
    jwt_key = property(lambda self: self.etc / "jwt_hs256.key")
    state = property(lambda self: self.root / "state")
    # Jobs of other users (slurmrestd's local auth runs them as slurm) exec their script
    # from the spool directory, so it cannot sit under a private home either.
    spool = property(lambda self: self.runtime / "spool")
    logs = property(lambda self: self.root / "log")
    pids = property(lambda self: self.root / "run")
    devices = property(lambda self: self.root / "dev")
    env_file = property(lambda self: self.root / "env")
    munge_dir = property(lambda self: self.runtime / "munge")
    munge_socket = property(lambda self: self.munge_dir / "munge.socket")
    munge_key = property(lambda self: self.root / "munge" / "munge.key")
    restd_dir = property(lambda self: self.runtime / "restd")
    restd_etc = property(lambda self: self.runtime / "etc")
    restd_socket = property(lambda self: self.restd_dir / "slurmrestd.sock")
    ctld_port = property(lambda self: self.port_base)
    slurmd_port = property(lambda self: self.port_base + 1)
    restd_port = property(lambda self: self.port_base + 3)

    def node_port(self, index: int) -> int:
        return self.port_base + 10 + index

    @property
    def restd_url(self) -> str:
        return f"http://127.0.0.1:{self.restd_port}"

    def pidfile(self, daemon: str) -> Path:
        return self.pids / f"{daemon}.pid"

    def daemons(self) -> list[tuple[str, str]]:
        """(name, binary) of every daemon, in start order."""
        return (
            [("munged", "munged"), ("slurmctld", "slurmctld")]
            + [(f"slurmd-{n.name}", "slurmd") for n in NODES]
            + [("slurmrestd-local", "slurmrestd"), ("slurmrestd-jwt", "slurmrestd")]
        )

    def client_env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k != "SLURM_JWT"}
        env["SLURM_CONF"] = str(self.conf)
        return env


# --- configuration -----------------------------------------------------------------------


def render_slurm_conf(layout: Layout) -> str:
    d = layout
    lines = [
        "# Written by crossdock.dev.slurm; regenerated on every `up`.",
        "ClusterName=crossdock",
        "SlurmctldHost=localhost(127.0.0.1)",
        # Bind to the configured addresses (127.0.0.1), not to every interface.
        "CommunicationParameters=NoInAddrAny,NoCtldInAddrAny",
        "SlurmUser=root",
        "SlurmdUser=root",
        f"SlurmctldPort={d.ctld_port}",
        f"SlurmdPort={d.slurmd_port}",
        "AuthType=auth/munge",
        f"AuthInfo=socket={d.munge_socket},cred_expire={CRED_EXPIRE_S}",
        "CredType=cred/munge",
        "AuthAltTypes=auth/jwt",
        f"AuthAltParameters=jwt_key={d.jwt_key}",
        f"StateSaveLocation={d.state}",
        f"SlurmdSpoolDir={d.spool}/%n",
        f"SlurmctldPidFile={layout.pidfile('slurmctld')}",
        f"SlurmdPidFile={d.pids}/slurmd-%n.pid",
        f"SlurmctldLogFile={d.logs}/slurmctld.log",
        f"SlurmdLogFile={d.logs}/slurmd-%n.log",
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none",
        "MpiDefault=none",
        # Nodes advertise the configured CPUs and memory, not the machine's.
        "SlurmdParameters=config_overrides",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_Core_Memory",
        "DefMemPerCPU=100",
        "PriorityType=priority/multifactor",
        "PriorityWeightAge=1000",
        "PriorityWeightPartition=10000",
        "PreemptType=preempt/partition_prio",
        "PreemptMode=REQUEUE",
        "JobRequeue=1",
        # A requeued job waits for the periodic main scheduler, not backfill.
        "SchedulerParameters=sched_interval=2,sched_min_interval=100000,bf_interval=1",
        "KillWait=5",
        # Finished jobs stay listed 5 min: every follow query lists them all.
        "MinJobAge=300",
        "MailProg=/bin/true",
        "ReturnToService=2",
        "JobCompType=jobcomp/filetxt",
        f"JobCompLoc={d.logs}/jobcomp.txt",
        "JobAcctGatherType=jobacct_gather/linux",
        "AccountingStorageType=accounting_storage/none",
        "GresTypes=gpu",
    ]
    for index, node in enumerate(NODES):
        gres = f" Gres=gpu:{node.gpu_type}:{node.gpus}" if node.gpus else ""
        lines.append(
            f"NodeName={node.name} NodeHostname=localhost NodeAddr=127.0.0.1 Port={d.node_port(index)}"
            f" CPUs={node.cpus} RealMemory={node.memory_mib}{gres} State=UNKNOWN"
        )
    for part in PARTITIONS:
        extra = " Default=YES" if part.default else ""
        extra += f" PreemptMode={part.preempt_mode}" if part.preempt_mode else ""
        lines.append(
            f"PartitionName={part.name} Nodes={part.nodes} PriorityTier={part.priority_tier}"
            f" MaxTime=INFINITE State=UP{extra}"
        )
    return "\n".join(lines) + "\n"


def render_gres_conf(layout: Layout) -> str:
    lines = ["AutoDetect=off"]
    for node in NODES:
        if node.gpus:
            files = f"{layout.devices}/{node.name}/nvidia[0-{node.gpus - 1}]"
            lines.append(f"NodeName={node.name} Name=gpu Type={node.gpu_type} File={files}")
    return "\n".join(lines) + "\n"


def _make_gpu_devices(layout: Layout) -> None:
    """One character device per fake GPU (NVIDIA's major number, no driver behind it).

    slurmd drops a GPU without ``File=``; where mknod is refused, a symlink to /dev/null
    also stats as a character device.
    """
    for node in NODES:
        node_dir = layout.devices / node.name
        node_dir.mkdir(parents=True, exist_ok=True)
        for minor in range(node.gpus):
            path = node_dir / f"nvidia{minor}"
            if path.exists() or path.is_symlink():
                continue
            try:
                os.mknod(path, 0o666 | 0o020000, os.makedev(195, minor))
            except OSError:
                path.symlink_to("/dev/null")


def _write_private(path: Path, data: bytes, mode: int = 0o600) -> None:
    if path.exists():
        return
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def _prepare(layout: Layout, fresh_state: bool) -> None:
    slurm = pwd.getpwnam(RESTD_USER)
    for path in (layout.etc, layout.logs, layout.pids, layout.root / "munge", layout.devices):
        path.mkdir(parents=True, exist_ok=True)
    # Drain state and stale jobs survive a restart in StateSaveLocation: start clean.
    if fresh_state:
        shutil.rmtree(layout.state, ignore_errors=True)
        shutil.rmtree(layout.spool, ignore_errors=True)
    layout.state.mkdir(parents=True, exist_ok=True)
    for node in NODES:
        (layout.spool / node.name).mkdir(parents=True, exist_ok=True)
    # munged wants its socket directory world-executable and not writable by others;
    # slurmrestd drops privileges before it binds, so its directory belongs to slurm.
    for path in (layout.runtime.parent, layout.runtime, layout.munge_dir):
        path.mkdir(parents=True, exist_ok=True)
        path.chmod(0o755)
    layout.restd_dir.mkdir(parents=True, exist_ok=True)
    os.chown(layout.restd_dir, slurm.pw_uid, slurm.pw_gid)
    layout.restd_dir.chmod(0o755)
    for stale in (layout.restd_socket, layout.munge_socket):
        stale.unlink(missing_ok=True)
    (layout.root / "munge").chmod(0o700)
    _write_private(layout.munge_key, os.urandom(1024))
    _write_private(layout.jwt_key, os.urandom(32))
    # slurmrestd runs as user slurm and cannot always reach the state directory (a private
    # home): it reads a copy of the configuration in the runtime directory.
    layout.restd_etc.mkdir(exist_ok=True)
    layout.restd_etc.chmod(0o755)
    for directory in (layout.etc, layout.restd_etc):
        (directory / "slurm.conf").write_text(render_slurm_conf(layout))
        (directory / "gres.conf").write_text(render_gres_conf(layout))
        for name in ("slurm.conf", "gres.conf"):
            (directory / name).chmod(0o644)
    _make_gpu_devices(layout)


# --- packages ----------------------------------------------------------------------------


def missing_packages() -> list[str]:
    out = subprocess.run(
        ["dpkg-query", "-W", "-f=${Package} ${db:Status-Status}\n", *PACKAGES],
        capture_output=True,
        text=True,
    ).stdout
    installed = {line.split()[0] for line in out.splitlines() if line.endswith(" installed")}
    return [p for p in PACKAGES if p not in installed]


def ensure_packages() -> list[str]:
    """Install the missing Slurm packages; returns what was installed.

    Package scripts must not start system munge/slurm services, so a policy-rc.d that denies
    every start is put in place for the length of the install when none exists.
    """
    missing = missing_packages()
    if not missing:
        return []
    if os.geteuid() != 0:
        raise ClusterError(f"packages {missing} are missing and installing them needs root")
    policy = Path("/usr/sbin/policy-rc.d")
    created_policy = not policy.exists()
    if created_policy:
        policy.write_text("#!/bin/sh\nexit 101\n")
        policy.chmod(0o755)
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    try:
        log.info("installing %s", " ".join(missing))
        for argv in (
            ["apt-get", "update", "-q"],
            ["apt-get", "install", "-y", "-q", "--no-install-recommends", *missing],
        ):
            done = subprocess.run(argv, env=env, capture_output=True, text=True)
            if done.returncode != 0:
                raise ClusterError(f"{' '.join(argv[:2])} failed ({done.returncode}): {done.stderr[-2000:]}")
    finally:
        if created_policy:
            policy.unlink(missing_ok=True)
    still = missing_packages()
    if still:
        raise ClusterError(f"packages still missing after apt-get install: {still}")
    return missing


# --- processes ---------------------------------------------------------------------------


def _proc_state(pid: int) -> str | None:
    """The state letter of a process, or None when there is none. Zombies count as gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    return stat[stat.rindex(")") + 2]


def _read_pid(pidfile: Path) -> int | None:
    try:
        return int(pidfile.read_text().split()[0])
    except (FileNotFoundError, ValueError, IndexError):
        return None


def _live_pid(pidfile: Path, binary: str) -> int | None:
    """The PID in ``pidfile`` if that process is alive and runs ``binary``."""
    pid = _read_pid(pidfile)
    if pid is None or _proc_state(pid) in (None, "Z", "X"):
        return None
    try:
        argv0 = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode()
    except OSError:
        return None
    return pid if Path(argv0).name == binary else None


def _stop(pid: int, timeout: float = 10.0) -> None:
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if _proc_state(pid) in (None, "Z", "X"):
            return
        time.sleep(0.05)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _run_daemon(argv: list[str], env: dict[str, str], what: str) -> None:
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=30)
    if done.returncode != 0:
        raise ClusterError(f"{what} failed to start ({done.returncode}): {done.stderr[-2000:]}")


def _start_foreground(argv: list[str], env: dict[str, str], logfile: Path, pidfile: Path) -> None:
    """Start a daemon that does not fork itself; we keep its PID."""
    with open(logfile, "ab") as out:
        proc = subprocess.Popen(
            argv, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    pidfile.write_text(f"{proc.pid}\n")


def _tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def start_munged(layout: Layout) -> None:
    if _live_pid(layout.pidfile("munged"), "munged"):
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
    _wait(lambda: layout.munge_socket.exists(), 10, "munged socket", layout.logs / "munged.log")


def start_controller(layout: Layout) -> None:
    """Start slurmctld, keeping saved state (jobs survive a controller restart)."""
    if _live_pid(layout.pidfile("slurmctld"), "slurmctld"):
        return
    _run_daemon(["slurmctld", "-f", str(layout.conf)], layout.client_env(), "slurmctld")
    _wait(lambda: _ping(layout), 20, "slurmctld to answer scontrol ping", layout.logs / "slurmctld.log")


def wait_nodes_ready(layout: Layout, timeout: float = READY_TIMEOUT_S) -> None:
    """Until every node is up in slurmctld's view (after a restart they are ``unknown`` until
    their slurmd registers again)."""

    def ready() -> bool:
        _check_alive(layout, [(f"slurmd-{n.name}", "slurmd") for n in NODES])
        states = node_states(layout)
        return len(states) == len(NODES) and all(s.rstrip("*~#") in READY_NODE_STATES for s in states.values())

    _wait(ready, timeout, "nodes to be idle", layout.logs / "slurmctld.log")


def stop_controller(layout: Layout) -> None:
    pid = _live_pid(layout.pidfile("slurmctld"), "slurmctld")
    if pid:
        _stop(pid)


def start_slurmd(layout: Layout, node: NodeSpec) -> None:
    if _live_pid(layout.pidfile(f"slurmd-{node.name}"), "slurmd"):
        return
    _run_daemon(["slurmd", "-N", node.name, "-f", str(layout.conf)], layout.client_env(), f"slurmd {node.name}")
    # The daemonized child writes the pidfile a moment after the parent has returned.
    _wait(lambda: _live_pid(layout.pidfile(f"slurmd-{node.name}"), "slurmd"), 10, f"slurmd {node.name} pidfile",
          layout.logs / f"slurmd-{node.name}.log")


def start_restd(layout: Layout) -> None:
    env = {**layout.client_env(), "SLURM_CONF": str(layout.restd_etc / "slurm.conf")}
    plugins = ["-s", OPENAPI_PLUGIN]
    if not _live_pid(layout.pidfile("slurmrestd-local"), "slurmrestd"):
        _start_foreground(
            ["slurmrestd", "-u", RESTD_USER, "-a", "rest_auth/local", *plugins, f"unix:{layout.restd_socket}"],
            env,
            layout.logs / "slurmrestd-local.log",
            layout.pidfile("slurmrestd-local"),
        )
    if not _live_pid(layout.pidfile("slurmrestd-jwt"), "slurmrestd"):
        # SLURM_JWT=daemon breaks rest_auth/local in the same process, hence two instances.
        _start_foreground(
            ["slurmrestd", "-u", RESTD_USER, "-a", "rest_auth/jwt", *plugins, f"127.0.0.1:{layout.restd_port}"],
            {**env, "SLURM_JWT": "daemon"},
            layout.logs / "slurmrestd-jwt.log",
            layout.pidfile("slurmrestd-jwt"),
        )


def _wait(predicate, timeout: float, what: str, logfile: Path | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    detail = f"\n--- {logfile} ---\n{_tail(logfile)}" if logfile else ""
    raise ClusterError(f"timed out after {timeout:.0f}s waiting for {what}{detail}")


def _ping(layout: Layout) -> bool:
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


def _restd_ready(layout: Layout, token: str) -> bool:
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


READY_NODE_STATES = {"idle", "mixed", "allocated", "completing"}


def _check_alive(layout: Layout, names: list[tuple[str, str]]) -> None:
    for name, binary in names:
        if not _live_pid(layout.pidfile(name), binary):
            raise ClusterError(f"{name} died after starting\n--- log ---\n{_tail(layout.logs / f'{name}.log')}")


# --- public API --------------------------------------------------------------------------


def up(state_dir: str | os.PathLike[str] | None = None, with_rest: bool = True, port_base: int | None = None) -> Path:
    """Install, configure and start the cluster; a no-op when it is already up. Returns the env file."""
    layout = Layout.of(state_dir, port_base)
    current = status(layout.root, port_base=layout.port_base)
    if current["up"] and (current["rest"] or not with_rest):
        _reconfigure_if_changed(layout)
        return layout.env_file
    if any(d["pid"] for d in current["daemons"].values()):
        # Half up: start over rather than guess which half is sound.
        down(layout.root, port_base=layout.port_base)
    started = time.monotonic()
    _check_ports_free(layout, with_rest)
    ensure_packages()
    _prepare(layout, fresh_state=True)
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
        _check_alive(layout, [("slurmrestd-local", "slurmrestd"), ("slurmrestd-jwt", "slurmrestd")])
        token = issue_token(layout, "root")
        _wait(lambda: _restd_ready(layout, token), 20, "slurmrestd", layout.logs / "slurmrestd-jwt.log")
        env["SLURMRESTD_SOCKET"] = str(layout.restd_socket)
        env["SLURMRESTD_URL"] = layout.restd_url
        env["SLURM_LOCAL_JWT"] = token
    tmp = layout.env_file.with_suffix(".tmp")
    tmp.unlink(missing_ok=True)
    _write_private(tmp, "".join(f"{k}={v}\n" for k, v in env.items()).encode())
    tmp.replace(layout.env_file)
    log.info("slurm cluster up in %.2fs (%s)", time.monotonic() - started, layout.root)
    return layout.env_file


def _check_ports_free(layout: Layout, with_rest: bool) -> None:
    ports = [layout.ctld_port] + [layout.node_port(i) for i in range(len(NODES))]
    ports += [layout.restd_port] if with_rest else []
    for port in ports:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the daemons do: TIME_WAIT is fine
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                raise ClusterError(
                    f"port {port} on 127.0.0.1 is taken (another cluster? `status --dir` shows which is up);"
                    f" stop it or give this one other ports with CROSSDOCK_SLURM_PORT_BASE"
                ) from None


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
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)


def _cancel_all_jobs(layout: Layout) -> None:
    env = layout.client_env()
    try:
        ids = subprocess.run(
            ["squeue", "-h", "-o", "%A"], env=env, capture_output=True, text=True, timeout=10
        ).stdout.split()
        if not ids:
            return
        subprocess.run(["scancel", *ids], env=env, capture_output=True, timeout=30)

        def drained() -> bool:
            out = subprocess.run(
                ["squeue", "-h", "-t", "running,completing,suspended", "-o", "%A"],
                env=env, capture_output=True, text=True, timeout=10,
            )
            return out.returncode != 0 or not out.stdout.strip()

        _wait(drained, 15, "jobs to end")
    except (subprocess.TimeoutExpired, ClusterError) as exc:
        log.warning("could not cancel every job before stopping: %s", exc)


def down(state_dir: str | os.PathLike[str] | None = None, port_base: int | None = None) -> list[str]:
    """Cancel every job and stop every daemon; returns the names of the daemons stopped."""
    layout = Layout.of(state_dir, port_base)
    if _live_pid(layout.pidfile("slurmctld"), "slurmctld"):
        _cancel_all_jobs(layout)
    stopped = []
    for name, binary in reversed(layout.daemons()):
        pid = _live_pid(layout.pidfile(name), binary)
        if pid:
            _stop(pid)
            stopped.append(name)
        layout.pidfile(name).unlink(missing_ok=True)
    layout.env_file.unlink(missing_ok=True)
    # Sockets, the spool and the config copy: nothing there outlives the daemons.
    shutil.rmtree(layout.runtime, ignore_errors=True)
    return stopped


def status(state_dir: str | os.PathLike[str] | None = None, port_base: int | None = None) -> dict:
    """Daemons (PID or None), node states, and whether the cluster (and its REST API) is up."""
    layout = Layout.of(state_dir, port_base)
    daemons = {name: {"pid": _live_pid(layout.pidfile(name), binary)} for name, binary in layout.daemons()}
    core_up = all(v["pid"] for k, v in daemons.items() if not k.startswith("slurmrestd"))
    nodes = node_states(layout) if core_up and layout.conf.exists() else {}
    nodes_up = len(nodes) == len(NODES) and all(s.rstrip("*~#") in READY_NODE_STATES for s in nodes.values())
    rest = all(v["pid"] for k, v in daemons.items() if k.startswith("slurmrestd"))
    return {
        "dir": str(layout.root),
        "up": core_up and nodes_up and layout.env_file.exists(),
        "rest": rest,
        "daemons": daemons,
        "nodes": nodes,
        "env_file": str(layout.env_file),
    }


# --- command line ------------------------------------------------------------------------

app = typer.Typer(help="A local multi-node Slurm 22.05 cluster (4 nodes, fake GPUs) for tests and CI.")

DirOption = typer.Option(None, "--dir", help="State directory [default: $CROSSDOCK_STATE_DIR/slurm]")


@app.command("up")
def up_command(
    dir: Path | None = DirOption,
    no_rest: bool = typer.Option(False, "--no-rest", help="Do not start slurmrestd."),
) -> None:
    """Install (if needed) and start the cluster; print how to load its environment."""
    try:
        env_file = up(dir, with_rest=not no_rest)
    except ClusterError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None
    typer.echo(f"export $(cat {env_file})")


@app.command("down")
def down_command(dir: Path | None = DirOption) -> None:
    """Cancel every job and stop every daemon."""
    stopped = down(dir)
    typer.echo(f"stopped: {', '.join(stopped) or 'nothing was running'}")


@app.command("status")
def status_command(
    dir: Path | None = DirOption,
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Show daemons and nodes; exit code 0 when up, 1 otherwise."""
    current = status(dir)
    if as_json:
        typer.echo(json.dumps(current, indent=2))
    else:
        typer.echo(f"{current['dir']}: {'up' if current['up'] else 'down'}")
        for name, info in current["daemons"].items():
            typer.echo(f"  {name:<20} {info['pid'] or '-'}")
        for name, state in current["nodes"].items():
            typer.echo(f"  node {name:<15} {state}")
    raise typer.Exit(0 if current["up"] else 1)


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    app()


if __name__ == "__main__":
    main()
