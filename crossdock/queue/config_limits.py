"""The ``limits:`` section of the admin config (``crossdock.queue.config`` holds it): how much one
user may send and hold, so that nobody starves the service. Names and defaults are Slurm's where
Slurm has one (``max_script_size``, ``MaxSubmitJobs``); an array's size is Slurm's
``MaxArraySize``, kept where it always was (``scheduler.max_array_size``).

Every refusal names the limit's key here (``limits.max_script_size``), so that a user knows what
to shrink and an admin what to raise.
"""

from __future__ import annotations

from pydantic import Field

from crossdock.queue.config_base import MAX_COUNT, YEAR_SECONDS, _Cfg
from crossdock.queue.models import MAX_SCRIPT_BYTES

MIB = 1024 * 1024


class Limits(_Cfg):
    max_script_size: int = Field(4 * MIB, ge=1, le=MAX_SCRIPT_BYTES)
    """Bytes of a batch script (Slurm's ``max_script_size``, 4 MiB by default)."""
    max_submit_jobs: int = Field(10_000, ge=1, le=MAX_COUNT)
    """Jobs one user may have pending or running at once, each array task counted (Slurm's
    ``MaxSubmitJobs``; 10,000 as Slurm's ``MaxJobCount`` default). A submission that would go
    over is refused whole."""
    max_env_vars: int = Field(4096, ge=1, le=MAX_COUNT)
    """Variables in a job's stored environment."""
    max_env_bytes: int = Field(1 * MIB, ge=1, le=1024 * MIB)
    """Bytes of a job's stored environment (``NAME=value`` each); exec's own ceiling for arguments
    and environment together is ARG_MAX (2 MiB on Linux with an 8 MiB stack)."""
    max_request_bytes: int = Field(16 * MIB, ge=64 * 1024, le=1024 * MIB)
    """Bytes of one request: a line on the multi-user socket, a REST body (a Python job's
    arguments travel inside it: pass large data by path)."""
    max_connections_per_user: int = Field(32, ge=1, le=MAX_COUNT)
    """Open connections to the multi-user socket per uid; each is one thread of the service."""
    max_connections: int = Field(512, ge=1, le=MAX_COUNT)
    """Open connections to the multi-user socket in all."""
    idle_timeout_s: float = Field(60, gt=0, le=YEAR_SECONDS)
    """A socket connection with no request (or an unfinished one) for this long is closed; a
    client reconnects for its next call."""
