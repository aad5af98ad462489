"""Connecting to Redis from a URL: a plain server (``redis://``, ``rediss://``, ``unix://``) or a
master found through Redis Sentinel.

A Sentinel URL names the sentinels, the monitored master's name and the database::

    redis+sentinel://[[user]:password@]host[:port][,host[:port]...]/<master name>[/<db>][?sentinel_password=…]

The password is the master's (and its replicas'); ``sentinel_password`` is for sentinels that ask
for one (``requirepass`` in sentinel.conf); ``wait_replicas`` and ``wait_timeout_ms`` (any URL)
make acknowledged writes durable (:mod:`.durability`). The port defaults to 26379. redis-py's
:class:`~redis.sentinel.Sentinel` asks the sentinels for the master on every new connection, so a
client reconnects to the promoted replica after a failover: the commands under way meanwhile fail
with ConnectionError or ReadOnlyError, which the client raises as ``StoreUnavailable``
(:mod:`.unavailable`): a store that is away, which every caller retries. Celery's broker gets
the same sentinels in kombu's spelling (:func:`kombu_broker`).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from importlib import metadata
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry
from redis.sentinel import Sentinel

from crossdock.backends.redis_store import durability
from crossdock.backends.redis_store.unavailable import StoreClient
from crossdock.queue.errors import CrossdockError

SENTINEL_SCHEMES = ("redis+sentinel", "rediss+sentinel")
SENTINEL_PORT = 26379


class BadRedisURL(CrossdockError, ValueError):
    """``CROSSDOCK_REDIS_URL`` cannot be read: the message names the part and the fix."""


@dataclass(frozen=True)
class SentinelURL:
    sentinels: tuple[tuple[str, int], ...]
    master: str
    db: int = 0
    username: str | None = None
    password: str | None = None
    sentinel_password: str | None = None
    ssl: bool = False


def is_sentinel(url: str) -> bool:
    return url.split("://", 1)[0].lower() in SENTINEL_SCHEMES


def parse_sentinel(url: str) -> SentinelURL:
    """The parts of a ``redis+sentinel://`` URL; :class:`BadRedisURL` naming what is wrong."""
    scheme, _, rest = url.partition("://")
    if scheme.lower() not in SENTINEL_SCHEMES:
        raise BadRedisURL(f"{scheme}://: not a Sentinel URL; use redis+sentinel://host:port,…/<master name>")
    parts = urlsplit(f"redis://{rest}")
    userinfo, _, hosts = parts.netloc.rpartition("@")
    username, _, password = userinfo.partition(":") if userinfo else ("", "", "")
    sentinels = []
    for item in (h.strip() for h in hosts.split(",")):
        host, port = item, ""
        if item.startswith("["):  # [::1]:26379
            host, _, port = item[1:].partition("]")
            port = port.removeprefix(":")
        elif ":" in item:
            host, _, port = item.rpartition(":")
        if not host:
            raise BadRedisURL(f"CROSSDOCK_REDIS_URL: empty sentinel host in {hosts!r}; list host:port,host:port")
        try:
            sentinels.append((host, int(port) if port else SENTINEL_PORT))
        except ValueError:
            raise BadRedisURL(f"CROSSDOCK_REDIS_URL: sentinel port {port!r} is not a number") from None
    path = [p for p in parts.path.split("/") if p]
    if not path:
        raise BadRedisURL("CROSSDOCK_REDIS_URL: a Sentinel URL names the master after the hosts:"
                          " redis+sentinel://host:26379/<master name>[/<db>]")
    try:
        db = int(path[1]) if len(path) > 1 else 0
    except ValueError:
        raise BadRedisURL(f"CROSSDOCK_REDIS_URL: database {path[1]!r} is not a number") from None
    query = parse_qs(parts.query)
    return SentinelURL(tuple(sentinels), unquote(path[0]), db, unquote(username) or None, unquote(password) or None,
                       (query.get("sentinel_password") or [None])[0], scheme.lower().startswith("rediss"))


@functools.lru_cache(maxsize=1)
def redis_version() -> str:
    try:
        return metadata.version("redis")
    except metadata.PackageNotFoundError:
        return "99.99.99"  # what redis-py itself says then


def _identity() -> dict[str, Any]:
    """How a connection names its client (CLIENT SETINFO), with redis-py's version looked up once
    per process: redis-py reads its package metadata for every new connection otherwise (about a
    fifth of a local supervisor's CPU, which makes one connection)."""
    try:
        from redis.driver_info import DriverInfo
    except ImportError:  # redis-py before driver_info
        return {"lib_version": redis_version()}
    return {"driver_info": DriverInfo(lib_version=redis_version())}


def client(url: str, redis_class: type[StoreClient] = StoreClient, *, retries: int | None = None,
           **kwargs: Any) -> StoreClient:
    """A client for ``url`` (of ``redis_class``, whose errors of an away store are
    ``StoreUnavailable``); ``kwargs`` as :meth:`redis.Redis.from_url` takes them (timeouts,
    decode_responses), applied to the master's connections under Sentinel. ``retries``: how many
    times a failed command is tried again at once (0: one try, for a caller that retries on its
    own schedule); None keeps redis-py's default (a few, with backoff). ``wait_replicas`` and
    ``wait_timeout_ms`` in the URL's query make its writes durable (:mod:`.durability`)."""
    url, wanted = durability.split(url)
    out = _client(url, redis_class, retries, **kwargs)
    out.durability = wanted
    return out


def _client(url: str, redis_class: type[StoreClient], retries: int | None, **kwargs: Any) -> StoreClient:
    if retries is not None:
        kwargs["retry"] = Retry(NoBackoff(), retries)
    if "driver_info" not in kwargs and "lib_version" not in kwargs:
        kwargs.update(_identity())
    if not is_sentinel(url):
        return redis_class.from_url(url, **kwargs)
    s = parse_sentinel(url)
    timeouts = {k: kwargs[k] for k in ("socket_timeout", "socket_connect_timeout") if k in kwargs}
    sentinel = Sentinel(list(s.sentinels), sentinel_kwargs={**timeouts, "password": s.sentinel_password},
                        **timeouts)
    return sentinel.master_for(s.master, redis_class=redis_class, db=s.db, username=s.username, password=s.password,
                               ssl=s.ssl, **kwargs)


def kombu_broker(url: str) -> tuple[str, dict[str, Any]]:
    """Celery's broker URL and transport options for a Sentinel URL (kombu lists the sentinels
    ``sentinel://h:p;sentinel://h:p/<db>`` and takes the master's name as an option)."""
    s = parse_sentinel(url)
    auth = ""
    if s.password or s.username:
        auth = f"{s.username or ''}:{s.password or ''}@"
    broker = ";".join(f"sentinel://{auth}{host}:{port}/{s.db}" for host, port in s.sentinels)
    options: dict[str, Any] = {"master_name": s.master}
    if s.sentinel_password:
        options["sentinel_kwargs"] = {"password": s.sentinel_password}
    return broker, options
