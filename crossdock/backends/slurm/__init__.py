"""Slurm backend: one ``SlurmBackend`` over a driver (``CliDriver`` or ``RestDriver``).

``from_config(config, store)`` reads the environment:

- ``CROSSDOCK_SLURM_DRIVER``: ``cli`` (default), ``rest`` (slurmrestd, JWT over TCP) or
  ``rest-unix`` (slurmrestd unix socket, local auth: a root service submits other users' jobs through
  slurmrestd run as the owner, :mod:`owner_restd`; otherwise jobs run as slurmrestd's user);
- ``SLURM_CONF`` for the CLI; ``SLURMRESTD_URL`` + ``SLURM_LOCAL_JWT`` (+ ``SLURM_LOCAL_USER``,
  default root) or ``SLURMRESTD_SOCKET`` for REST;
- ``CROSSDOCK_SLURM_ENV``: a file of ``KEY=value`` lines (as ``crossdock dev slurm up`` writes)
  read first. Without it and without ``SLURM_CONF``, the local dev cluster's file is used when
  it exists;
- ``CROSSDOCK_SLURM_PREEMPT``: how a preempted job is stopped at the end of its grace period:
  ``cancel`` (default, ``scancel``) or ``requeue`` (``scontrol requeue``, then crossdock cancels
  the requeued Slurm job). Either way crossdock requeues the job as a new attempt.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, ClassVar, Literal, Mapping

from pydantic import BaseModel, ConfigDict, ValidationError

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
from crossdock.queue.ports import StopRequests, settings_error

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


CAPABILITIES = SlurmBackend.capabilities


class SlurmSettings(BaseModel):
    """The Slurm backend's settings, from the environment (see the module docstring)."""

    model_config = ConfigDict(extra="forbid")
    driver: Literal["cli", "rest", "rest-unix"] = "cli"
    preempt: Literal["cancel", "requeue"] = "cancel"

    ENV: ClassVar[dict[str, str]] = {"driver": "CROSSDOCK_SLURM_DRIVER", "preempt": "CROSSDOCK_SLURM_PREEMPT"}

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> "SlurmSettings":
        try:
            return cls.model_validate({f: env[var] for f, var in cls.ENV.items() if var in env})
        except ValidationError as exc:
            raise settings_error(exc, cls.ENV) from None


def from_config(config: ClusterConfig | None, store: StopRequests | None = None,
                environ: Mapping[str, str] | None = None,
                **overrides: Any) -> SlurmBackend:
    env = slurm_env(None if environ is None else dict(environ))
    settings = SlurmSettings.from_env(env)
    kwargs: dict[str, Any] = {"preempt_policy": settings.preempt}
    kwargs.update(overrides)
    return SlurmBackend.from_env(env, driver=settings.driver, config=config, store=store, **kwargs)


def create(ctx: Any) -> SlurmBackend:
    # the tags carry the prefix of the store this backend serves, not whatever the process's
    # environment says later (a process may hold two installations' runtimes)
    return from_config(ctx.config, ctx.store, ctx.environ, prefix=ctx.child_env.get("CROSSDOCK_PREFIX"),
                       installation=ctx.store.installation)
