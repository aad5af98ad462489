"""Whether a Redis the service is pointed at is the service's alone: ``crossdock up`` as root
refuses one that anyone else could write (whoever writes the store decides what jobs are
dispatched, and how), unless told ``--insecure-shared-redis``."""

from __future__ import annotations

import os
from typing import Any
from urllib.parse import urlsplit

import redis

from crossdock.backends.redis_store.connect import is_sentinel, parse_sentinel
from crossdock.backends.redis_store.embedded import shown


def exposure(url: str, timeout: float = 2.0) -> list[str]:
    """Why anyone but the service could write the Redis at ``url`` (empty: nothing found): a Unix
    socket that others may write, or a server that answers a client which gives no password (asked
    without the URL's credentials; a Sentinel URL must carry the master's password)."""
    if is_sentinel(url):
        s = parse_sentinel(url)
        return [] if s.password else [f"the Sentinel URL {shown(url)} carries no password for the master"]
    parts = urlsplit(url)
    problems = []
    if parts.scheme == "unix":
        mode = _mode(parts.path)
        if mode is not None and mode & 0o002:
            problems.append(f"its socket {parts.path} is writable by every user (mode {mode & 0o777:o})")
        bare: dict[str, Any] = {"unix_socket_path": parts.path}
    else:
        bare = {"host": parts.hostname or "localhost", "port": parts.port or 6379, "ssl": parts.scheme == "rediss"}
    try:
        with redis.Redis(**bare, socket_timeout=timeout, socket_connect_timeout=timeout) as anonymous:
            anonymous.ping()
        problems.append(f"{shown(url)} answers a client that gives no password (no requirepass, and ACL's"
                        " default user is on with nopass)")
    except redis.AuthenticationError:
        pass
    except redis.ResponseError as exc:  # NOAUTH
        if "NOAUTH" not in str(exc) and "auth" not in str(exc).lower():
            raise
    except (redis.ConnectionError, redis.TimeoutError, OSError):
        if not (parts.password or parts.username):  # not reached: its own URL must then say who it is
            problems.append(f"{shown(url)} carries no password")
    return problems


def _mode(path: str) -> int | None:
    try:
        return os.stat(path).st_mode
    except OSError:
        return None
