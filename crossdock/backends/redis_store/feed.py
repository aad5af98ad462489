"""Reading the event streams from their new end: the last events, and those after one a reader
has seen (the API's ``/v1/events`` and the dashboard's feed). An event is its stream fields plus
``id`` (the stream entry id, ``<ms>-<seq>``, which orders them and resumes a reader)."""

from __future__ import annotations

from typing import Any

from crossdock.backends.redis_store.keys import Keys


class EventFeed:
    def __init__(self, client: Any, keys: Keys):
        self.r, self.k = client, keys

    def _key(self, job_id: int | None) -> str:
        return self.k.events if job_id is None else self.k.job_events(job_id)

    def latest(self, count: int, job_id: int | None = None) -> list[dict[str, str]]:
        """The last ``count`` events (of one job's stream, or the global one), oldest first."""
        rows = self.r.xrevrange(self._key(job_id), count=count)
        return [{"id": eid, **fields} for eid, fields in reversed(rows)]

    def after(self, last_id: str, count: int, job_id: int | None = None) -> list[dict[str, str]]:
        """Up to ``count`` events after ``last_id`` (an event id, or ``<epoch ms>`` for a time), oldest first."""
        rows = self.r.xrange(self._key(job_id), min=f"({last_id}", count=count)
        return [{"id": eid, **fields} for eid, fields in rows]
