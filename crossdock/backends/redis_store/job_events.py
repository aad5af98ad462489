"""A job's own events: a list of JSON objects (``RPUSH``), each value a string and an ``id`` of
milliseconds and position, as the transition script writes them. A one-entry Redis stream costs
kilobytes; a list costs bytes, and most jobs have a handful of events. Jobs stored before the lists
keep their stream, written and read as before. Every writer of a job's events goes through here."""

from __future__ import annotations

import json
import time
from typing import Any, Mapping


def queue_job_event(client: Any, pipe: Any, key: str, ev: Mapping[str, Any], maxlen: int, *,
                    now: float | None = None, fresh: bool = False) -> None:
    """Queue ``ev`` on the job's events at ``key`` in ``pipe``; the list keeps its last ``maxlen``.
    ``fresh``: the job is new, so it has no stream of an earlier version (no look needed)."""
    if not fresh and client.type(key) == "stream":
        pipe.xadd(key, dict(ev), maxlen=maxlen, approximate=True)
        return
    at = time.time() if now is None else now
    pipe.rpush(key, json.dumps({**{k: str(v) for k, v in ev.items()}, "id": f"{int(at * 1000)}-0"}))
    pipe.ltrim(key, -maxlen, -1)
