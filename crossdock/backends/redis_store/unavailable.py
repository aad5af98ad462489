"""The one place a Redis that is away becomes :class:`~crossdock.queue.errors.StoreUnavailable`.

Every client the store makes (:func:`connect.client`, the timed one, one handed to ``JobStore``)
is a :class:`StoreClient`: a command, a script, a pipeline or a watching transaction that fails
because Redis is down, restarting, loading its AOF, failing over or too slow raises
``StoreUnavailable`` once redis-py's own retries are spent. Callers above the store catch that one
type; none imports redis. What Redis refuses for a request itself (a wrong type, a bad argument, a
lost ``WATCH``) is not an outage and passes through unchanged.

A client with a ``durability`` (:mod:`.durability`, asked for in the URL) also waits, after each
command or pipeline that writes, until enough replicas have the write.
"""

from __future__ import annotations

from typing import Any

import redis
from redis.client import Pipeline

from crossdock.backends.redis_store.durability import Durability, writes
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

    durability: Durability | None = None

    def _execute_transaction(self, connection: Any, commands: Any, raise_on_error: bool) -> Any:
        return self._confirmed(connection, commands, super()._execute_transaction(connection, commands, raise_on_error))

    def _execute_pipeline(self, connection: Any, commands: Any, raise_on_error: bool) -> Any:
        return self._confirmed(connection, commands, super()._execute_pipeline(connection, commands, raise_on_error))

    def _confirmed(self, connection: Any, commands: Any, out: Any) -> Any:
        """``out`` once the replicas have the writes among ``commands`` (same connection, after EXEC)."""
        if self.durability and writes(args for args, _ in commands):
            self.durability.confirm(self, connection)
        return out

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
    durability: Durability | None = None

    def execute_command(self, *args: Any, **options: Any) -> Any:
        try:
            return super().execute_command(*args, **options)
        except AWAY as exc:
            raise translated(exc) from exc

    def _send_command_parse_response(self, conn: Any, command_name: Any, *args: Any, **options: Any) -> Any:
        out = super()._send_command_parse_response(conn, command_name, *args, **options)
        if self.durability and writes([args]):
            self.durability.confirm(self, conn)
        return out

    def pipeline(self, transaction: bool = True, shard_hint: Any = None) -> StorePipeline:
        pipe = self.pipeline_class(self.connection_pool, self.response_callbacks, transaction, shard_hint)
        pipe.durability = self.durability
        return pipe


def answering(client: redis.Redis) -> StoreClient:
    """``client`` as a :class:`StoreClient`: itself when it is one, else one over its connections."""
    if isinstance(client, StoreClient):
        return client
    return StoreClient(connection_pool=client.connection_pool)
