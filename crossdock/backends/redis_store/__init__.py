"""The Redis job store: the source of truth for every job's spec, state and history."""

from crossdock.backends.redis_store.store import JobStore

__all__ = ["JobStore"]
