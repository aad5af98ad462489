"""The REST API's records: bearer tokens (only a salted HMAC of each secret is kept) and the
refusals and token changes it records in the global event stream.

A token record (``HGET <prefix>:api:tokens <id>``) is JSON: ``id``, ``user``, ``admin``, ``salt``
and ``hash`` (hex), ``created`` (epoch seconds) and ``created_by``. Hashing and checking are
``crossdock.api.tokens``'; this module only keeps what it is handed.

Events (``XRANGE <prefix>:events``) carry ``event``: ``refused`` (``actor``, ``action``, ``reason``,
``via=api``; ``job`` when a job was named), ``token_created`` or ``token_revoked`` (``token``,
``user``, ``actor``), and ``time``.
"""

from __future__ import annotations

import json
import time
from typing import Any, Mapping

from crossdock.backends.redis_store.job_events import queue_job_event
from crossdock.backends.redis_store.keys import Keys


class AccessRecords:
    def __init__(self, client: Any, keys: Keys, stream_maxlen: int):
        self.r, self.k, self.maxlen = client, keys, stream_maxlen

    def put_token(self, record: Mapping[str, Any], actor: str) -> bool:
        """Store a new token (False, nothing stored, when its id is taken) with its event."""
        if not self.r.hsetnx(self.k.api_tokens, record["id"], json.dumps(dict(record))):
            return False
        self._event({"event": "token_created", "token": record["id"], "user": record["user"], "actor": actor})
        return True

    def token(self, token_id: str) -> dict[str, Any] | None:
        raw = self.r.hget(self.k.api_tokens, token_id)
        return json.loads(raw) if raw else None

    def tokens(self) -> list[dict[str, Any]]:
        """Every token record, oldest first."""
        records = [json.loads(v) for v in self.r.hvals(self.k.api_tokens)]
        return sorted(records, key=lambda rec: rec.get("created", 0))

    def revoke_token(self, token_id: str, actor: str) -> dict[str, Any] | None:
        """Delete a token; its record as it was, or None when there is none by that id."""
        with self.r.pipeline(transaction=True) as pipe:
            pipe.hget(self.k.api_tokens, token_id)
            pipe.hdel(self.k.api_tokens, token_id)
            raw, deleted = pipe.execute()
        if not deleted:
            return None
        record = json.loads(raw)
        self._event({"event": "token_revoked", "token": token_id, "user": record["user"], "actor": actor})
        return record

    def record_refusal(self, actor: str, action: str, reason: str, job_id: int | None = None) -> None:
        """A request the API refused (403): in the global stream, and the job's when it names one."""
        event = {"event": "refused", "actor": actor, "action": action, "reason": reason, "via": "api"}
        if job_id is None:
            self._event(event)
            return
        with self.r.pipeline(transaction=False) as pipe:
            queue_job_event(self.r, pipe, self.k, job_id, {**event, "time": time.time()}, self.maxlen)
            self._event({"job": job_id, **event}, pipe)
            pipe.execute()

    def _event(self, fields: Mapping[str, Any], pipe: Any = None) -> None:
        (pipe or self.r).xadd(self.k.events, {**fields, "time": time.time()}, maxlen=self.maxlen, approximate=True)
