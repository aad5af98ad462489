"""Backend kinds and their factories: adding a backend is one package plus one line here.

Each backend package exposes ``CAPABILITIES`` (a :class:`~crossdock.queue.ports.Capabilities`)
and ``create(ctx) -> Backend``; it reads its own typed settings from ``ctx.environ``. Packages
are imported on first use, so a process pays only for the backends its config names.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import ModuleType
from typing import Iterator, Mapping

from crossdock.queue.config import ClusterConfig
from crossdock.queue.ports import Backend, BackendStore, BackendUnavailable, Capabilities

BACKENDS: dict[str, str] = {
    "local": "crossdock.backends.local",
    "slurm": "crossdock.backends.slurm",
    "k8s": "crossdock.backends.kubernetes",
    "fake": "crossdock.backends.fake",
}
"""Backend kind (as pools name it in the config) → the package that implements it."""


@dataclass(frozen=True)
class BackendContext:
    """What a backend is built from: the admin config, the job store and the process's settings."""

    config: ClusterConfig
    store: BackendStore
    state_dir: Path
    environ: Mapping[str, str] = field(default_factory=dict)
    """The environment the backend reads its settings from."""
    child_env: Mapping[str, str] = field(default_factory=dict)
    """The environment for processes the backend starts (pinned to the same store and config)."""


def kinds() -> tuple[str, ...]:
    return tuple(BACKENDS)


def _package(kind: str) -> ModuleType:
    try:
        name = BACKENDS[kind]
    except KeyError:
        raise BackendUnavailable(f"unknown backend {kind!r}; known: {', '.join(BACKENDS)}", retryable=False) from None
    return importlib.import_module(name)


def capabilities(kind: str) -> Capabilities:
    return _package(kind).CAPABILITIES


class Catalog(Mapping[str, Capabilities]):
    """Every known kind → its capabilities, a package imported only when its kind is looked up
    (validating a config that names Kubernetes pools loads no Kubernetes client unless it must)."""

    def __getitem__(self, kind: str) -> Capabilities:
        if kind not in BACKENDS:
            raise KeyError(kind)
        return capabilities(kind)

    def __contains__(self, kind: object) -> bool:
        return kind in BACKENDS

    def __iter__(self) -> Iterator[str]:
        return iter(BACKENDS)

    def __len__(self) -> int:
        return len(BACKENDS)


def catalog() -> Catalog:
    return Catalog()


def create(kind: str, ctx: BackendContext) -> Backend:
    return _package(kind).create(ctx)


class Backends:
    """The backends of one process, built on first use and kept (they hold connections, watches)."""

    def __init__(self, ctx: BackendContext):
        self.ctx = ctx
        self._built: dict[str, Backend] = {}
        self._given: set[str] = set()

    def __call__(self, kind: str) -> Backend:
        if kind not in self._built:
            self._built[kind] = create(kind, self.ctx)
        return self._built[kind]

    def use(self, kind: str, backend: Backend) -> None:
        """Serve ``kind`` with this instance (a test's fake, a backend built elsewhere)."""
        self._built[kind] = backend
        self._given.add(kind)

    def reconfigure(self, config: ClusterConfig) -> None:
        """A new admin config (a live change): the backends built from the old one are closed and
        built again from the new one on first use; one handed in with :meth:`use` is kept (told
        through its ``reconfigure(config)`` when it has one)."""
        self.ctx = replace(self.ctx, config=config)
        for kind in list(self._built):
            backend = self._built[kind]
            if kind in self._given:
                if hasattr(backend, "reconfigure"):
                    backend.reconfigure(config)
                continue
            close = getattr(backend, "close", None)
            if close is not None:
                close()
            del self._built[kind]

    def capabilities(self, kind: str) -> Capabilities:
        """What ``kind`` can do: the instance's own declaration once built, else its package's."""
        built = self._built.get(kind)
        return built.capabilities if built is not None else capabilities(kind)

    def close(self) -> None:
        """Stop what the built backends hold open (watches, connections)."""
        for b in self._built.values():
            close = getattr(b, "close", None)
            if close is not None:
                close()
        self._built.clear()
