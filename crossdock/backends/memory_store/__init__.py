"""The job store in one process's memory: the Redis store's twin for tests (:mod:`.store`)."""

from crossdock.backends.memory_store.store import MemoryStore

__all__ = ["MemoryStore"]
