"""A job's own events: a list of JSON objects (``RPUSH``), each value a string and an ``id``
``<ms>-<seq>``, unique and increasing within the job as a stream's are: the Lua scripts make it from
the job's last event (``scripts.NEXT_EVENT_ID``), so events of one millisecond count up ``seq``.
A one-entry Redis stream costs kilobytes; a list costs bytes, and most jobs have a handful of
events. Jobs stored before the lists keep their stream, written and read as before. Every writer
of a job's events goes through here.

A new job's first event (``submitted``) is a field of the job's own hash (:data:`FIRST`), and its
list starts with the next event: a queued job has no key of its own for its events (a one-entry list
costs 280 B on Redis 7.0, the field about the event's length). Readers put it first (:func:`in_order`)."""

from __future__ import annotations

import json
import time
from typing import Any, Mapping

from crossdock.backends.redis_store.keys import Keys
from crossdock.backends.redis_store.scripts import APPEND_EVENT


def queue_job_event(client: Any, pipe: Any, keys: Keys, job_id: int, ev: Mapping[str, Any], maxlen: int, *,
                    now: float | None = None) -> None:
    """Queue ``ev`` on job ``job_id``'s events in ``pipe`` (a stream for a job stored before lists),
    with the id after its last event's; the list keeps its last ``maxlen``. ``now`` (epoch seconds,
    default this machine's clock) gives the id's milliseconds unless the last event's are later."""
    at = time.time() if now is None else now
    client.register_script(APPEND_EVENT)(keys=[keys.job(job_id), keys.job_events(job_id)],
                                         args=[json.dumps({k: str(v) for k, v in ev.items()}), maxlen, int(at * 1000)],
                                         client=pipe)


FIRST = "ev0"
"""The job hash's field that holds the job's first event."""


def event_json(ev: Mapping[str, Any], at: float) -> str:
    """A job's first event as its hash's :data:`FIRST` holds it, with its ``id`` (``<ms>-0``)."""
    return json.dumps({**{k: str(v) for k, v in ev.items()}, "id": f"{int(at * 1000)}-0"})


def in_order(first: str | None, rest: list[str]) -> list[dict[str, str]]:
    """A job's events, oldest first, from its hash's :data:`FIRST` and its list."""
    return [json.loads(raw) for raw in ([first] if first else []) + rest]
