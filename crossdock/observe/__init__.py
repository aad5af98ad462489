"""Observability: Prometheus metrics of every long-running crossdock process.

``crossdock.observe.metrics`` defines the metrics (prometheus-client) and the functions the
workers call to record them; ``crossdock.observe.exporter`` serves them on a loopback HTTP
port. The pure core (``crossdock.queue``) records nothing itself: the leader records from the
cycle's returned data, the workers around their backend calls, the store through a round-trip
hook it is handed (:func:`redis_observer`).

This module imports nothing heavy: a command that does not serve metrics (``crossdock submit``)
never loads prometheus-client.
"""

from __future__ import annotations

from typing import Callable

RoundTrip = Callable[[str, float, bool], None]
"""Called by the store after each Redis round trip: (command, seconds, succeeded)."""

_enabled = False


def enable() -> None:
    """Record Redis round trips in this process from now on (the long-running processes call it
    before they build their store)."""
    global _enabled
    _enabled = True


def redis_observer() -> RoundTrip | None:
    """The round-trip hook for a store built now; None when this process does not serve metrics."""
    if not _enabled:
        return None
    from crossdock.observe.metrics import redis_round_trip

    return redis_round_trip
