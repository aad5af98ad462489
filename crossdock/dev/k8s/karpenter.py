"""Karpenter beside the plane: its kwok cloud provider as a process on loopback, its CRDs, and the
instance types it offers.

``up`` installs the CRDs the build copied from the pinned release (NodePool, NodeClaim,
NodeOverlay, CapacityBuffer, KWOKNodeClass), writes the instance-types file and starts the
controller with the admin kubeconfig, leader election off and its metrics and health ports
picked free (Karpenter binds them on every interface: ``:<port>``; nothing else listens there).
It is recorded in state.json under ``addons``, apart from the five components, so that a plane
started by an older checkout still reads as running.

The kwok provider launches only instance types from its file, and a node's allocatable is its
instance type's capacity less a fixed overhead; ``INSTANCE_TEMPLATES`` lists the node templates
it offers, each written with :func:`crossdock.backends.kubernetes.karpenter.instance_type` so that
a pool whose ``node_template`` is one of them gets nodes of exactly that shape.
``CROSSDOCK_KARPENTER_TEMPLATES`` (a JSON list of node templates) replaces the list.
"""

from __future__ import annotations

import json
import os
import urllib.request
from pathlib import Path
from typing import Any

import yaml

from crossdock.backends.kubernetes.karpenter import instance_type
from crossdock.dev.k8s.api import Api, wait
from crossdock.dev.k8s.build import bin_dir
from crossdock.dev.k8s.errors import ControlPlaneError, MissingBinariesError
from crossdock.dev.k8s.processes import Launcher, pid_alive, stop_pid, unrecorded
from crossdock.dev.k8s.state import kubeconfig_path
from crossdock.dev.proc import free_port
from crossdock.queue.config import NodeTemplate

NAME = "karpenter"
CRD_PATH = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"

INSTANCE_TEMPLATES: tuple[NodeTemplate, ...] = (
    NodeTemplate(cpus=4, memory_mib=16384),
    NodeTemplate(cpus=8, memory_mib=32768),
    NodeTemplate(cpus=16, memory_mib=65536),
    NodeTemplate(cpus=32, memory_mib=131072),
    NodeTemplate(cpus=64, memory_mib=262144),
    NodeTemplate(cpus=48, memory_mib=196608, gpus=4, gpu_model="L4"),
    NodeTemplate(cpus=96, memory_mib=1024000, gpus=8, gpu_model="A100"),
)


def crds_dir() -> Path:
    """The CRDs of the pinned release, copied there by build.sh."""
    return bin_dir().parent / "karpenter-crds"


def templates() -> list[NodeTemplate]:
    raw = os.environ.get("CROSSDOCK_KARPENTER_TEMPLATES")
    if not raw:
        return list(INSTANCE_TEMPLATES)
    try:
        return [NodeTemplate.model_validate(t) for t in json.loads(raw)]
    except ValueError as err:
        raise ControlPlaneError(f"CROSSDOCK_KARPENTER_TEMPLATES: {err}; give a JSON list of node templates,"
                                ' e.g. [{"cpus": 8, "memory_mib": 32768}]') from err


def instance_types_json(node_templates: list[NodeTemplate]) -> str:
    return json.dumps([instance_type(t) for t in node_templates], indent=1)


def install_crds(api: Api, timeout: float) -> None:
    """Create (or update) each CRD and wait until every one is Established."""
    names = []
    for path in sorted(crds_dir().glob("*.yaml")):
        crd = yaml.safe_load(path.read_text())
        name = crd["metadata"]["name"]
        names.append(name)
        code, body = api.request("POST", CRD_PATH, crd)
        if code == 409:
            code, current = api.request("GET", f"{CRD_PATH}/{name}")
            if code == 200:
                crd["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
                code, body = api.request("PUT", f"{CRD_PATH}/{name}", crd)
        if code not in (200, 201):
            raise ControlPlaneError(f"installing CRD {name}: {code} {body}")

    def established() -> bool:
        for name in names:
            code, body = api.request("GET", f"{CRD_PATH}/{name}")
            # a CRD just created may answer with no status yet, or with its conditions null
            status = ((body or {}).get("status") or {}) if code == 200 else {}
            conds = {c["type"]: c["status"] for c in status.get("conditions") or []}
            if conds.get("Established") != "True":
                return False
        return True

    wait("Karpenter's CRDs Established", established, timeout)


def env(state: Path, ports: dict[str, int], instance_types: Path) -> dict[str, str]:
    return {
        **{k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "TZ")},
        "KUBECONFIG": str(kubeconfig_path(state)),
        "DISABLE_LEADER_ELECTION": "true",
        "METRICS_PORT": str(ports["karpenter-metrics"]),
        "HEALTH_PROBE_PORT": str(ports["karpenter-health"]),
        "INSTANCE_TYPES_FILE_PATH": str(instance_types),
        "LOG_LEVEL": "info",
    }


def _healthy(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2.0) as resp:
            return resp.status == 200
    except OSError:
        return False


def alive(data: dict[str, Any]) -> bool:
    info = data.get("addons", {}).get(NAME)
    return bool(info) and pid_alive(int(info["pid"]), str(info["exe"]), info.get("start"))


def ensure(state: Path, data: dict[str, Any], api: Api, timeout: float) -> None:
    """Start Karpenter against the running plane unless it already runs (``data``: state.json)."""
    if alive(data):
        return
    exe = str(bin_dir() / NAME)
    if not os.access(exe, os.X_OK) or not crds_dir().is_dir():
        raise MissingBinariesError(f"missing karpenter in {bin_dir()}; run: python -m crossdock.dev.k8s build")
    for pid, found in unrecorded(state):  # one left by a plane restarted from a checkout without add-ons
        if found == exe:
            stop_pid(pid, found)
    install_crds(api, timeout)
    instance_types = state / "conf" / "karpenter-instance-types.json"
    instance_types.write_text(instance_types_json(templates()))
    ports = {"karpenter-metrics": free_port(), "karpenter-health": free_port()}
    data.setdefault("ports", {}).update(ports)
    launch = Launcher(state, data)
    launch.start(NAME, [], append=True, env=env(state, ports, instance_types), section="addons")
    wait("karpenter /readyz", lambda: _healthy(ports["karpenter-health"]), timeout,
         lambda: launch.check_alive(NAME, "addons"), 0.5)
