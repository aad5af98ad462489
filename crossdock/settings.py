"""Where crossdock finds its Redis, its config and its state directory (environment first)."""

from __future__ import annotations

import getpass
import os
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
    """The submitting user's name (the uid when the passwd database has no entry, as in containers)."""
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return str(os.getuid())
