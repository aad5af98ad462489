"""The admin config changed while crossdock runs: validated whole, stored for the leader, switched
at a cycle boundary.

- :func:`validate` is what ``config check``, ``config apply`` and ``up``'s reloads run: the load
  ``up`` does (the backend catalog) and a dry scheduling cycle. Any error refuses the file whole.
- :func:`apply_file` validates, diffs against the config in force and stores the new one
  (``JobStore.live_config``) for the leader.
- :class:`Switch` is the leader's step at the top of each turn (a cycle boundary): when the stored
  version is not the one it uses, it parses it, switches its runtime (the backends are built again
  from it) and records the switch with its diff as a ``config_applied`` event. Workers follow the
  version in force before each task (:meth:`Runtime.refresh_config`). Jobs already admitted keep
  what they were admitted under: queue, priority class, priority, preemptibility and pools are
  resolved into the job at submit, and its pool, nodes and GPUs at admission.
- :class:`Watcher` is the part of ``up`` that reloads the configured file on SIGHUP
  (:meth:`Watcher.request`) or when the file changes (its text read every ``poll`` s: a change
  of content is what counts, however the file was replaced; see docs/operate.md on why not
  inotify). One source of truth: once a config from elsewhere (``config apply OTHER``) is the
  one stored, an edit of the file that would take back what it changed is refused
  (:func:`behind`) and said so, rather than undoing it silently; an edit that carries it goes.
  ``config apply FILE`` of the watched file itself always goes: the admin said which one wins.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from crossdock.backends.registry import catalog
from crossdock.configfile import load_config, load_text, located
from crossdock.queue.config import ClusterConfig, lint
from crossdock.queue.config_diff import Change, diff_configs, reverted
from crossdock.queue.errors import ConfigError
from crossdock.runtime import Runtime

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Checked:
    config: ClusterConfig
    text: str
    warnings: list[str]


def validate(path: str | Path) -> Checked:
    """The config of ``path`` as ``up`` would load it, checked by a dry scheduling cycle over its
    declared and local nodes; :class:`ConfigError` with every problem otherwise."""
    before = _text(path)
    cfg = load_config(path, catalog())  # its errors name the file and each problem's line
    text = _text(path)
    if text is None or text != before:  # an editor still writing it: the next reload sees the end
        raise ConfigError([f"{path}: changed while it was read; apply it again"])
    return _checked(cfg, text, str(path))


def validate_text(text: str, source: str) -> Checked:
    """As :func:`validate`, for a config's text that a client read itself (``source``: its path)."""
    return _checked(load_text(text, source, catalog()), text, source)


def _checked(cfg: ClusterConfig, text: str, source: str) -> Checked:
    from crossdock.backends.local import gpus
    from crossdock.backends.local.backend import local_nodes
    from crossdock.queue.probe import dry_cycle

    errors = dry_cycle(cfg, local_nodes(cfg, gpus.discovered()), datetime.now(timezone.utc))
    if errors:
        raise ConfigError(located(errors, text, source))
    return Checked(cfg, text, lint(cfg))


def _text(path: str | Path) -> str | None:
    try:
        return Path(path).read_text()
    except (OSError, ValueError):
        return None


@dataclass(frozen=True)
class Applied:
    version: int
    new: bool
    """False: the same text was stored already (nothing to switch)."""
    changes: list[Change]
    warnings: list[str]


def apply_file(rt: Runtime, path: str | Path, by: str) -> Applied:
    """Validate ``path`` whole and store it for the leader; :class:`ConfigError` refuses it and
    stores nothing."""
    return store_checked(rt, validate(path), str(Path(path).absolute()), by)


def apply_text(rt: Runtime, text: str, source: str, by: str) -> Applied:
    """As :func:`apply_file`, for the text a client read from ``source`` (the socket's ``config apply``)."""
    return store_checked(rt, validate_text(text, source), source, by)


def store_checked(rt: Runtime, checked: Checked, source: str, by: str) -> Applied:
    version, new = rt.store.live_config.store(checked.text, source, by)
    return Applied(version, new, diff_configs(rt.config, checked.config), checked.warnings)


def behind(rt: Runtime, path: str | Path, checked: Checked) -> str | None:
    """Why storing ``checked`` (read from ``path``) would take back a config stored from another
    source since ``path`` last was the config; None when it would not."""
    live, source = rt.store.live_config, str(Path(path).absolute())
    desired = live.desired()
    if desired is None or desired.get("source") == source or desired.get("text") == checked.text:
        return None
    base = live.from_source(source)
    if base is None:  # the file never was the config here: it is new, not behind
        return None
    try:
        applied = load_text(desired["text"], desired.get("source") or "<live config>", catalog())
        before = load_text(base["text"], source, catalog())
    except ConfigError:  # a text this crossdock cannot read: nothing to compare
        return None
    undone = reverted(before, applied, checked.config)
    if not undone:
        return None
    return (f"{path} would take back version {desired['version']}, applied from {desired.get('source')} by"
            f" {desired.get('by')} after the file's version {base['version']}: {'; '.join(map(str, undone))}."
            f" Carry those changes into {path} (`crossdock config show` prints the config in force), or run"
            f" `crossdock config apply {path}` to make the file the config")


def in_force_text(rt: Runtime) -> tuple[str, dict[str, Any] | None]:
    """The YAML of the config in force and its live record (None: the file's, nothing applied)."""
    record = rt.store.live_config.in_force()
    if record is not None:
        return record["text"], record
    return Path(rt.settings.config_path).read_text(), None


class Switch:
    """The leader's step at a cycle boundary: take the stored config when it is new."""

    def __init__(self, rt: Runtime, holder: str):
        self.rt, self.holder = rt, holder
        self.seen = 0
        """The last stored version this leader looked at (switched to, or refused)."""

    def __call__(self) -> bool:
        live = self.rt.store.live_config
        version = live.desired_version()
        if not version or version in (self.seen, self.rt.config_version):
            return False
        if version == live.in_force_version():  # a leader before this one switched to it already
            return self.rt.refresh_config()
        record = live.desired()
        if record is None:
            return False
        self.seen = record["version"]
        try:
            cfg = load_text(record["text"], record.get("source") or "<live config>", catalog())
        except ConfigError as exc:
            log.error("live config version %s refused: %s", record["version"], "; ".join(exc.errors))
            live.refused(record.get("source", ""), exc.errors, self.holder, record["version"])
            return False
        changes = diff_configs(self.rt.config, cfg)
        self.rt.use_config(cfg, record["version"])
        live.switched(record, self.holder, changes)
        log.info("config version %s in force (%s): %s", record["version"], record.get("source"),
                 "; ".join(str(c) for c in changes) or "no change")
        return True


class Watcher:
    """Reload ``up``'s configured file on request (SIGHUP) or when its content changes. A supervised
    part of ``crossdock up`` (:class:`crossdock.workers.supervision.Part`)."""

    name = "config-watcher"

    def __init__(self, rt: Runtime, path: Path, poll: float = 1.0, actor: str = "crossdock up",
                 settle: float = 0.25):
        self.rt, self.path, self.poll, self.actor = rt, Path(path), poll, actor
        self.settle = settle
        """Seconds a changed text must stay the same before it is read as the new config (a file
        being written, truncated first, reads empty or cut for a moment)."""
        self.wake = threading.Event()
        self.stopping = threading.Event()
        self.thread: threading.Thread | None = None
        self.last_text: str | None = None
        self.last_result = "not loaded yet"
        self.behind: str | None = None
        """Why the file's last edit was not taken (it would undo a config applied from elsewhere)."""
        self.reloads = 0

    def request(self) -> None:
        """Reload now (what SIGHUP does); safe from a signal handler."""
        self.wake.set()

    def reload(self) -> bool:
        """Validate the file and store it when its text changed; True when a new version was stored."""
        try:
            text = self.path.read_text()
        except OSError as exc:
            self.last_result = f"cannot read {self.path}: {exc.strerror}"
            log.error("config reload: %s; the running config stays", self.last_result)
            return False
        if text == self.last_text:
            return False
        self.stopping.wait(self.settle)
        if _text(self.path) != text:  # still being written: the next poll reads it whole
            return False
        self.last_text = text
        source = str(self.path.absolute())
        try:
            checked = validate(self.path)
        except ConfigError as exc:
            self.behind, self.last_result = None, f"refused: {'; '.join(exc.errors)}"
            log.error("config reload of %s refused, the running config stays: %s", self.path, "; ".join(exc.errors))
            self.rt.store.live_config.refused(source, exc.errors, self.actor)
            return False
        self.behind = behind(self.rt, self.path, checked)
        if self.behind is not None:
            self.last_result = f"not reloaded: {self.behind}"
            log.error("config reload of %s not taken, the config in force stays: %s", self.path, self.behind)
            self.rt.store.live_config.refused(source, [self.behind], self.actor)
            return False
        applied = store_checked(self.rt, checked, source, self.actor)
        self.reloads += applied.new
        self.last_result = f"stored version {applied.version}" + ("" if applied.new else " (unchanged)")
        if applied.new:
            log.info("config %s stored as version %s for the leader: %s", self.path, applied.version,
                     "; ".join(str(c) for c in applied.changes) or "no change")
        return applied.new

    def _run(self) -> None:
        while not self.stopping.is_set():
            try:
                self.reload()
            except Exception as exc:  # the store away: the next poll tries again
                self.last_text = None
                self.last_result = f"failed: {type(exc).__name__}: {exc}"
                log.warning("config reload of %s failed (%s); retrying", self.path, exc)
            self.wake.wait(self.poll)
            self.wake.clear()

    def start(self) -> None:
        self.stopping.clear()
        self.thread = threading.Thread(target=self._run, name="config-watcher", daemon=True)
        self.thread.start()

    def alive(self) -> bool:
        return self.thread is not None and self.thread.is_alive()

    def report(self) -> dict[str, Any]:
        return {"path": str(self.path), "last": self.last_result, "reloads": self.reloads, "behind": self.behind}

    def stop(self) -> None:
        self.stopping.set()
        self.wake.set()
        if self.thread is not None:
            self.thread.join(2)
