"""Where crossdock finds its Redis, its config and its state directory (environment first)."""

from __future__ import annotations

import os
import pwd
from dataclasses import dataclass
from pathlib import Path

DEFAULT_CONFIG = Path(__file__).resolve().parent / "configs" / "local.yaml"  # shipped in the package


@dataclass(frozen=True)
class Settings:
    state_dir: Path
    redis_url: str | None
    """None: crossdock runs its own embedded Redis in ``state_dir``."""
    config_path: Path
    prefix: str

    @classmethod
    def from_env(cls) -> "Settings":
        state = Path(os.environ.get("CROSSDOCK_STATE_DIR") or Path.home() / ".local" / "state" / "crossdock")
        config = os.environ.get("CROSSDOCK_CONFIG")
        if config is None:
            config = str(DEFAULT_CONFIG) if DEFAULT_CONFIG.exists() else str(state / "crossdock.yaml")
        return cls(state_dir=state, redis_url=os.environ.get("CROSSDOCK_REDIS_URL") or None,
                   config_path=Path(config), prefix=os.environ.get("CROSSDOCK_PREFIX", "cd"))


def current_user() -> str:
    """Who this process is: the name of its real uid (the uid itself when the passwd database has
    no entry, as in containers). ``LOGNAME``/``USER`` are not asked: anyone can set them."""
    uid = os.getuid()
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def is_admin(admins: "list[str] | tuple[str, ...]" = ()) -> bool:
    """Whether this process may act on anyone's jobs: root, or a user the config lists in ``admins``."""
    return os.getuid() == 0 or current_user() in admins


def submit_umask() -> str:
    """This process's umask as sbatch records it for the job (``SLURM_UMASK``, 4 octal digits)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return f"{mask:04o}"
