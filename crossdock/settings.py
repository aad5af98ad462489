"""Where crossdock finds its Redis, its config and its state directory (environment first)."""

from __future__ import annotations

import os
import pwd
from dataclasses import dataclass
from pathlib import Path

DEFAULT_CONFIG = Path(__file__).resolve().parent / "configs" / "local.yaml"  # shipped in the package
DEFAULT_SOCKET = Path("/run/crossdock/crossdock.sock")
"""Where ``crossdock up --multi-user`` serves its socket unless ``CROSSDOCK_SOCKET`` names another."""


@dataclass(frozen=True)
class Settings:
    state_dir: Path
    redis_url: str | None
    """None: crossdock runs its own embedded Redis in ``state_dir``."""
    config_path: Path
    prefix: str
    socket: Path | None = None
    """The multi-user service's Unix socket (``CROSSDOCK_SOCKET``, else :data:`DEFAULT_SOCKET` when
    it exists; ``CROSSDOCK_SOCKET=none`` forces direct mode): the faces reach the service through
    it instead of Redis. None: single-user, the faces use Redis directly."""

    @classmethod
    def from_env(cls) -> "Settings":
        state = Path(os.environ.get("CROSSDOCK_STATE_DIR") or Path.home() / ".local" / "state" / "crossdock")
        config = os.environ.get("CROSSDOCK_CONFIG")
        if config is None:
            config = str(DEFAULT_CONFIG) if DEFAULT_CONFIG.exists() else str(state / "crossdock.yaml")
        return cls(state_dir=state, redis_url=os.environ.get("CROSSDOCK_REDIS_URL") or None,
                   config_path=Path(config), prefix=os.environ.get("CROSSDOCK_PREFIX", "cd"), socket=socket_from_env())


def socket_from_env() -> Path | None:
    named = os.environ.get("CROSSDOCK_SOCKET")
    if named:
        return None if named.lower() == "none" else Path(named)
    return DEFAULT_SOCKET if DEFAULT_SOCKET.is_socket() else None


def serving_socket() -> Path:
    """Where ``up --multi-user`` listens: ``CROSSDOCK_SOCKET`` or :data:`DEFAULT_SOCKET`."""
    named = os.environ.get("CROSSDOCK_SOCKET")
    return Path(named) if named and named.lower() != "none" else DEFAULT_SOCKET


def user_name(uid: int) -> str:
    """The passwd name of ``uid``; the uid itself when the passwd database has no entry (containers)."""
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def user_id(name: str) -> int | None:
    """The uid :func:`user_name` gives ``name`` for: its passwd entry's, or a bare uid itself;
    None when there is neither."""
    try:
        return pwd.getpwnam(name).pw_uid
    except KeyError:
        return int(name) if name.isascii() and name.isdigit() else None


def current_user() -> str:
    """Who this process is: the name of its real uid. ``LOGNAME``/``USER`` are not asked: anyone
    can set them."""
    return user_name(os.getuid())


def is_admin(admins: "list[str] | tuple[str, ...]" = (), uid: int | None = None) -> bool:
    """Whether ``uid`` (default: this process's) may act on anyone's jobs: root, or a user the
    config lists in ``admins``."""
    uid = os.getuid() if uid is None else uid
    return uid == 0 or user_name(uid) in admins


def submit_umask() -> str:
    """This process's umask as sbatch records it for the job (``SLURM_UMASK``, 4 octal digits)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return f"{mask:04o}"
