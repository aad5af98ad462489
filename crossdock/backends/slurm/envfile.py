"""Env files: ``KEY=value`` lines naming a cluster (``SLURM_CONF``, ``SLURMRESTD_URL``…), and
where the local development cluster (``crossdock dev slurm up``) keeps its own.

The backend reads the local cluster's file when nothing else names a cluster, so its location
lives here, in production code; ``crossdock.dev.slurm`` takes it from here.
"""

from __future__ import annotations

import os
from pathlib import Path

ENV_FILE_NAME = "env"
"""The env file's name inside a local cluster's state directory."""


def local_cluster_dir() -> Path:
    """The local cluster's default state directory: ``$CROSSDOCK_STATE_DIR/slurm``, else
    ``~/.local/state/crossdock/slurm``."""
    base = os.environ.get("CROSSDOCK_STATE_DIR")
    if base:
        return Path(base) / "slurm"
    return Path.home() / ".local" / "state" / "crossdock" / "slurm"


def local_env_file() -> Path:
    """The env file of the local cluster in its default state directory (it may not exist)."""
    return local_cluster_dir().resolve() / ENV_FILE_NAME


def parse_env(text: str) -> dict[str, str]:
    """``KEY=value`` lines as a dict; lines without ``=`` are skipped."""
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)


def read_env_file(path: Path) -> dict[str, str]:
    return parse_env(path.read_text())
