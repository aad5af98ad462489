"""Backend instances for a process, built once from the config and cached by kind."""

from __future__ import annotations

from crossdock.backends.base import Backend, BackendUnavailable
from crossdock.runtime import Runtime


def _build(kind: str, rt: Runtime) -> Backend:
    if kind == "local":
        from crossdock.backends.local.backend import LocalBackend

        return LocalBackend(rt.store, rt.config, rt.settings.state_dir, rt.child_env())
    if kind == "slurm":
        from crossdock.backends.slurm import from_config

        return from_config(rt.config, rt.store)
    if kind == "k8s":
        from crossdock.backends.kubernetes import from_config as k8s_from_config

        return k8s_from_config(rt.config, rt.store)
    raise BackendUnavailable(f"unknown backend {kind!r}; known: local, slurm, k8s", retryable=False)


_cache: dict[tuple[int, str], Backend] = {}


def backend(kind: str, rt: Runtime) -> Backend:
    key = (id(rt), kind)
    if key not in _cache:
        _cache[key] = _build(kind, rt)
    return _cache[key]
