"""Slurm backend: one ``SlurmBackend`` over a driver (``CliDriver`` or ``RestDriver``).

``from_config(config, store)`` reads the environment:

- ``CROSSDOCK_SLURM_DRIVER``: ``cli`` (default), ``rest`` (slurmrestd, JWT over TCP) or
  ``rest-unix`` (slurmrestd unix socket, local auth: jobs run as slurmrestd's user);
- ``SLURM_CONF`` for the CLI; ``SLURMRESTD_URL`` + ``SLURM_LOCAL_JWT`` (+ ``SLURM_LOCAL_USER``,
  default root) or ``SLURMRESTD_SOCKET`` for REST;
- ``CROSSDOCK_SLURM_ENV``: a file of ``KEY=value`` lines (as ``crossdock dev slurm up`` writes)
  read first. Without it and without ``SLURM_CONF``, the local dev cluster's file is used when
  it exists;
- ``CROSSDOCK_SLURM_PREEMPT``: ``cancel`` (default; crossdock requeues) or ``requeue``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from crossdock.backends.slurm.backend import ClusterView, JobStatus, SlurmBackend
from crossdock.backends.slurm.cli import CliDriver
from crossdock.backends.slurm.driver import (
    SlurmDriver,
    SlurmError,
    SlurmUnavailable,
    SubmitRejected,
    SubmitRequest,
    Unsupported,
)
from crossdock.backends.slurm.envfile import local_env_file, read_env_file
from crossdock.backends.slurm.rest import RestDriver
from crossdock.backends.slurm.states import SLURM_STATES, decode_wait_status, translate
from crossdock.queue.config import ClusterConfig

__all__ = [
    "SLURM_STATES", "CliDriver", "ClusterView", "JobStatus", "RestDriver", "SlurmBackend", "SlurmDriver",
    "SlurmError", "SlurmUnavailable", "SubmitRejected", "SubmitRequest", "Unsupported", "decode_wait_status",
    "from_config", "slurm_env", "translate",
]


def slurm_env(environ: dict[str, str] | None = None) -> dict[str, str]:
    """The environment the drivers need, with the env file (if any) underneath ``environ``."""
    env = dict(os.environ if environ is None else environ)
    path = env.get("CROSSDOCK_SLURM_ENV")
    if path:
        return {**read_env_file(Path(path)), **env}
    if "SLURM_CONF" not in env:
        local_file = local_env_file()
        if local_file.exists():
            return {**read_env_file(local_file), **env}
    return env


def from_config(config: ClusterConfig | None, store: Any = None, **overrides: Any) -> SlurmBackend:
    env = slurm_env()
    kwargs: dict[str, Any] = {"preempt_policy": env.get("CROSSDOCK_SLURM_PREEMPT", "cancel")}
    kwargs.update(overrides)
    return SlurmBackend.from_env(env, driver=env.get("CROSSDOCK_SLURM_DRIVER", "cli"), config=config, store=store,
                                 **kwargs)
