"""Wiring for one process: settings, Redis (embedded or given), the job store and the config."""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import cached_property

from crossdock.backends.redis_store import embedded
from crossdock.backends.redis_store.store import JobStore
from crossdock.queue.config import ClusterConfig, load_config
from crossdock.settings import Settings


def celery_url(redis_url: str) -> str:
    """Celery (kombu) spells a unix-socket Redis ``redis+socket://``."""
    if redis_url.startswith("unix://"):
        return "redis+socket://" + redis_url.removeprefix("unix://")
    return redis_url


@dataclass
class Runtime:
    settings: Settings
    redis_url: str

    @classmethod
    def from_env(cls, start_redis: bool = True) -> "Runtime":
        settings = Settings.from_env()
        url = settings.redis_url
        if url is None:
            url = embedded.ensure_running(settings.state_dir) if start_redis else embedded.url_for(settings.state_dir)
        return cls(settings, url)

    @cached_property
    def store(self) -> JobStore:
        return JobStore.from_url(self.redis_url, self.settings.prefix)

    @cached_property
    def config(self) -> ClusterConfig:
        return load_config(self.settings.config_path)

    def child_env(self) -> dict[str, str]:
        """Environment for processes this one starts, pinned to the same Redis, config and state."""
        env = dict(os.environ)
        env.update({"CROSSDOCK_REDIS_URL": self.redis_url, "CROSSDOCK_STATE_DIR": str(self.settings.state_dir),
                    "CROSSDOCK_CONFIG": str(self.settings.config_path), "CROSSDOCK_PREFIX": self.settings.prefix})
        return env
