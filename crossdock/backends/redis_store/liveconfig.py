"""The live admin config: the version stored for the leader (``desired``) and the one it switched
to (``in_force``), with one event per applied or refused change in the global event stream.

A record is a hash: ``version`` (an integer, one more per stored change), ``text`` (the YAML as
the admin wrote it), ``digest`` (sha256 of the text), ``source`` (the file it came from), ``by``
(who stored it) and ``at``; the in-force record adds ``holder`` (the leader that switched) and
``switched_at``. An event (``XRANGE <prefix>:events``) has ``event`` ``config_applied`` (with
``version``, ``changes``: JSON list of :meth:`Change.to_json` records, and ``diff``: the printed
lines joined by newlines) or ``config_refused`` (with ``errors``); like the autoscaler's events it
has no ``job`` field. ``config_sources`` keeps, per source, the last text stored from it: what
``up``'s file held when it last became the config (the base its later edits are compared with).
"""

from __future__ import annotations

import hashlib
import json
import time
from typing import Any, Sequence

import redis

from crossdock.backends.redis_store.keys import Keys

EVENTS = ("config_applied", "config_refused")


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


class ConfigRecords:
    def __init__(self, client: Any, keys: Keys, stream_maxlen: int):
        self.r, self.k, self.maxlen = client, keys, stream_maxlen

    def _record(self, key: str) -> dict[str, Any] | None:
        raw = self.r.hgetall(key)
        if not raw or "version" not in raw:
            return None
        return {**raw, "version": int(raw["version"])}

    def desired(self) -> dict[str, Any] | None:
        return self._record(self.k.config_desired)

    def in_force(self) -> dict[str, Any] | None:
        return self._record(self.k.config_in_force)

    def desired_version(self) -> int:
        """0 when nothing was stored: one round trip, what the leader asks at every cycle boundary."""
        return int(self.r.hget(self.k.config_desired, "version") or 0)

    def in_force_version(self) -> int:
        return int(self.r.hget(self.k.config_in_force, "version") or 0)

    def store(self, text: str, source: str, by: str) -> tuple[int, bool]:
        """Store ``text`` for the leader; (its version, whether it is new). The same text as the
        stored one keeps its version (several schedulers starting with one file store it once)."""
        sha = digest(text)
        key = self.k.config_desired
        with self.r.pipeline(transaction=True) as pipe:
            while True:
                try:
                    pipe.watch(key)
                    current = pipe.hmget(key, "version", "digest")
                    if current[1] == sha:  # the source now holds what is stored: its base from now
                        self.r.hset(self.k.config_sources, source, json.dumps({"version": int(current[0]),
                                                                               "text": text}))
                        return int(current[0]), False
                    version = int(current[0] or 0) + 1
                    pipe.multi()
                    pipe.hset(key, mapping={"version": version, "text": text, "digest": sha, "source": source,
                                            "by": by, "at": time.time()})
                    pipe.hset(self.k.config_sources, source, json.dumps({"version": version, "text": text}))
                    pipe.execute()
                    return version, True
                except redis.WatchError:  # another store raced this one: read again
                    continue

    def from_source(self, source: str) -> dict[str, Any] | None:
        """The last config stored from ``source``: ``{version, text}``, None if none was."""
        raw = self.r.hget(self.k.config_sources, source)
        return json.loads(raw) if raw else None

    def switched(self, record: dict[str, Any], holder: str, changes: Sequence[Any]) -> None:
        """The leader switched to ``record``: it is in force, and the event carries the diff."""
        now = time.time()
        with self.r.pipeline(transaction=True) as pipe:
            pipe.hset(self.k.config_in_force, mapping={**{k: v for k, v in record.items()},
                                                        "holder": holder, "switched_at": now})
            pipe.xadd(self.k.events, {"event": "config_applied", "actor": holder, "by": record.get("by", ""),
                                      "time": now, "version": record["version"], "source": record.get("source", ""),
                                      "changes": json.dumps([c.to_json() for c in changes]),
                                      "diff": "\n".join(str(c) for c in changes)},
                      maxlen=self.maxlen, approximate=True)
            pipe.execute()

    def refused(self, source: str, errors: Sequence[str], actor: str, version: int | None = None) -> None:
        """A config that failed validation (a reload of ``up``'s file, a stored one the leader cannot read)."""
        event = {"event": "config_refused", "actor": actor, "time": time.time(), "source": source,
                 "errors": "\n".join(errors)}
        if version is not None:
            event["version"] = version
        self.r.xadd(self.k.events, event, maxlen=self.maxlen, approximate=True)

    def events(self, count: int = 100) -> list[dict[str, str]]:
        """The latest config events, oldest first."""
        found = [fields for _id, fields in self.r.xrevrange(self.k.events, count=10 * count)
                 if fields.get("event") in EVENTS]
        return list(reversed(found[:count]))
