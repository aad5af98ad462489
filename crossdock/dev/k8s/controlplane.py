"""A real, local Kubernetes control plane for development and CI.

Upstream etcd, kube-apiserver, kube-controller-manager and kube-scheduler run on
loopback beside kwok, which plays the kubelet for fake GPU nodes: it marks the
Nodes Ready, renews their leases and moves bound Pods through their lifecycle.
Nothing here is a mock: Jobs make Pods through the Job controller, Pods bind
through kube-scheduler (filters, taints, preemption), and the API is the real
one, admission and RBAC included.

Binaries are built from upstream Go modules at the releases pinned in
``scripts/k8s/versions.env`` (see ``scripts/k8s/build.sh``) and cached outside
the repository in ``${CROSSDOCK_CACHE:-~/.cache/crossdock}/k8s/<version>/bin``.

From Python::

    from crossdock.dev import k8s
    kubeconfig = k8s.up()          # idempotent; returns the admin kubeconfig path
    ...
    k8s.down()

    with k8s.session() as kubeconfig:   # shared by concurrent users; the last one stops it
        ...

Tests use the fixtures of ``tests/integration/kubernetes/conftest.py``
(``k8s_kubeconfig``, ``k8s_client``, ``k8s_namespace``).

From a shell::

    python -m crossdock.dev.k8s build      # once: builds and caches the binaries
    python -m crossdock.dev.k8s up         # prints the kubeconfig path
    export KUBECONFIG="$(python -m crossdock.dev.k8s kubeconfig)"
    python -m crossdock.dev.k8s status
    python -m crossdock.dev.k8s down

Pod lifecycle on the fake nodes (kwok Stages, see ``POD_STAGES``): a bound Pod
becomes Running at once; with the annotation ``crossdock.io/run-seconds`` it
terminates after that many seconds with the exit code in
``crossdock.io/exit-code`` (default 0; 0 gives phase Succeeded, anything else
Failed, with the code in ``containerStatuses[].state.terminated.exitCode``);
with only ``crossdock.io/exit-code`` it terminates at once; with neither it runs
until deleted. Use ``restartPolicy: Never`` for these pods: kwok does not restart
containers.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import typer
import yaml

__all__ = [
    "ANNOTATION_EXIT_CODE",
    "ANNOTATION_RUN_SECONDS",
    "DEFAULT_POOLS",
    "ControlPlaneError",
    "ControlPlaneStatus",
    "MissingBinariesError",
    "NodePool",
    "app",
    "bin_dir",
    "build",
    "default_state_dir",
    "down",
    "kubeconfig_path",
    "main",
    "restart_component",
    "session",
    "status",
    "up",
    "versions",
]

ANNOTATION_RUN_SECONDS = "crossdock.io/run-seconds"
ANNOTATION_EXIT_CODE = "crossdock.io/exit-code"
LABEL_POOL = "crossdock.io/pool"
LABEL_GPU_PRODUCT = "nvidia.com/gpu.product"
GPU_RESOURCE = "nvidia.com/gpu"

SCRIPTS_DIR = Path(__file__).resolve().parents[3] / "scripts" / "k8s"
BUILD_SCRIPT = SCRIPTS_DIR / "build.sh"
VERSIONS_FILE = SCRIPTS_DIR / "versions.env"

SERVICE_CIDR = "10.96.0.0/16"
SERVICE_IP = "10.96.0.1"
POD_CIDR = "10.244.0.0/16"
SA_ISSUER = "https://kubernetes.default.svc.cluster.local"

# Start order; down() stops them in reverse.
COMPONENTS = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok")
BINARIES = COMPONENTS


class ControlPlaneError(RuntimeError):
    """The control plane could not be started, reached or stopped."""


class MissingBinariesError(ControlPlaneError):
    """The binaries are not built yet (run ``python -m crossdock.dev.k8s build``)."""


# --------------------------------------------------------------------------- nodes


@dataclasses.dataclass(frozen=True)
class NodePool:
    """``count`` identical fake nodes named ``<name>-<i>``."""

    name: str
    count: int
    cpu: str
    memory: str
    gpus: int = 0
    gpu_product: str | None = None
    pods: str = "110"
    instance_type: str | None = None

    def nodes(self) -> list[dict[str, Any]]:
        return [self.node(i) for i in range(self.count)]

    def node(self, index: int) -> dict[str, Any]:
        name = f"{self.name}-{index}"
        labels = {
            "kubernetes.io/hostname": name,
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64",
            "type": "kwok",
            LABEL_POOL: self.name,
        }
        if self.instance_type:
            labels["node.kubernetes.io/instance-type"] = self.instance_type
        resources = {"cpu": self.cpu, "memory": self.memory, "pods": self.pods}
        taints: list[dict[str, str]] = []
        if self.gpus:
            resources[GPU_RESOURCE] = str(self.gpus)
            labels["nvidia.com/gpu.present"] = "true"
            labels["nvidia.com/gpu.count"] = str(self.gpus)
            if self.gpu_product:
                labels[LABEL_GPU_PRODUCT] = self.gpu_product
            taints.append({"key": GPU_RESOURCE, "value": "present", "effect": "NoSchedule"})
        return {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": name,
                "labels": labels,
                "annotations": {"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
            },
            "spec": {"taints": taints} if taints else {},
            "status": {"capacity": dict(resources), "allocatable": dict(resources)},
        }


DEFAULT_POOLS: tuple[NodePool, ...] = (
    NodePool("a100", 4, cpu="96", memory="1000Gi", gpus=8,
             gpu_product="NVIDIA-A100-SXM4-80GB", instance_type="a100-80gb-x8"),
    NodePool("l4", 2, cpu="48", memory="192Gi", gpus=4,
             gpu_product="NVIDIA-L4", instance_type="l4-x4"),
    NodePool("cpu", 2, cpu="64", memory="256Gi", instance_type="cpu-64"),
)

# Crossdock's pod-termination Stages; the upstream node Stages and the pod-ready and
# pod-delete Stages of the pinned kwok release are copied beside the binaries by
# build.sh. A pod terminates once it has a run time or an exit code; the delay is the
# run time in seconds (0 when absent).
_RUN_SECONDS = f'.metadata.annotations["{ANNOTATION_RUN_SECONDS}"]'
_EXIT_CODE = f'.metadata.annotations["{ANNOTATION_EXIT_CODE}"]'
_TERMINATE_DELAY = {
    "durationMilliseconds": 0,
    "durationFrom": {"jq": {"expression": f'({_RUN_SECONDS} // empty) + "s"'}},
}
_CONTAINERS_TERMINATED = """\
{{{{ $now := Now }}}}
{{{{ $root := . }}}}
containerStatuses:
{{{{ range .spec.containers }}}}
- image: {{{{ .image | Quote }}}}
  name: {{{{ .name | Quote }}}}
  ready: false
  restartCount: 0
  started: false
  state:
    terminated:
      exitCode: {exit_code}
      finishedAt: {{{{ $now | Quote }}}}
      reason: {reason}
      startedAt: {{{{ or $root.status.startTime $now | Quote }}}}
{{{{ end }}}}
conditions:
- lastTransitionTime: {{{{ $now | Quote }}}}
  status: "False"
  type: Ready
  reason: {condition_reason}
- lastTransitionTime: {{{{ $now | Quote }}}}
  status: "False"
  type: ContainersReady
  reason: {condition_reason}
phase: {phase}
"""

POD_STAGES: tuple[dict[str, Any], ...] = (
    {
        "apiVersion": "kwok.x-k8s.io/v1alpha1",
        "kind": "Stage",
        "metadata": {"name": "crossdock-pod-succeeded"},
        "spec": {
            "resourceRef": {"apiGroup": "v1", "kind": "Pod"},
            "selector": {"matchExpressions": [
                {"key": ".metadata.deletionTimestamp", "operator": "DoesNotExist"},
                {"key": ".status.phase", "operator": "In", "values": ["Running"]},
                {"key": f"({_RUN_SECONDS} // {_EXIT_CODE})", "operator": "Exists"},
                {"key": f'({_EXIT_CODE} // "0")', "operator": "In", "values": ["0"]},
            ]},
            "delay": _TERMINATE_DELAY,
            "next": {"statusTemplate": _CONTAINERS_TERMINATED.format(
                exit_code=0, reason="Completed", condition_reason="PodCompleted",
                phase="Succeeded")},
        },
    },
    {
        "apiVersion": "kwok.x-k8s.io/v1alpha1",
        "kind": "Stage",
        "metadata": {"name": "crossdock-pod-failed"},
        "spec": {
            "resourceRef": {"apiGroup": "v1", "kind": "Pod"},
            "selector": {"matchExpressions": [
                {"key": ".metadata.deletionTimestamp", "operator": "DoesNotExist"},
                {"key": ".status.phase", "operator": "In", "values": ["Running"]},
                {"key": f'({_EXIT_CODE} // "0")', "operator": "NotIn", "values": ["0"]},
            ]},
            "delay": _TERMINATE_DELAY,
            "next": {"statusTemplate": _CONTAINERS_TERMINATED.format(
                exit_code=f'{{{{ index $root.metadata.annotations "{ANNOTATION_EXIT_CODE}" }}}}',
                reason="Error", condition_reason="PodFailed", phase="Failed")},
        },
    },
)


# ------------------------------------------------------------------------ locations


def versions() -> dict[str, str]:
    """The pinned releases (``KUBERNETES_VERSION``, ``ETCD_VERSION``, ``KWOK_VERSION``)."""
    out: dict[str, str] = {}
    for line in VERSIONS_FILE.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            key, _, value = line.partition("=")
            out[key.strip()] = value.strip()
    return out


def cache_root() -> Path:
    base = os.environ.get("CROSSDOCK_CACHE") or str(Path.home() / ".cache" / "crossdock")
    return Path(base) / "k8s"


def bin_dir() -> Path:
    """Where the binaries of the pinned release live (outside the repository)."""
    return cache_root() / versions()["KUBERNETES_VERSION"] / "bin"


def _stages_dir() -> Path:
    return bin_dir().parent / "kwok-stages"


def default_state_dir() -> Path:
    """``$CROSSDOCK_K8S_STATE_DIR``, else ``<cache>/k8s/state``."""
    env = os.environ.get("CROSSDOCK_K8S_STATE_DIR")
    return Path(env) if env else cache_root() / "state"


def _state_dir(state_dir: str | os.PathLike[str] | None) -> Path:
    return Path(state_dir) if state_dir is not None else default_state_dir()


def kubeconfig_path(state_dir: str | os.PathLike[str] | None = None) -> Path:
    """The admin kubeconfig that ``up`` writes (it may not exist yet)."""
    return _state_dir(state_dir) / "kubeconfig"


def _missing_binaries() -> list[str]:
    bins = bin_dir()
    missing = [b for b in BINARIES if not os.access(bins / b, os.X_OK)]
    if not (_stages_dir() / "pod-ready.yaml").is_file():
        missing.append("kwok-stages")
    return missing


# ---------------------------------------------------------------------------- build


def build(*, force: bool = False) -> Path:
    """Build and cache the binaries of the pinned release; skip what is present."""
    if not force and not _missing_binaries():
        return bin_dir()
    if not BUILD_SCRIPT.is_file():
        raise ControlPlaneError(f"{BUILD_SCRIPT} not found: building needs a source checkout")
    env = dict(os.environ)
    if shutil.which("go") is None and Path("/usr/local/go/bin/go").exists():
        env["PATH"] = env.get("PATH", "") + os.pathsep + "/usr/local/go/bin"
    argv = ["bash", str(BUILD_SCRIPT)] + (["--force"] if force else [])
    try:
        subprocess.run(argv, check=True, env=env)
    except (OSError, subprocess.CalledProcessError) as err:
        raise ControlPlaneError(f"{BUILD_SCRIPT} failed: {err}") from err
    missing = _missing_binaries()
    if missing:
        raise ControlPlaneError(f"build finished but {missing} are missing in {bin_dir()}")
    return bin_dir()


# ----------------------------------------------------------------------------- pki


def _openssl(*args: str) -> None:
    proc = subprocess.run(["openssl", *args], capture_output=True, text=True)
    if proc.returncode != 0:
        raise ControlPlaneError(f"openssl {args[0]} failed: {proc.stderr.strip()}")


def _ec_key(path: Path) -> None:
    _openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", str(path))
    path.chmod(0o600)


def _ca_cert(pki: Path, name: str, subject: str) -> None:
    cnf = pki / f"{name}.cnf"
    cnf.write_text(
        "[req]\ndistinguished_name = dn\n[dn]\n[ca]\n"
        "basicConstraints = critical,CA:TRUE\n"
        "keyUsage = critical,keyCertSign,cRLSign,digitalSignature\n"
        "subjectKeyIdentifier = hash\n"
    )
    _ec_key(pki / f"{name}.key")
    _openssl("req", "-x509", "-new", "-key", str(pki / f"{name}.key"), "-subj", subject,
             "-days", "3650", "-sha256", "-config", str(cnf), "-extensions", "ca",
             "-set_serial", "0x" + os.urandom(16).hex(), "-out", str(pki / f"{name}.crt"))
    cnf.unlink()


def _leaf_cert(pki: Path, name: str, subject: str, usage: str, sans: Sequence[str] = (),
               ca: str = "ca") -> None:
    key, csr, crt, ext = (pki / f"{name}.{s}" for s in ("key", "csr", "crt", "ext"))
    _ec_key(key)
    lines = [
        "[req]", "distinguished_name = dn", "[dn]",
        "[leaf]", "basicConstraints = critical,CA:FALSE",
        "keyUsage = critical,digitalSignature,keyEncipherment",
        f"extendedKeyUsage = {usage}",
        "authorityKeyIdentifier = keyid",
    ]
    if sans:
        lines.append("subjectAltName = " + ",".join(sans))
    ext.write_text("\n".join(lines) + "\n")
    _openssl("req", "-new", "-key", str(key), "-subj", subject, "-config", str(ext), "-out", str(csr))
    _openssl("x509", "-req", "-in", str(csr), "-CA", str(pki / f"{ca}.crt"), "-CAkey", str(pki / f"{ca}.key"),
             "-set_serial", "0x" + os.urandom(16).hex(), "-days", "3650", "-sha256",
             "-extfile", str(ext), "-extensions", "leaf", "-out", str(crt))
    csr.unlink()
    ext.unlink()


# Client identities: (file name, subject). RBAC's bootstrap roles bind the two
# system:kube-* users; the admin and kwok are system:masters.
_CLIENTS = (
    ("admin", "/O=system:masters/CN=crossdock-admin"),
    ("kube-controller-manager", "/CN=system:kube-controller-manager"),
    ("kube-scheduler", "/CN=system:kube-scheduler"),
    ("kwok", "/O=system:masters/CN=kwok-controller"),
)


_PKI_LAYOUT = "2"  # bump when the set of files changes: older directories are regenerated


def _ensure_pki(pki: Path) -> None:
    """CA, serving and client certificates and the service-account key pair (kept across restarts)."""
    marker = pki / "complete"
    if marker.is_file() and marker.read_text() == _PKI_LAYOUT:
        return
    if pki.exists():
        shutil.rmtree(pki)
    pki.mkdir(parents=True)
    pki.chmod(0o700)
    _ca_cert(pki, "ca", "/CN=crossdock-local-ca")
    # The aggregation layer's front proxy has its own CA, as in kubeadm.
    _ca_cert(pki, "front-proxy-ca", "/CN=crossdock-front-proxy-ca")
    _leaf_cert(pki, "front-proxy-client", "/CN=front-proxy-client", "clientAuth", ca="front-proxy-ca")
    sans = ["IP:127.0.0.1", f"IP:{SERVICE_IP}", "DNS:localhost", "DNS:kubernetes",
            "DNS:kubernetes.default", "DNS:kubernetes.default.svc",
            "DNS:kubernetes.default.svc.cluster.local"]
    _leaf_cert(pki, "apiserver", "/CN=kube-apiserver", "serverAuth", sans)
    for name, subject in _CLIENTS:
        _leaf_cert(pki, name, subject, "clientAuth")
    _ec_key(pki / "sa.key")
    _openssl("pkey", "-in", str(pki / "sa.key"), "-pubout", "-out", str(pki / "sa.pub"))
    marker.write_text(_PKI_LAYOUT)


def _write_kubeconfig(path: Path, server: str, pki: Path, user: str) -> None:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "crossdock-local",
                      "cluster": {"server": server, "certificate-authority": str(pki / "ca.crt")}}],
        "users": [{"name": user, "user": {"client-certificate": str(pki / f"{user}.crt"),
                                          "client-key": str(pki / f"{user}.key")}}],
        "contexts": [{"name": "crossdock-local", "context": {"cluster": "crossdock-local", "user": user}}],
        "current-context": "crossdock-local",
    }
    tmp = path.with_suffix(".tmp")
    tmp.write_text(yaml.safe_dump(config, sort_keys=False))
    tmp.chmod(0o600)
    tmp.replace(path)


# ------------------------------------------------------------------------ processes


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _proc_stat(pid: int) -> list[str] | None:
    """Fields of /proc/<pid>/stat after the command name (state first), or None."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat[stat.rindex(")") + 2:].split()


def _start_time(pid: int) -> str | None:
    """The process's start time in clock ticks since boot: with the PID, its identity."""
    fields = _proc_stat(pid)
    return fields[19] if fields else None


def _pid_alive(pid: int, exe: str, start: str | None = None) -> bool:
    """True when ``pid`` is a live (not zombie) process executing ``exe`` (and started at
    ``start``, when given, so that a reused PID is not mistaken for the component)."""
    if not Path("/proc").is_dir():
        try:
            os.kill(pid, 0)
        except OSError:
            return False
        return True
    fields = _proc_stat(pid)
    if fields is None:
        return False
    if fields[0] == "Z":
        _reap(pid)
        return False
    if start is not None and fields[19] != start:
        return False
    try:
        # /proc/<pid>/exe is set when exec commits; cmdline can be briefly empty after it.
        path = os.readlink(f"/proc/{pid}/exe")
    except OSError:
        return False
    return path.removesuffix(" (deleted)") == exe


# Components started by this process. They outlive it by design (down() stops them by
# PID from any process); the Popen objects are kept so that Python reaps them quietly.
_CHILDREN: dict[int, subprocess.Popen[bytes]] = {}


def _reap(pid: int) -> None:
    child = _CHILDREN.get(pid)
    if child is not None:
        if child.poll() is not None:
            del _CHILDREN[pid]
        return
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


def _stop_pid(pid: int, exe: str, start: str | None = None, timeout: float = 15.0,
              sig: int = signal.SIGTERM) -> None:
    """Send ``sig``; SIGKILL after ``timeout`` seconds; return once the process is gone."""
    start = start if start is not None else _start_time(pid)
    if not _pid_alive(pid, exe, start):
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        _reap(pid)
        if not _pid_alive(pid, exe, start):
            return
        time.sleep(0.1)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    for _ in range(50):
        _reap(pid)
        if not _pid_alive(pid, exe, start):
            return
        time.sleep(0.1)


@contextlib.contextmanager
def _locked(state: Path) -> Iterator[None]:
    state.mkdir(parents=True, exist_ok=True)
    with open(state / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _read_state(state: Path) -> dict[str, Any]:
    try:
        data = json.loads((state / "state.json").read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _write_state(state: Path, data: dict[str, Any]) -> None:
    tmp = state / "state.json.tmp"
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True))
    tmp.replace(state / "state.json")


def _log_tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


class _Launcher:
    """Starts components, recording each PID in state.json as soon as it exists."""

    def __init__(self, state: Path, data: dict[str, Any],
                 extra_args: Mapping[str, Sequence[str]] | None = None) -> None:
        self.state = state
        self.data = data
        self.extra_args = extra_args or {}
        self.logs = state / "log"
        self.logs.mkdir(exist_ok=True)

    def start(self, name: str, args: Sequence[str], *, append: bool = False) -> None:
        exe = str(bin_dir() / name)
        args = [*args, *self.extra_args.get(name, ())]
        log_path = self.logs / f"{name}.log"
        with open(log_path, "ab" if append else "wb") as log:
            proc = subprocess.Popen([exe, *args], stdin=subprocess.DEVNULL, stdout=log,
                                    stderr=subprocess.STDOUT, cwd=self.state, start_new_session=True)
        _CHILDREN[proc.pid] = proc
        self.data["processes"][name] = {"pid": proc.pid, "exe": exe, "log": str(log_path),
                                        "args": list(args), "start": _start_time(proc.pid)}
        _write_state(self.state, self.data)

    def check_alive(self, name: str) -> None:
        info = self.data["processes"][name]
        if not _pid_alive(info["pid"], info["exe"], info.get("start")):
            raise ControlPlaneError(f"{name} exited during start-up; last log lines:\n"
                                    f"{_log_tail(Path(info['log']))}")


# ---------------------------------------------------------------------------- HTTP


class _Api:
    """A minimal HTTPS client holding the admin certificate (no Kubernetes client needed)."""

    def __init__(self, server: str, pki: Path) -> None:
        self.server = server
        self.ctx = ssl.create_default_context(cafile=str(pki / "ca.crt"))
        self.ctx.load_cert_chain(str(pki / "admin.crt"), str(pki / "admin.key"))

    def request(self, method: str, path: str, body: Any = None, timeout: float = 10.0) -> tuple[int, Any]:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.server + path, data=data, method=method,
                                     headers={"Content-Type": "application/json",
                                              "Accept": "application/json"})
        try:
            with urllib.request.urlopen(req, context=self.ctx, timeout=timeout) as resp:
                raw = resp.read()
                code = resp.status
        except urllib.error.HTTPError as err:
            raw = err.read()
            code = err.code
        try:
            return code, json.loads(raw) if raw else None
        except ValueError:
            return code, raw.decode(errors="replace")

    def ready(self) -> bool:
        try:
            code, _ = self.request("GET", "/readyz", timeout=3.0)
        except (OSError, ssl.SSLError):
            return False
        return code == 200


def _wait(what: str, predicate: Any, timeout: float, check: Any = None, interval: float = 0.25) -> None:
    deadline = time.monotonic() + timeout
    while True:
        if check is not None:
            check()
        if predicate():
            return
        if time.monotonic() > deadline:
            raise ControlPlaneError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)


def _etcd_healthy(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2.0) as resp:
            return bool(json.loads(resp.read()).get("health") == "true")
    except (OSError, ValueError):
        return False


def _nodes_ready(api: _Api, expected: set[str]) -> bool:
    code, body = api.request("GET", "/api/v1/nodes")
    if code != 200:
        return False
    ready = set()
    for node in body.get("items", []):
        conditions = {c["type"]: c["status"] for c in node.get("status", {}).get("conditions", [])}
        taints = {t["key"] for t in node.get("spec", {}).get("taints", []) or []}
        if conditions.get("Ready") == "True" and not any(t.startswith("node.kubernetes.io/") for t in taints):
            ready.add(node["metadata"]["name"])
    return expected <= ready


# ------------------------------------------------------------------------- up/down


@dataclasses.dataclass(frozen=True)
class ControlPlaneStatus:
    state_dir: Path
    kubeconfig: Path
    server: str | None
    version: str | None
    processes: dict[str, dict[str, Any]]
    ready: bool

    @property
    def running(self) -> bool:
        """Every component alive and the API server ready."""
        return self.ready and len(self.processes) == len(COMPONENTS) and all(
            p["alive"] for p in self.processes.values())

    def to_dict(self) -> dict[str, Any]:
        return {"state_dir": str(self.state_dir), "kubeconfig": str(self.kubeconfig),
                "server": self.server, "version": self.version, "processes": self.processes,
                "ready": self.ready, "running": self.running}


def status(state_dir: str | os.PathLike[str] | None = None) -> ControlPlaneStatus:
    """What runs in ``state_dir``: PIDs, liveness and whether /readyz answers 200."""
    state = _state_dir(state_dir)
    data = _read_state(state)
    processes = {
        name: {"pid": info["pid"], "alive": _pid_alive(info["pid"], info["exe"], info.get("start")),
               "log": info.get("log")}
        for name, info in data.get("processes", {}).items()
    }
    server = data.get("server")
    ready = False
    if server:
        with contextlib.suppress(OSError, ssl.SSLError):
            ready = _Api(server, state / "pki").ready()
    return ControlPlaneStatus(state, kubeconfig_path(state), server, data.get("version"), processes, ready)


def up(state_dir: str | os.PathLike[str] | None = None, *, pools: Sequence[NodePool] = DEFAULT_POOLS,
       timeout: float = 180.0, extra_args: Mapping[str, Sequence[str]] | None = None) -> Path:
    """Start the control plane in ``state_dir`` (idempotent) and return the admin kubeconfig path.

    ``extra_args`` appends flags per component, e.g.
    ``{"kube-apiserver": ["--feature-gates=…"], "kube-scheduler": ["--v=4"]}``; they
    apply when this call starts the plane, not to one already running.

    When everything already runs it returns at once. Otherwise it stops what is
    left, starts a fresh cluster (empty etcd; certificates are kept), creates the
    fake nodes of ``pools`` and waits until they are Ready and the ``default``
    service account exists.
    """
    state = _state_dir(state_dir)
    with _locked(state):
        if status(state).running:
            return kubeconfig_path(state)
        _down(state)
        missing = _missing_binaries()
        if missing:
            raise MissingBinariesError(
                f"missing {', '.join(missing)} in {bin_dir()}; run: python -m crossdock.dev.k8s build")
        data: dict[str, Any] = {"processes": {}}
        try:
            return _up(state, pools, timeout, data, extra_args or {})
        except BaseException:
            # Stop what this call started even if state.json was lost meanwhile.
            _stop_processes(data)
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
    _ensure_pki(pki)
    etcd_dir = state / "etcd"
    if etcd_dir.exists():
        shutil.rmtree(etcd_dir)
    etcd_dir.mkdir(mode=0o700)

    ports = {name: _free_port() for name in
             ("etcd-client", "etcd-peer", "kube-apiserver", "kube-controller-manager", "kube-scheduler")}
    server = f"https://127.0.0.1:{ports['kube-apiserver']}"
    conf = state / "conf"
    conf.mkdir(exist_ok=True)
    for user in ("kube-controller-manager", "kube-scheduler", "kwok"):
        _write_kubeconfig(conf / f"{user}.kubeconfig", server, pki, user)
    _write_kubeconfig(kubeconfig_path(state), server, pki, "admin")
    stages = [yaml.safe_load_all(p.read_text()) for p in sorted(_stages_dir().glob("*.yaml"))]
    docs = [doc for docs in stages for doc in docs if doc] + list(POD_STAGES)
    (conf / "kwok.yaml").write_text(yaml.safe_dump_all(docs, sort_keys=False))

    data.update({"version": versions()["KUBERNETES_VERSION"], "server": server,
                 "ports": ports, "processes": {}, "started_at": time.time()})
    _write_state(state, data)
    launch = _Launcher(state, data, extra_args)
    etcd_url = f"http://127.0.0.1:{ports['etcd-client']}"
    peer_url = f"http://127.0.0.1:{ports['etcd-peer']}"
    launch.start("etcd", [
        "--name=crossdock", f"--data-dir={etcd_dir}",
        f"--listen-client-urls={etcd_url}", f"--advertise-client-urls={etcd_url}",
        f"--listen-peer-urls={peer_url}", f"--initial-advertise-peer-urls={peer_url}",
        f"--initial-cluster=crossdock={peer_url}", "--unsafe-no-fsync=true", "--log-level=warn",
    ])
    _wait("etcd /health", lambda: _etcd_healthy(ports["etcd-client"]), remaining(),
          lambda: launch.check_alive("etcd"))

    launch.start("kube-apiserver", [
        f"--etcd-servers={etcd_url}",
        "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1",
        f"--secure-port={ports['kube-apiserver']}",
        f"--tls-cert-file={pki / 'apiserver.crt'}", f"--tls-private-key-file={pki / 'apiserver.key'}",
        f"--client-ca-file={pki / 'ca.crt'}",
        f"--service-account-issuer={SA_ISSUER}",
        f"--service-account-key-file={pki / 'sa.pub'}",
        f"--service-account-signing-key-file={pki / 'sa.key'}",
        f"--service-cluster-ip-range={SERVICE_CIDR}",
        "--authorization-mode=Node,RBAC",
        f"--requestheader-client-ca-file={pki / 'front-proxy-ca.crt'}",
        "--requestheader-allowed-names=front-proxy-client",
        "--requestheader-username-headers=X-Remote-User",
        "--requestheader-group-headers=X-Remote-Group",
        "--requestheader-extra-headers-prefix=X-Remote-Extra-",
        f"--proxy-client-cert-file={pki / 'front-proxy-client.crt'}",
        f"--proxy-client-key-file={pki / 'front-proxy-client.key'}",
        "--endpoint-reconciler-type=none",
        "--allow-privileged=true",
        "--profiling=false",
        # Drain watches for at most 2 s on SIGTERM; otherwise connected clients keep the
        # server in graceful shutdown for --request-timeout (60 s).
        "--shutdown-watch-termination-grace-period=2s",
    ])
    api = _Api(server, pki)
    _wait("kube-apiserver /readyz", api.ready, remaining(), lambda: launch.check_alive("kube-apiserver"))

    for name, kubeconfig in (("kube-controller-manager", conf / "kube-controller-manager.kubeconfig"),
                             ("kube-scheduler", conf / "kube-scheduler.kubeconfig")):
        extra = [] if name == "kube-scheduler" else [
            "--use-service-account-credentials=true",
            f"--service-account-private-key-file={pki / 'sa.key'}",
            f"--root-ca-file={pki / 'ca.crt'}",
        ]
        launch.start(name, [
            f"--kubeconfig={kubeconfig}", f"--authentication-kubeconfig={kubeconfig}",
            f"--authorization-kubeconfig={kubeconfig}",
            "--bind-address=127.0.0.1", f"--secure-port={ports[name]}", "--leader-elect=false",
            *extra,
        ])
    launch.start("kwok", [
        f"--kubeconfig={conf / 'kwok.kubeconfig'}", f"--config={conf / 'kwok.yaml'}",
        "--manage-all-nodes=true", f"--cidr={POD_CIDR}",
        # Renew a Lease per node, as the kubelet does; without it the node lifecycle
        # controller would mark the nodes unreachable and evict their pods.
        "--node-lease-duration-seconds=40",
    ])

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
    _wait(f"{len(expected)} nodes Ready", lambda: _nodes_ready(api, expected), remaining(), all_alive, 0.5)
    _wait("service account default/default",
          lambda: api.request("GET", "/api/v1/namespaces/default/serviceaccounts/default")[0] == 200,
          remaining(), all_alive, 0.5)
    data["ready_at"] = time.time()
    _write_state(state, data)
    return kubeconfig_path(state)


def _stop_processes(data: dict[str, Any]) -> None:
    for name in reversed(COMPONENTS):
        info = data.get("processes", {}).get(name)
        if info:
            _stop_pid(int(info["pid"]), str(info["exe"]), info.get("start"))


def _unrecorded(state: Path) -> list[tuple[int, str]]:
    """Components running in ``state`` (their working directory) whose PIDs were not recorded,
    e.g. after state.json was lost; found by exact binary path and working directory."""
    proc = Path("/proc")
    if not proc.is_dir():
        return []
    exes = {str(bin_dir() / name) for name in COMPONENTS}
    where = str(state.resolve())
    found = []
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            exe = os.readlink(entry / "exe").removesuffix(" (deleted)")
            cwd = os.readlink(entry / "cwd")
        except OSError:
            continue
        if exe in exes and cwd in (where, f"{where} (deleted)"):
            found.append((int(entry.name), exe))
    return found


def _down(state: Path) -> None:
    data = _read_state(state)
    _stop_processes(data)
    for pid, exe in _unrecorded(state):
        _stop_pid(pid, exe)
    if data:
        data["processes"] = {}
        _write_state(state, data)


def down(state_dir: str | os.PathLike[str] | None = None) -> None:
    """Stop every component started in ``state_dir`` by its recorded PID (idempotent).

    Components that run in ``state_dir`` without a record (state.json lost) are
    found by their binary path and working directory and stopped too.
    """
    state = _state_dir(state_dir)
    if not state.exists():
        return
    with _locked(state):
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
    state = _state_dir(state_dir)
    with _locked(state):
        data = _read_state(state)
        info = data.get("processes", {}).get(name)
        if not info or not _pid_alive(int(info["pid"]), str(info["exe"]), info.get("start")):
            raise ControlPlaneError(f"{name} is not running in {state}")
        started = time.monotonic()
        _stop_pid(int(info["pid"]), str(info["exe"]), info.get("start"),
                  sig=signal.SIGKILL if kill else signal.SIGTERM)
        time.sleep(pause)
        launch = _Launcher(state, data)
        launch.start(name, info["args"], append=True)

        def check() -> None:
            launch.check_alive(name)

        if name == "kube-apiserver":
            _wait("kube-apiserver /readyz", _Api(data["server"], state / "pki").ready, timeout, check)
        elif name == "etcd":
            _wait("etcd /health", lambda: _etcd_healthy(data["ports"]["etcd-client"]), timeout, check)
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
    state = _state_dir(state_dir)
    was_running = status(state).running
    path = up(state, pools=pools)
    token = _session_users(state) / f"{os.getpid()}-{os.urandom(4).hex()}"
    with _locked(state):
        data = _read_state(state)
        if not was_running and "owner" not in data:
            data["owner"] = "session"
            _write_state(state, data)
        token.write_text(str(os.getpid()))
    try:
        yield path
    finally:
        with _locked(state):
            token.unlink(missing_ok=True)
            others = False
            for user in _session_users(state).iterdir():
                try:
                    pid = int(user.read_text())
                    os.kill(pid, 0)
                    others = True
                except (OSError, ValueError):
                    user.unlink(missing_ok=True)
            if not keep and not others and _read_state(state).get("owner") == "session":
                _down(state)


def _pin(state: Path) -> None:
    """Mark a running plane as the developer's: sessions leave it up."""
    with _locked(state):
        data = _read_state(state)
        data["owner"] = "cli"
        _write_state(state, data)


# ----------------------------------------------------------------------------- CLI

app = typer.Typer(help="Local Kubernetes control plane (etcd, kube-apiserver, "
                       "kube-controller-manager, kube-scheduler, kwok) on loopback.",
                  no_args_is_help=True)

_STATE_OPT = typer.Option(None, "--state-dir", help="State directory (default: $CROSSDOCK_K8S_STATE_DIR "
                                                     "or ~/.cache/crossdock/k8s/state).")


@app.command("build")
def _cli_build(force: bool = typer.Option(False, "--force", help="Rebuild even when present.")) -> None:
    """Build and cache the pinned binaries (skips what is already built)."""
    try:
        typer.echo(build(force=force))
    except ControlPlaneError as err:
        typer.echo(f"error: {err}", err=True)
        raise typer.Exit(1) from err


@app.command("up")
def _cli_up(state_dir: Path | None = _STATE_OPT,
            timeout: float = typer.Option(180.0, help="Seconds to wait for readiness.")) -> None:
    """Start the control plane (idempotent) and print the kubeconfig path."""
    started = time.monotonic()
    try:
        path = up(state_dir, timeout=timeout)
        _pin(_state_dir(state_dir))
    except ControlPlaneError as err:
        typer.echo(f"error: {err}", err=True)
        raise typer.Exit(1) from err
    typer.echo(f"ready in {time.monotonic() - started:.1f}s", err=True)
    typer.echo(path)


@app.command("down")
def _cli_down(state_dir: Path | None = _STATE_OPT) -> None:
    """Stop every component by its recorded PID (idempotent)."""
    down(state_dir)


@app.command("status")
def _cli_status(state_dir: Path | None = _STATE_OPT,
                as_json: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """Show PIDs and readiness; exit 1 unless everything runs."""
    st = status(state_dir)
    if as_json:
        typer.echo(json.dumps(st.to_dict(), indent=2))
    else:
        typer.echo(f"server:     {st.server or '-'}  ready={st.ready}")
        typer.echo(f"kubeconfig: {st.kubeconfig}")
        for name in COMPONENTS:
            info = st.processes.get(name)
            typer.echo(f"  {name:<24} " + (f"pid {info['pid']:<8} alive={info['alive']}" if info else "-"))
    raise typer.Exit(0 if st.running else 1)


@app.command("kubeconfig")
def _cli_kubeconfig(state_dir: Path | None = _STATE_OPT) -> None:
    """Print the admin kubeconfig path."""
    typer.echo(kubeconfig_path(state_dir))


def main() -> None:
    app()


if __name__ == "__main__":
    main()
