"""One real node in the local plane: the upstream kubelet of the plane's release (built by
``scripts/k8s/build.sh --kubelet``), Debian's containerd, runc and CNI plugins, and the images of
``image.py``, so that pods really run (kwok's fake nodes run none).

``up()`` joins the running plane with the Node ``crossdock-realnode-0``, labelled and tainted
``crossdock.dev/real-node=true`` (``NoSchedule``), so only pods that tolerate it and select it
land there; ``down()`` deletes its pods and the Node, stops the kubelet and containerd and removes
what they left (mounts, the bridge, cgroups). What this machine needs, found when it was built:

- cgroup v1 (hybrid): the kubelet refuses it unless ``failCgroupV1: false``; driver ``cgroupfs``.
- containerd 1.6 has no CRI ``RuntimeConfig``: the kubelet falls back to its own cgroup driver.
- root without ``CAP_SYS_RESOURCE``: runc cannot lower ``oom_score_adj`` (the sandbox's -998),
  so containerd runs with ``restrict_oom_score_adj``.
- kwok (``--manage-all-nodes``) takes over a node whose Lease it holds first: ``up`` writes the
  node's Lease in the kubelet's name before the kubelet registers, so kwok leaves it alone.
- the node IP may not be loopback: it is the pod bridge's address (``10.88.77.1``, no uplink);
  the kubelet's own server listens on 127.0.0.1. Pods reach loopback services with hostNetwork.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from crossdock.dev.k8s import image
from crossdock.dev.k8s.api import Api, wait
from crossdock.dev.k8s.build import KUBELET, bin_dir, build, cache_root, versions
from crossdock.dev.k8s.errors import ControlPlaneError
from crossdock.dev.k8s.processes import pid_alive, stop_pid
from crossdock.dev.k8s.state import kubeconfig_path, locked, read_state, state_dir_of
from crossdock.dev.proc import log_tail, spawn, start_time

NAME = "crossdock-realnode-0"
LABEL = "crossdock.dev/real-node"
TAINT = {"key": LABEL, "value": "true", "effect": "NoSchedule"}
TOLERATION = {"key": LABEL, "operator": "Exists", "effect": "NoSchedule"}
SELECTOR = {LABEL: "true"}
RUN_DIR = Path("/run/crossdock-realnode")
"""Sockets, containerd's state, the kubelet's root, pod logs, IPAM: gone after ``down``."""
BRIDGE, SUBNET, NODE_IP = "cdrn0", "10.88.77.0/24", "10.88.77.1"
LEASE_SECONDS = 40
DEBIAN_TOOLS = {"containerd": "containerd", "ctr": "containerd", "runc": "runc",
                "/usr/lib/cni/bridge": "containernetworking-plugins", "mmdebstrap": "mmdebstrap",
                "/bin/busybox": "busybox-static"}


@dataclass(frozen=True)
class RealNode:
    name: str
    image: str
    """The crossdock image of this checkout, present on the node (no registry, no pull)."""
    kubeconfig: Path


def node_cache() -> Path:
    """containerd's content and snapshots: kept across ``down`` (importing the base again is 15 s)."""
    return cache_root() / "realnode"


def image_cache() -> Path:
    """The image archives, beside the release's binaries (cached with them in CI)."""
    return bin_dir().parent / "realnode-images"


def _containerd_config() -> str:
    cri = 'plugins."io.containerd.grpc.v1.cri"'
    return f"""version = 2
root = "{node_cache() / 'containerd'}"
state = "{RUN_DIR / 'containerd'}"
[grpc]
  address = "{RUN_DIR / 'containerd.sock'}"
[ttrpc]
  address = "{RUN_DIR / 'containerd.ttrpc.sock'}"
[{cri}]
  sandbox_image = "{image.PAUSE_IMAGE}"
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  restrict_oom_score_adj = true
  [{cri}.containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [{cri}.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [{cri}.containerd.runtimes.runc.options]
        SystemdCgroup = false
  [{cri}.cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "{RUN_DIR / 'cni'}"
"""


def _cni_config() -> str:
    return json.dumps({"cniVersion": "1.0.0", "name": "crossdock-realnode", "plugins": [
        {"type": "bridge", "bridge": BRIDGE, "isGateway": True, "ipMasq": False,
         "ipam": {"type": "host-local", "ranges": [[{"subnet": SUBNET}]], "dataDir": str(RUN_DIR / "ipam")}},
        {"type": "loopback"}]})


def _kubelet_config() -> str:
    return json.dumps({
        "apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
        "failCgroupV1": False, "cgroupDriver": "cgroupfs",
        "containerRuntimeEndpoint": f"unix://{RUN_DIR / 'containerd.sock'}",
        "address": "127.0.0.1", "port": 10250, "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1", "healthzPort": 10248,
        "authentication": {"anonymous": {"enabled": False}, "webhook": {"enabled": False}},
        "authorization": {"mode": "AlwaysAllow"},
        "registerWithTaints": [TAINT], "failSwapOn": False, "maxPods": 20,
        "podLogsDir": str(RUN_DIR / "pod-logs"), "nodeLeaseDurationSeconds": LEASE_SECONDS,
        # a shared development disk: never evict or collect images because other work fills it
        "evictionHard": {"memory.available": "100Mi", "nodefs.available": "1%", "imagefs.available": "1%"},
        "imageGCHighThresholdPercent": 100, "imageGCLowThresholdPercent": 99,
    })


def _preflight() -> None:
    missing = sorted({pkg for tool, pkg in DEBIAN_TOOLS.items()
                      if not (Path(tool).exists() if tool.startswith("/") else shutil.which(tool))})
    if missing:
        raise ControlPlaneError(f"the real node needs Debian packages: apt-get install {' '.join(missing)}")
    if os.geteuid() != 0:
        raise ControlPlaneError("the real node runs containerd and the kubelet as root: run as root")


def _plane_api(state: Path) -> Api:
    server = read_state(state).get("server")
    api = Api(server, state / "pki") if server else None
    if api is None or not api.ready():
        raise ControlPlaneError(f"no running plane in {state}: python -m crossdock.dev.k8s up first")
    return api


def _records() -> dict[str, Any]:
    with contextlib.suppress(OSError, ValueError):
        return json.loads((RUN_DIR / "node.json").read_text())
    return {}


def _alive(name: str) -> bool:
    info = _records().get(name)
    return bool(info) and pid_alive(info["pid"], info["exe"], info.get("start"))


_CHILDREN: dict[str, subprocess.Popen[bytes]] = {}
"""containerd and the kubelet when this process started them: they outlive it by design (``down``
stops them by PID from any process); kept so that Python reaps them quietly."""


def _start(name: str, argv: list[str]) -> None:
    log = RUN_DIR / f"{name}.log"
    proc = _CHILDREN[name] = spawn(argv, log)
    records = _records()
    records[name] = {"pid": proc.pid, "exe": os.path.realpath(argv[0]), "start": start_time(proc.pid), "log": str(log)}
    (RUN_DIR / "node.json").write_text(json.dumps(records))


def _died(name: str) -> None:
    if not _alive(name):
        raise ControlPlaneError(f"{name} exited: {log_tail(RUN_DIR / f'{name}.log', 8)}")


def _ctr(*args: str, timeout: float = 300) -> str:
    proc = subprocess.run(["ctr", "--address", str(RUN_DIR / "containerd.sock"), "-n", "k8s.io", *args],
                          capture_output=True, text=True, timeout=timeout, check=False)
    if proc.returncode != 0:
        raise ControlPlaneError(f"ctr {' '.join(args[:2])} failed: {proc.stderr.strip()[-300:]}")
    return proc.stdout


def _import_images() -> str:
    cache = image_cache()
    present = set(_ctr("images", "ls", "-q").split())
    pause, pause_tar = image.pause_archive(cache)
    if pause not in present:
        _ctr("images", "import", str(pause_tar))
    name, tar = image.crossdock_archive(cache, present=_ctr("content", "ls", "-q").split())
    if name not in present:
        _ctr("images", "import", str(tar))
        for old in present:  # earlier checkouts' images: their own layers go with them
            if old.startswith(image.IMAGE_REPO + ":"):
                _ctr("images", "rm", old)
    return name


def _write_lease(api: Api) -> None:
    """The node's Lease held in the kubelet's name before it registers: kwok only takes over a node
    whose Lease it can hold, and the kubelet renews this one every 10 s (with its own 40 s duration;
    this first one lasts 5 minutes, however long the kubelet takes to start)."""
    now = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": NAME, "namespace": "kube-node-lease"},
            "spec": {"holderIdentity": NAME, "leaseDurationSeconds": 300, "renewTime": now}}
    path = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases"
    code, _ = api.request("POST", path, body)
    if code == 409:
        code, _ = api.request("PUT", f"{path}/{NAME}", body)
    if code not in (200, 201):
        raise ControlPlaneError(f"cannot write the Lease of {NAME} (HTTP {code})")


def _node_ready(api: Api) -> bool:
    code, node = api.request("GET", f"/api/v1/nodes/{NAME}")
    code_l, lease = api.request("GET", f"/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{NAME}")
    if code != 200 or code_l != 200:
        return False
    conditions = {c["type"]: c for c in (node.get("status") or {}).get("conditions") or []}
    ready = conditions.get("Ready", {})
    return (ready.get("status") == "True" and ready.get("reason") == "KubeletReady"
            and node["status"].get("nodeInfo", {}).get("kubeletVersion") == versions()["KUBERNETES_VERSION"]
            and lease.get("spec", {}).get("holderIdentity") == NAME)


def prepare() -> None:
    """What ``up`` needs that takes minutes the first time, cached: the kubelet and the images'
    archives (the base's ``mmdebstrap`` and pip). The checkout's own layer is made at ``up``."""
    _preflight()
    build(kubelet=True)
    image.pause_archive(image_cache())
    image.base_layer(image_cache())


def up(state_dir: str | os.PathLike[str] | None = None, *, timeout: float = 180.0) -> RealNode:
    """Join the running plane with the real node (idempotent); build the kubelet and the images
    when they are missing (minutes the first time)."""
    state = state_dir_of(state_dir)
    api = _plane_api(state)
    prepare()
    RUN_DIR.mkdir(parents=True, exist_ok=True)
    with locked(RUN_DIR):
        for sub in ("cni", "kubelet", "pod-logs"):
            (RUN_DIR / sub).mkdir(exist_ok=True)
        (RUN_DIR / "containerd.toml").write_text(_containerd_config())
        (RUN_DIR / "cni" / "10-crossdock.conflist").write_text(_cni_config())
        (RUN_DIR / "kubelet.json").write_text(_kubelet_config())
        _bridge_up()
        if not _alive("containerd"):
            _start("containerd", [shutil.which("containerd") or "containerd", "--config",
                                  str(RUN_DIR / "containerd.toml")])
        wait("containerd", lambda: subprocess.run(["ctr", "--address", str(RUN_DIR / "containerd.sock"), "version"],
                                                  capture_output=True, check=False).returncode == 0,
             30, check=lambda: _died("containerd"))
        name = _import_images()
        if not _alive("kubelet"):
            _write_lease(api)
            _start("kubelet", [str(bin_dir() / KUBELET), f"--config={RUN_DIR / 'kubelet.json'}",
                               f"--kubeconfig={kubeconfig_path(state)}", f"--root-dir={RUN_DIR / 'kubelet'}",
                               f"--cert-dir={RUN_DIR / 'kubelet' / 'pki'}", f"--hostname-override={NAME}",
                               f"--node-ip={NODE_IP}", f"--node-labels={LABEL}=true", "--v=1"])
        wait(f"node {NAME} Ready (its kubelet's)", lambda: _node_ready(api), timeout, check=lambda: _died("kubelet"))
    return RealNode(NAME, name, kubeconfig_path(state))


def _bridge_up() -> None:
    """The pod bridge, with the node's address, before the kubelet needs a node IP."""
    if not Path(f"/sys/class/net/{BRIDGE}").exists():
        subprocess.run(["ip", "link", "add", BRIDGE, "type", "bridge"], check=True)
    addrs = subprocess.run(["ip", "-o", "addr", "show", "dev", BRIDGE], capture_output=True, text=True, check=True)
    if f" {NODE_IP}/" not in addrs.stdout:
        subprocess.run(["ip", "addr", "add", f"{NODE_IP}/24", "dev", BRIDGE], check=True)
    subprocess.run(["ip", "link", "set", BRIDGE, "up"], check=True)


def status() -> dict[str, bool]:
    return {"containerd": _alive("containerd"), "kubelet": _alive("kubelet")}


def down(state_dir: str | os.PathLike[str] | None = None, *, timeout: float = 60.0) -> None:
    """Delete the node's pods (through its kubelet) and the Node, stop the kubelet and containerd,
    and remove what they left behind. Idempotent."""
    state = state_dir_of(state_dir)
    server = read_state(state).get("server")
    api = Api(server, state / "pki") if server else None
    if api is not None and not api.ready():
        api = None
    if not RUN_DIR.exists() and api is None:
        return
    RUN_DIR.mkdir(parents=True, exist_ok=True)
    with locked(RUN_DIR):
        if api is not None and _alive("kubelet"):
            _delete_pods(api, timeout)
        records = _records()
        for name in ("kubelet", "containerd"):
            if name == "containerd" and _alive("containerd"):
                _remove_containers()
            info = records.get(name)
            if info:
                stop_pid(info["pid"], info["exe"], info.get("start"))
            child = _CHILDREN.pop(name, None)
            if child is not None:
                child.poll()
        if api is not None:
            api.request("DELETE", f"/api/v1/nodes/{NAME}")
            api.request("DELETE", f"/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{NAME}")
        _unmount_under(RUN_DIR)
        _unmount_netns()
        subprocess.run(["ip", "link", "del", BRIDGE], capture_output=True, check=False)
        _remove_cgroups()
        _remove_device_plugin_dir()
    shutil.rmtree(RUN_DIR, ignore_errors=True)


def _remove_device_plugin_dir() -> None:
    """The kubelet's device-plugin socket lives at a fixed path whatever its root: remove it, and
    the directories when nothing else is in them."""
    plugins = Path("/var/lib/kubelet/device-plugins")
    for leftover in ("kubelet.sock", "kubelet_internal_checkpoint"):
        with contextlib.suppress(OSError):
            (plugins / leftover).unlink()
    for d in (plugins, plugins.parent):
        with contextlib.suppress(OSError):
            d.rmdir()


def _delete_pods(api: Api, timeout: float) -> None:
    path = f"/api/v1/pods?fieldSelector=spec.nodeName%3D{NAME}"

    def pods() -> list[dict[str, Any]]:
        code, body = api.request("GET", path)
        return body.get("items", []) if code == 200 else []

    for pod in pods():
        meta = pod["metadata"]
        api.request("DELETE", f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}", {"gracePeriodSeconds": 1})
    deadline = time.monotonic() + timeout
    while pods() and time.monotonic() < deadline:
        time.sleep(0.5)


def _remove_containers() -> None:
    """What the kubelet did not tear down: kill and delete every task and container."""
    with contextlib.suppress(ControlPlaneError, subprocess.TimeoutExpired):
        for cid in _ctr("tasks", "ls", "-q", timeout=30).split():
            with contextlib.suppress(ControlPlaneError):
                _ctr("tasks", "kill", "-s", "SIGKILL", cid, timeout=30)
                time.sleep(0.2)
                _ctr("tasks", "delete", "-f", cid, timeout=30)
        for cid in _ctr("containers", "ls", "-q", timeout=30).split():
            with contextlib.suppress(ControlPlaneError):
                _ctr("containers", "delete", cid, timeout=30)


def _mounts() -> list[str]:
    with open("/proc/self/mountinfo") as f:
        return [line.split()[4] for line in f]


def _unmount_under(root: Path) -> None:
    """Every mount at or below ``root``, deepest first (the kubelet bind-mounts its root onto itself)."""
    prefix = str(root) + "/"
    for point in sorted((p for p in _mounts() if p.startswith(prefix) or p == str(root)), key=len, reverse=True):
        subprocess.run(["umount", "-l", point], capture_output=True, check=False)


def _unmount_netns() -> None:
    """The pod network namespaces containerd pinned (``/run/netns/cni-…``): only its CNI uses them."""
    for point in _mounts():
        if point.startswith("/run/netns/cni-"):
            subprocess.run(["umount", point], capture_output=True, check=False)
            with contextlib.suppress(OSError):
                os.unlink(point)


def _remove_cgroups() -> None:
    """The kubelet's ``kubepods`` hierarchy in every cgroup v1 controller (deepest first)."""
    for root in Path("/sys/fs/cgroup").glob("*/kubepods"):
        for d in sorted((p for p in root.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True):
            with contextlib.suppress(OSError):
                d.rmdir()
        with contextlib.suppress(OSError):
            root.rmdir()
