"""Durable writes: a write the store acknowledges is on the master and on ``wait_replicas`` of its
replicas, so a Sentinel failover (which promotes the most up-to-date replica) cannot lose it.

Redis replicates asynchronously: without this, what the master acknowledged in the moment before
it died is gone once a replica that had not received it is promoted (Redis' documented limit; the
figure for crossdock is in ``tests/integration/local/test_sentinel_durability.py``). Asked for in
the store's URL::

    CROSSDOCK_REDIS_URL=redis+sentinel://h1:26379,h2:26379,h3:26379/crossdock?wait_replicas=1&wait_timeout_ms=500

After every command or pipeline that writes, the client sends ``WAIT wait_replicas
wait_timeout_ms`` on the same connection (WAIT counts the replicas that acknowledged that
connection's last write). Fewer in time raises :class:`NotReplicated`, a ``StoreUnavailable``: the
write is on the master but not acknowledged, its outcome unknown, as for a connection lost before
the reply. Every caller already retries those, and the ones that create (submissions with their
idempotency token) settle on one copy. ``WAIT`` inside ``MULTI`` would not block, so a transaction
waits after its ``EXEC``.

What this does not do: it makes acknowledged writes survive the master's loss, not a split brain.
An isolated master that goes on taking writes acknowledges none of them (its WAIT times out), but
readers may see them until it rejoins as a replica and drops them; ``min-replicas-to-write 1`` on
the master refuses such writes outright.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from crossdock.queue.errors import CrossdockError, StoreUnavailable

PARAMS = ("wait_replicas", "wait_timeout_ms")
DEFAULT_TIMEOUT_MS = 1000

READS = frozenset({
    "BITCOUNT", "BITPOS", "CLIENT", "CONFIG", "DBSIZE", "DISCARD", "DUMP", "ECHO", "EVALSHA_RO", "EVAL_RO", "EXISTS",
    "EXPIRETIME", "GET", "GETBIT", "GETRANGE", "HELLO", "HEXISTS", "HGET", "HGETALL", "HKEYS", "HLEN", "HMGET",
    "HSCAN", "HSTRLEN", "HVALS", "INFO", "KEYS", "LINDEX", "LLEN", "LPOS", "LRANGE", "MEMORY", "MGET", "MULTI",
    "OBJECT", "PEXPIRETIME", "PING", "PTTL", "PUBSUB", "RANDOMKEY", "ROLE", "SCAN", "SCARD", "SCRIPT", "SELECT", "SINTERCARD",
    "SISMEMBER", "SMEMBERS", "SMISMEMBER", "SRANDMEMBER", "SSCAN", "STRLEN", "SUBSCRIBE", "TIME", "TTL", "TYPE",
    "UNWATCH", "WAIT", "WATCH", "XINFO", "XLEN", "XPENDING", "XRANGE", "XREAD", "XREVRANGE", "ZCARD", "ZCOUNT", "ZINTERCARD",
    "ZLEXCOUNT", "ZMSCORE", "ZRANDMEMBER", "ZRANGE", "ZRANGEBYLEX", "ZRANGEBYSCORE", "ZRANK", "ZREVRANGE",
    "ZREVRANGEBYLEX", "ZREVRANGEBYSCORE", "ZREVRANK", "ZSCAN", "ZSCORE",
})
"""Commands that change no data. Every other one (scripts included) counts as a write: a WAIT too
many costs a round trip, one too few an acknowledged write that a failover may lose."""


class BadDurability(CrossdockError, ValueError):
    """``wait_replicas``/``wait_timeout_ms`` in ``CROSSDOCK_REDIS_URL`` cannot be read."""


class NotReplicated(StoreUnavailable):
    """A write the master took that too few replicas acknowledged in time: not acknowledged."""


@dataclass(frozen=True)
class Durability:
    replicas: int
    timeout_ms: int = DEFAULT_TIMEOUT_MS

    def confirm(self, client: Any, conn: Any) -> None:
        """WAIT on ``conn``, the connection that just wrote; :class:`NotReplicated` when too few
        replicas acknowledged within the timeout."""
        conn.send_command("WAIT", self.replicas, self.timeout_ms)
        acked = int(client.parse_response(conn, "WAIT"))
        if acked < self.replicas:
            raise NotReplicated(
                f"the master took the write but {acked} of the {self.replicas} replicas asked for (wait_replicas in"
                f" CROSSDOCK_REDIS_URL) acknowledged it within {self.timeout_ms} ms; its outcome is unknown: try again")


def replicas_online(client: Any) -> int:
    """Replicas the master behind ``client`` streams to now (``INFO replication``, state online)."""
    info = client.info("replication")
    return sum(1 for k, v in info.items() if k.startswith("slave") and isinstance(v, dict) and v.get("state") == "online")


def health(client: Any, wanted: Durability) -> dict[str, Any]:
    """``crossdock health``'s line for durable writes: whether enough replicas are online for any
    write to be acknowledged."""
    online = replicas_online(client)
    ok = online >= wanted.replicas
    detail = (f"wait_replicas={wanted.replicas}: {online} replica(s) online"
              + ("" if ok else "; no write is acknowledged until enough are (the store looks away meanwhile)"))
    return {"name": "durable writes", "ok": ok, "detail": detail}


def writes(commands: Iterable[tuple[Any, ...]]) -> bool:
    """Whether any of ``commands`` (argument tuples, the command's name first) may change data."""
    return any(str(args[0]).split(" ", 1)[0].upper() not in READS for args in commands if args)


def split(url: str) -> tuple[str, Durability | None]:
    """``url`` without the durability parameters, and the durability they ask for (None: none,
    or ``wait_replicas=0``). :class:`BadDurability` names a value that is not a whole number."""
    parts = urlsplit(url)
    query = parse_qsl(parts.query, keep_blank_values=True)
    asked = {k: v for k, v in query if k in PARAMS}
    if not asked:
        return url, None
    values, problems = {}, []
    for key, value in asked.items():
        values[key] = int(value) if value.isdigit() else -1
        if values[key] < 0:
            problems.append(f"{key}={value!r} is not a whole number")
    if values.get("wait_timeout_ms") == 0:
        problems.append("wait_timeout_ms=0 would wait for ever when a replica is away")
    if problems:
        raise BadDurability(f"CROSSDOCK_REDIS_URL: {'; '.join(problems)}; write e.g."
                            f" wait_replicas=1&wait_timeout_ms={DEFAULT_TIMEOUT_MS}")
    rest = urlunsplit(parts._replace(query=urlencode([(k, v) for k, v in query if k not in PARAMS])))
    replicas = values.get("wait_replicas", 0)
    return rest, Durability(replicas, values.get("wait_timeout_ms", DEFAULT_TIMEOUT_MS)) if replicas else None
