"""The descheduler's records: each moved job's moves (budget, cooldown), the destinations reserved
for moved jobs, the last plan, and one event per move in the job's stream and the global one.

A move's event carries ``event`` (``migrated``; ``eviction_refused`` when a disruption budget
refused it; ``migration_planned`` in a dry run), ``reason`` (``Migrated``), ``from`` and ``to``
(comma-separated nodes; ``to`` empty when the scheduler chooses), ``why`` (the plan's reason),
``strategy``, ``job``, ``actor`` and ``time``.
"""

from __future__ import annotations

import json
import time
from typing import Any, Iterable, Mapping

from crossdock.backends.redis_store.job_events import queue_job_event
from crossdock.backends.redis_store.keys import Keys
from crossdock.queue.deschedule.migration import Migration, MoveRecord
from crossdock.queue.states import Reason

EVENTS = ("migrated", "eviction_refused", "migration_planned")


class DeschedulerRecords:
    def __init__(self, client: Any, keys: Keys, stream_maxlen: int):
        self.r, self.k, self.maxlen = client, keys, stream_maxlen

    def history(self) -> dict[int, MoveRecord]:
        out = {}
        for k, v in self.r.hgetall(self.k.deschedule_moves).items():
            try:
                d = json.loads(v)
                out[int(k)] = MoveRecord(int(d["count"]), float(d["last_at"]), tuple(d.get("from", ())))
            except (ValueError, KeyError, TypeError):
                continue  # an unreadable record counts as no move
        return out

    def moved_attempt(self, job_id: int) -> int | None:
        """The attempt of ``job_id`` the descheduler last evicted; None: never moved."""
        raw = self.r.hget(self.k.deschedule_moves, str(job_id))
        try:
            return int(json.loads(raw)["attempt"]) if raw else None
        except (ValueError, KeyError, TypeError):
            return None

    def destinations(self) -> dict[int, tuple[str, int]]:
        """Job id -> (reserved node, the attempt that was evicted)."""
        out = {}
        for k, v in self.r.hgetall(self.k.deschedule_destinations).items():
            node, _, attempt = v.rpartition("|")
            if node and attempt.isdigit():
                out[int(k)] = (node, int(attempt))
        return out

    def reserve(self, job_id: int, node: str, attempt: int) -> None:
        self.r.hset(self.k.deschedule_destinations, str(job_id), f"{node}|{attempt}")

    def release(self, job_ids: Iterable[int]) -> None:
        ids = [str(i) for i in job_ids]
        if ids:
            self.r.hdel(self.k.deschedule_destinations, *ids)

    def record(self, event: str, m: Migration, actor: str, history: Mapping[int, MoveRecord] | None = None) -> None:
        """One event for ``m``; a ``migrated`` one also counts the move in the job's record."""
        if event not in EVENTS:
            raise ValueError(f"descheduler event {event!r}: not one of {', '.join(EVENTS)}")
        now = time.time()
        ev = {"event": event, "reason": Reason.MIGRATED, "from": ",".join(m.from_nodes),
              "to": ",".join(m.to_nodes or ()), "why": m.reason, "strategy": m.strategy, "actor": actor, "time": now}
        with self.r.pipeline(transaction=True) as pipe:
            queue_job_event(self.r, pipe, self.k, m.job_id, ev, self.maxlen, now=now)
            pipe.xadd(self.k.events, {"job": m.job_id, **ev}, maxlen=self.maxlen, approximate=True)
            if event == "migrated":
                before = (history or {}).get(m.job_id)
                pipe.hset(self.k.deschedule_moves, str(m.job_id), json.dumps(
                    {"count": (before.count if before else 0) + 1, "last_at": now, "attempt": m.attempt,
                     "from": list(m.from_nodes),
                     "to": list(m.to_nodes or ()), "why": m.reason, "strategy": m.strategy}))
            pipe.execute()

    def forget(self, job_ids: Iterable[int]) -> None:
        """Drop the move records of jobs that are gone (finished and expired)."""
        ids = [str(i) for i in job_ids]
        if ids:
            self.r.hdel(self.k.deschedule_moves, *ids)

    def save_plan(self, report: Mapping[str, Any]) -> None:
        self.r.set(self.k.deschedule_plan, json.dumps({"at": time.time(), **report}))

    def last_plan(self) -> dict[str, Any] | None:
        raw = self.r.get(self.k.deschedule_plan)
        return json.loads(raw) if raw else None
