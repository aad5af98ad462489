"""Wiring for one process: settings, Redis (embedded or given), the job store, the config and
the backends."""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass, field
from functools import cached_property

from crossdock import observe
from crossdock.backends.redis_store import durability, embedded
from crossdock.backends.redis_store.connect import is_sentinel, parse_sentinel
from crossdock.backends.redis_store.sealing import SpecSeals
from crossdock.backends.redis_store.store import JobStore
from crossdock.backends.registry import BackendContext, Backends, catalog
from crossdock.configfile import load_config, load_text
from crossdock.queue.config import ClusterConfig
from crossdock.queue.errors import ConfigError, StoreUnavailable
from crossdock.settings import Settings, current_user

log = logging.getLogger(__name__)

CONFIG_REFRESH_SECONDS = 1.0


@dataclass
class Runtime:
    settings: Settings
    redis_url: str
    live: bool = True
    """Whether the config comes from the store when one is in force there (``crossdock config
    apply``, ``up``'s reloads); else, and when the store has none, from the settings' file."""
    _config: ClusterConfig | None = field(default=None, repr=False)
    config_version: int = 0
    """The live config's version this process uses; 0: the file's."""
    switched_by_leader: bool = False
    """True in a process that runs the scheduling loop: its leader switches the config at a cycle
    boundary (:class:`crossdock.workers.liveconfig.Switch`); elsewhere (the API, the multi-user
    socket, a Python session) the version in force is looked up at most every
    ``CONFIG_REFRESH_SECONDS`` when the config is read."""
    _checked_at: float = field(default=0.0, repr=False)

    @classmethod
    def from_env(cls, start_redis: bool = True) -> "Runtime":
        settings = Settings.from_env()
        url = settings.redis_url
        if url is not None:  # an embedded Redis named without its password: the one its state dir keeps
            url = embedded.with_password(url)
        if url is None:
            url = embedded.ensure_running(settings.state_dir) if start_redis else embedded.url_for(settings.state_dir)
        else:  # BadRedisURL / BadDurability, one line naming what to fix, before anything connects
            durability.split(url)
            if is_sentinel(url):
                parse_sentinel(url)
        # an embedded Redis that is not running is not asked (``submit --dry-run`` starts none)
        live = start_redis or settings.redis_url is not None or embedded.pid(settings.state_dir) is not None
        return cls(settings, url, live=live)

    @cached_property
    def store(self) -> JobStore:
        return JobStore.from_url(self.redis_url, self.settings.prefix, actor=current_user(),
                                 on_round_trip=observe.redis_observer(),
                                 seals=SpecSeals.for_state_dir(self.settings.state_dir))

    @property
    def config(self) -> ClusterConfig:
        """The config in force: the store's live one, else the file's (loaded once; switched by
        :meth:`use_config`, which the leader calls at a cycle boundary and workers before a task)."""
        if self._config is None:
            if not (self.live and self.refresh_config()):
                self._config = load_config(self.settings.config_path, catalog())
        elif self.live and not self.switched_by_leader and time.monotonic() - self._checked_at > CONFIG_REFRESH_SECONDS:
            self.refresh_config()
        assert self._config is not None
        return self._config

    def use_config(self, cfg: ClusterConfig, version: int) -> None:
        """Switch this process to ``cfg``: the backends built so far are rebuilt with it on next use."""
        first = self._config is None
        self._config, self.config_version = cfg, version
        if not first and "backends" in self.__dict__:
            self.backends.reconfigure(cfg)

    def refresh_config(self) -> bool:
        """Take the store's config in force when its version is not this process's; True when it
        switched. One round trip when nothing changed. A store that is away keeps what is used."""
        self._checked_at = time.monotonic()
        try:
            version = self.store.live_config.in_force_version()
            if not version or version == self.config_version:
                return False
            record = self.store.live_config.in_force()
        except StoreUnavailable as exc:
            log.warning("the live config could not be read (%s); keeping the one in use", exc)
            return False
        if record is None:
            return False
        try:
            cfg = load_text(record["text"], record.get("source") or "<live config>", catalog())
        except ConfigError as exc:  # written by a newer crossdock, say
            log.error("the live config version %s cannot be read here (%s); keeping the one in use",
                      record["version"], exc)
            return False
        self.use_config(cfg, record["version"])
        return True

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
