"""Per-user bearer tokens for the REST API: made by an admin (``crossdock tokens create USER``),
shown once, kept only as a salted HMAC-SHA256 of their secret, checked in constant time.

A token reads ``cdt_<id>_<secret>``: ``id`` (12 hex digits) finds its record, ``secret`` (43
URL-safe characters, 256 random bits) proves it. The secret is random and long, so one keyed
hash is enough (a password hash's deliberate slowness protects guessable secrets, which these
are not, and would cost every request). Imports neither FastAPI nor the server: the CLI uses it.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import time
from dataclasses import dataclass
from typing import Any

from crossdock.queue.errors import CrossdockError

PREFIX = "cdt_"
_FORM = re.compile(r"cdt_([0-9a-f]{12})_([A-Za-z0-9_-]{43})")
_USER = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.@-]{0,63}")
_DUMMY_SALT = bytes(16)


class BadToken(CrossdockError):
    """A bearer token that is malformed, unknown or revoked."""


@dataclass(frozen=True)
class Token:
    """Whom a checked token stands for (``admin``: its own grant; the config's ``admins`` add to it)."""

    id: str
    user: str
    admin: bool


def _digest(salt: bytes, secret: str) -> str:
    return hmac.new(salt, secret.encode(), hashlib.sha256).hexdigest()


def check_user(user: str) -> str:
    if not _USER.fullmatch(user):
        raise CrossdockError(f"USER: {user!r} is not a user name; use letters, digits and . _ @ - (at most 64)")
    return user


def new_token(user: str, admin: bool, created_by: str) -> tuple[str, dict[str, Any]]:
    """A fresh token: its text (given to the user once) and the record the store keeps."""
    token_id, secret, salt = secrets.token_hex(6), secrets.token_urlsafe(32), secrets.token_bytes(16)
    record = {"id": token_id, "user": check_user(user), "admin": bool(admin), "salt": salt.hex(),
              "hash": _digest(salt, secret), "created": time.time(), "created_by": created_by}
    return f"{PREFIX}{token_id}_{secret}", record


def token_id(text: str) -> str | None:
    """The id part of a well-formed token, else None."""
    m = _FORM.fullmatch(text)
    return m.group(1) if m else None


def verify(text: str, store: Any) -> Token:
    """The token ``text`` stands for, from ``store.access``; BadToken when it does not check.
    The comparison is constant-time, and an unknown id costs the same hash as a known one."""
    m = _FORM.fullmatch(text)
    if m is None:
        raise BadToken("the bearer token is not a crossdock token (cdt_…); ask an admin for one"
                       " (crossdock tokens create USER)")
    record = store.access.token(m.group(1))
    salt = bytes.fromhex(record["salt"]) if record else _DUMMY_SALT
    good = hmac.compare_digest(_digest(salt, m.group(2)), record["hash"] if record else "0" * 64)
    if record is None or not good:
        raise BadToken(f"token {m.group(1)}: unknown or revoked; ask an admin for a new one")
    return Token(record["id"], record["user"], bool(record.get("admin")))
