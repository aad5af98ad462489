"""A Redis client that reports every round trip to a hook (``crossdock.observe`` hands it one in
the processes that serve metrics): the command and how long it took, a pipeline or transaction
counted once (``PIPELINE``, ``MULTI``), as it costs one round trip. No hook, no client of this
kind: ``JobStore.from_url`` builds a plain :class:`~.unavailable.StoreClient` then. A failure it
reports is the one the caller gets: ``StoreUnavailable`` for a store that is away."""

from __future__ import annotations

import time
from typing import Any, Callable

from crossdock.backends.redis_store import connect
from crossdock.backends.redis_store.unavailable import StoreClient, StorePipeline

RoundTrip = Callable[[str, float, bool], None]


def _report(observer: RoundTrip, command: str, started: float, ok: bool) -> None:
    try:
        observer(command, time.perf_counter() - started, ok)
    except Exception:  # noqa: BLE001 - metrics must never fail a store call
        pass


class TimedPipeline(StorePipeline):
    observer: RoundTrip

    def execute(self, raise_on_error: bool = True) -> list[Any]:
        if not self.command_stack and not self.watching:
            return super().execute(raise_on_error)
        name = "MULTI" if self.transaction or self.explicit_transaction else "PIPELINE"
        started, ok = time.perf_counter(), False
        try:
            out = super().execute(raise_on_error)
            ok = True
            return out
        finally:
            _report(self.observer, name, started, ok)


class TimedRedis(StoreClient):
    observer: RoundTrip

    def execute_command(self, *args: Any, **options: Any) -> Any:
        started, ok = time.perf_counter(), False
        try:
            out = super().execute_command(*args, **options)
            ok = True
            return out
        finally:
            _report(self.observer, str(args[0]).split(" ", 1)[0].upper() if args else "?", started, ok)

    def pipeline(self, transaction: bool = True, shard_hint: Any = None) -> TimedPipeline:
        pipe = TimedPipeline(self.connection_pool, self.response_callbacks, transaction, shard_hint)
        pipe.observer, pipe.durability = self.observer, self.durability
        return pipe


def timed_client(url: str, observer: RoundTrip, **kwargs: Any) -> TimedRedis:
    """A timed client for ``url``, a Redis server or a master through Sentinel."""
    client = connect.client(url, redis_class=TimedRedis, **kwargs)
    client.observer = observer
    return client
