"""A job's own events: a list of JSON objects (``RPUSH``), each value a string and an ``id`` of
milliseconds and position, as the transition script writes them. A one-entry Redis stream costs
kilobytes; a list costs bytes, and most jobs have a handful of events. Jobs stored before the lists
keep their stream, written and read as before. Every writer of a job's events goes through here.

A new job's first event (``submitted``) is a field of the job's own hash (:data:`FIRST`), and its
list starts with the next event: a queued job has no key of its own for its events (a one-entry list
costs 280 B on Redis 7.0, the field about the event's length). Readers put it first (:func:`in_order`)."""

from __future__ import annotations

import json
import time
from typing import Any, Mapping


def queue_job_event(client: Any, pipe: Any, key: str, ev: Mapping[str, Any], maxlen: int, *,
                    now: float | None = None) -> None:
    """Queue ``ev`` on the job's events at ``key`` in ``pipe``; the list keeps its last ``maxlen``."""
    if client.type(key) == "stream":
        pipe.xadd(key, dict(ev), maxlen=maxlen, approximate=True)
        return
    pipe.rpush(key, event_json(ev, time.time() if now is None else now))
    pipe.ltrim(key, -maxlen, -1)


FIRST = "ev0"
"""The job hash's field that holds the job's first event."""


def event_json(ev: Mapping[str, Any], at: float) -> str:
    """One event as a job's list (or its hash's :data:`FIRST`) holds it, with its ``id``."""
    return json.dumps({**{k: str(v) for k, v in ev.items()}, "id": f"{int(at * 1000)}-0"})


def in_order(first: str | None, rest: list[str]) -> list[dict[str, str]]:
    """A job's events, oldest first, from its hash's :data:`FIRST` and its list."""
    return [json.loads(raw) for raw in ([first] if first else []) + rest]
