"""helm, built from its Go module at the release pinned in ``scripts/helm/build.sh`` and cached in
``${CROSSDOCK_CACHE:-~/.cache/crossdock}/helm/<version>/bin/helm`` (as the Kubernetes components
are): what the chart test (deploy/helm/crossdock) renders and installs with."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

BUILD_SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "helm" / "build.sh"


class HelmUnavailable(RuntimeError):
    pass


def binary(build: bool = True) -> Path:
    """The cached helm; built first when missing and ``build`` (minutes, once per machine)."""
    if not BUILD_SCRIPT.is_file():
        raise HelmUnavailable(f"{BUILD_SCRIPT} not found: building helm needs a source checkout")
    env = dict(os.environ)
    if shutil.which("go") is None and Path("/usr/local/go/bin/go").exists():
        env["PATH"] = env.get("PATH", "") + os.pathsep + "/usr/local/go/bin"
    version = subprocess.run(["bash", str(BUILD_SCRIPT), "--version"], capture_output=True, text=True,
                             check=True).stdout.strip()
    base = Path(os.environ.get("CROSSDOCK_CACHE") or Path.home() / ".cache" / "crossdock")
    path = base / "helm" / version / "bin" / "helm"
    if os.access(path, os.X_OK):
        return path
    if not build:
        raise HelmUnavailable(f"helm {version} is not built ({path}); run bash {BUILD_SCRIPT}")
    try:
        subprocess.run(["bash", str(BUILD_SCRIPT)], check=True, env=env, stdout=subprocess.DEVNULL)
    except (OSError, subprocess.CalledProcessError) as err:
        raise HelmUnavailable(f"{BUILD_SCRIPT} failed: {err}") from err
    if not os.access(path, os.X_OK):
        raise HelmUnavailable(f"{BUILD_SCRIPT} finished but {path} is missing")
    return path
