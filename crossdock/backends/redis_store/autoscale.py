"""The autoscaler's records: the state its next pass starts from, what its last pass decided, and
one event per change it made, in the global event stream beside the jobs' events.

An event (``XRANGE <prefix>:events``) carries ``event`` (``fleet_scaled``, ``nodes_added``,
``nodes_drained``, ``nodes_removed``), ``queue`` or ``pool``, ``from``/``to`` (replicas or nodes),
``nodes`` (comma-separated names) or ``jobs`` (requeued ids) where they apply, ``reason`` (why, in
words: the backlog and the step that limited the change), ``actor`` and ``time``; it has no ``job``
field, which tells it from a job's event. The last change of every fleet and pool is also kept
by name (``fleet:<queue>``, ``pool:<pool>``) for ``crossdock autoscale``.
"""

from __future__ import annotations

import json
import time
from typing import Any, Mapping, Sequence

from crossdock.backends.redis_store.keys import Keys

EVENTS = ("fleet_scaled", "nodes_added", "nodes_drained", "nodes_removed")


def _field(value: Any) -> str | int | float:
    if isinstance(value, (list, tuple, set, frozenset)):
        return ",".join(str(v) for v in value)
    return value if isinstance(value, (str, int, float)) and not isinstance(value, bool) else json.dumps(value)


class AutoscaleRecords:
    def __init__(self, client: Any, keys: Keys, stream_maxlen: int):
        self.r, self.k, self.maxlen = client, keys, stream_maxlen

    def state(self) -> dict[str, Any] | None:
        """The state the last pass saved; None before any pass (or when it was unreadable)."""
        raw = self.r.get(self.k.autoscale_state)
        try:
            data = json.loads(raw) if raw else None
        except ValueError:
            return None
        return data if isinstance(data, dict) else None

    def decisions(self) -> dict[str, Any] | None:
        """What the last pass decided (``{"at", "fleets": [...], "pools": [...]}``); None before any."""
        raw = self.r.get(self.k.autoscale_decisions)
        return json.loads(raw) if raw else None

    def last_changes(self) -> dict[str, dict[str, Any]]:
        """``fleet:<queue>`` / ``pool:<pool>`` → its last change, as its event recorded it."""
        return {k: json.loads(v) for k, v in self.r.hgetall(self.k.autoscale_changes).items()}

    def save_state(self, state: Mapping[str, Any]) -> None:
        """Saved as soon as a pass has decided, before it acts: a pass cut short still counts its
        recommendations and scale events for the next (HPA's stabilization and policies)."""
        self.r.set(self.k.autoscale_state, json.dumps(state))

    def record_pass(self, decisions: Mapping[str, Any], changes: Sequence[Mapping[str, Any]], actor: str) -> None:
        """Save what one pass decided and did in one MULTI: its decisions and an event per change.
        Each change names its ``target`` (``fleet:<queue>`` or ``pool:<pool>``) and ``event`` (one of EVENTS)."""
        now = time.time()
        with self.r.pipeline(transaction=True) as pipe:
            pipe.set(self.k.autoscale_decisions, json.dumps({"at": now, **decisions}))
            for change in changes:
                if change["event"] not in EVENTS:
                    raise ValueError(f"autoscale event {change['event']!r}: not one of {', '.join(EVENTS)}")
                event = {"actor": actor, "time": now, **{k: v for k, v in change.items() if v is not None}}
                pipe.xadd(self.k.events, {k: _field(v) for k, v in event.items() if k != "target"},
                          maxlen=self.maxlen, approximate=True)
                pipe.hset(self.k.autoscale_changes, change["target"], json.dumps(event))
            pipe.execute()
