"""The binaries: pinned releases, where they are cached, and building them with
``scripts/k8s/build.sh``."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from crossdock.dev.k8s.errors import ControlPlaneError

SCRIPTS_DIR = Path(__file__).resolve().parents[3] / "scripts" / "k8s"
BUILD_SCRIPT = SCRIPTS_DIR / "build.sh"
VERSIONS_FILE = SCRIPTS_DIR / "versions.env"

# Start order; down() stops them in reverse.
COMPONENTS = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok")
ADDONS = ("karpenter",)
"""Started after the plane, recorded apart (state.json ``addons``): the plane runs without them."""
TOOLS = ("descheduler",)
"""Run on demand against the plane, never by ``up`` (the upstream descheduler: ``descheduler.py``)."""
BINARIES = COMPONENTS + ADDONS + TOOLS
KUBELET = "kubelet"
"""Built only on request (``build(kubelet=True)``): the optional real node (``realnode.py``)."""


def versions() -> dict[str, str]:
    """The pinned releases (``KUBERNETES_VERSION``, ``ETCD_VERSION``, ``KWOK_VERSION``, ``KARPENTER_VERSION``,
    ``DESCHEDULER_VERSION``)."""
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


def stages_dir() -> Path:
    """The upstream kwok Stages of the pinned release, copied there by build.sh."""
    return bin_dir().parent / "kwok-stages"


def missing_binaries() -> list[str]:
    bins = bin_dir()
    missing = [b for b in BINARIES if not os.access(bins / b, os.X_OK)]
    if not (stages_dir() / "pod-ready.yaml").is_file():
        missing.append("kwok-stages")
    if not (bin_dir().parent / "karpenter-crds" / "karpenter.sh_nodeclaims.yaml").is_file():
        missing.append("karpenter-crds")
    # "+loopback": built with scripts/k8s/build.sh's overlay that binds its servers to 127.0.0.1
    stamp, wanted = bins / "karpenter.version", versions()["KARPENTER_VERSION"] + "+loopback"
    if "karpenter" not in missing and (not stamp.is_file() or stamp.read_text().strip() != wanted):
        missing.append(f"karpenter {wanted}")
    stamp, wanted = bins / "descheduler.version", versions()["DESCHEDULER_VERSION"]
    if "descheduler" not in missing and (not stamp.is_file() or stamp.read_text().strip() != wanted):
        missing.append(f"descheduler {wanted}")
    return missing


def build(*, force: bool = False, kubelet: bool = False) -> Path:
    """Build and cache the binaries of the pinned release; skip what is present. ``kubelet``: the
    kubelet of the same release too (the real node's)."""
    has_kubelet = os.access(bin_dir() / KUBELET, os.X_OK)
    if not force and not missing_binaries() and (has_kubelet or not kubelet):
        return bin_dir()
    if not BUILD_SCRIPT.is_file():
        raise ControlPlaneError(f"{BUILD_SCRIPT} not found: building needs a source checkout")
    env = dict(os.environ)
    if shutil.which("go") is None and Path("/usr/local/go/bin/go").exists():
        env["PATH"] = env.get("PATH", "") + os.pathsep + "/usr/local/go/bin"
    argv = ["bash", str(BUILD_SCRIPT)] + (["--force"] if force else []) + (["--kubelet"] if kubelet else [])
    try:
        subprocess.run(argv, check=True, env=env)
    except (OSError, subprocess.CalledProcessError) as err:
        raise ControlPlaneError(f"{BUILD_SCRIPT} failed: {err}") from err
    missing = missing_binaries() + ([KUBELET] if kubelet and not os.access(bin_dir() / KUBELET, os.X_OK) else [])
    if missing:
        raise ControlPlaneError(f"build finished but {missing} are missing in {bin_dir()}")
    return bin_dir()
