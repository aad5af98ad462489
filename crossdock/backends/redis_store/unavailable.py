"""The one place a Redis that is away becomes :class:`~crossdock.queue.errors.StoreUnavailable`.

Every client the store makes (:func:`connect.client`, the timed one, one handed to ``JobStore``)
is a :class:`StoreClient`: a command, a script, a pipeline or a watching transaction that fails
because Redis is down, restarting, loading its AOF, failing over or too slow raises
``StoreUnavailable`` once redis-py's own retries are spent. Callers above the store catch that one
type; none imports redis. What Redis refuses for a request itself (a wrong type, a bad argument, a
lost ``WATCH``) is not an outage and passes through unchanged.
"""

from __future__ import annotations

from typing import Any

import redis
from redis.client import Pipeline

from crossdock.queue.errors import StoreUnavailable

AWAY: tuple[type[Exception], ...] = (redis.ConnectionError, redis.TimeoutError, redis.BusyLoadingError,
                                     redis.exceptions.ReadOnlyError)
"""redis-py's errors of a store that is away (MasterNotFoundError, AuthenticationError and
BusyLoadingError are ConnectionErrors; ReadOnlyError is a replica that was the master)."""


def translated(exc: Exception) -> StoreUnavailable:
    """The store's own error for redis-py's ``exc`` (one of :data:`AWAY`)."""
    return StoreUnavailable(f"the store does not answer ({type(exc).__name__}: {str(exc)[:200]}); try again shortly")


class StorePipeline(Pipeline):
    """A pipeline whose round trips (``execute``, and the commands of a watching transaction,
    sent at once) raise ``StoreUnavailable`` for an away store."""

    def execute_command(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return super().execute_command(*args, **kwargs)
        except AWAY as exc:
            raise translated(exc) from exc

    def execute(self, raise_on_error: bool = True) -> list[Any]:
        try:
            return super().execute(raise_on_error)
        except AWAY as exc:
            raise translated(exc) from exc


class StoreClient(redis.Redis):
    """A client whose commands raise ``StoreUnavailable`` for an away store; its pipelines too."""

    pipeline_class: type[StorePipeline] = StorePipeline

    def execute_command(self, *args: Any, **options: Any) -> Any:
        try:
            return super().execute_command(*args, **options)
        except AWAY as exc:
            raise translated(exc) from exc

    def pipeline(self, transaction: bool = True, shard_hint: Any = None) -> StorePipeline:
        return self.pipeline_class(self.connection_pool, self.response_callbacks, transaction, shard_hint)


def answering(client: redis.Redis) -> StoreClient:
    """``client`` as a :class:`StoreClient`: itself when it is one, else one over its connections."""
    if isinstance(client, StoreClient):
        return client
    return StoreClient(connection_pool=client.connection_pool)
