"""Wiring for one process: settings, Redis (embedded or given), the job store, the config and
the backends."""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import cached_property

from crossdock import observe
from crossdock.backends.redis_store import embedded
from crossdock.backends.redis_store.store import JobStore
from crossdock.backends.registry import BackendContext, Backends, catalog
from crossdock.configfile import load_config
from crossdock.queue.config import ClusterConfig
from crossdock.settings import Settings, current_user


@dataclass
class Runtime:
    settings: Settings
    redis_url: str

    @classmethod
    def from_env(cls, start_redis: bool = True) -> "Runtime":
        settings = Settings.from_env()
        url = settings.redis_url
        if url is not None:  # an embedded Redis named without its password: the one its state dir keeps
            url = embedded.with_password(url)
        if url is None:
            url = embedded.ensure_running(settings.state_dir) if start_redis else embedded.url_for(settings.state_dir)
        return cls(settings, url)

    @cached_property
    def store(self) -> JobStore:
        return JobStore.from_url(self.redis_url, self.settings.prefix, actor=current_user(),
                                 on_round_trip=observe.redis_observer())

    @cached_property
    def config(self) -> ClusterConfig:
        return load_config(self.settings.config_path, catalog())

    @cached_property
    def backends(self) -> Backends:
        """This process's backends, built on first use from the config and the environment."""
        return Backends(BackendContext(self.config, self.store, self.settings.state_dir, os.environ,
                                       self.child_env()))

    def child_env(self) -> dict[str, str]:
        """Environment for processes this one starts, pinned to the same Redis, config and state."""
        env = dict(os.environ)
        env.update({"CROSSDOCK_REDIS_URL": self.redis_url, "CROSSDOCK_STATE_DIR": str(self.settings.state_dir),
                    "CROSSDOCK_CONFIG": str(self.settings.config_path), "CROSSDOCK_PREFIX": self.settings.prefix})
        return env
