"""A plane's state directory: where it is, its lock, and ``state.json`` (ports, PIDs, owner)."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from crossdock.dev.k8s.build import cache_root


def default_state_dir() -> Path:
    """``$CROSSDOCK_K8S_STATE_DIR``, else ``<cache>/k8s/state``."""
    env = os.environ.get("CROSSDOCK_K8S_STATE_DIR")
    return Path(env) if env else cache_root() / "state"


def state_dir_of(state_dir: str | os.PathLike[str] | None) -> Path:
    return Path(state_dir) if state_dir is not None else default_state_dir()


def kubeconfig_path(state_dir: str | os.PathLike[str] | None = None) -> Path:
    """The admin kubeconfig that ``up`` writes (it may not exist yet)."""
    return state_dir_of(state_dir) / "kubeconfig"


@contextlib.contextmanager
def locked(state: Path) -> Iterator[None]:
    state.mkdir(parents=True, exist_ok=True)
    with open(state / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def read_state(state: Path) -> dict[str, Any]:
    try:
        data = json.loads((state / "state.json").read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def write_state(state: Path, data: dict[str, Any]) -> None:
    tmp = state / "state.json.tmp"
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True))
    tmp.replace(state / "state.json")
