"""HMAC-SHA256 seals on what crossdock unpickles: Python payloads and their results.

A Redis key can be written by anyone who reaches Redis, so nothing read from one is unpickled
unless it carries a seal made with its owner's key. The service holds one secret, the master key
(``hmac.key`` in its state directory, 0600, created on first use; or the file
``CROSSDOCK_MASTER_KEY_FILE`` names, which is never created: several hosts or pods of one
installation, the Helm chart's, share one key so); a user's key is derived from
it (``HMAC(master, "crossdock-user" + name)``), so another user's key cannot forge theirs. The
service (supervisor, runner) derives any user's key; a user who cannot read the master key is
given theirs by the service as a 0600 file of their own (:func:`issue_user_key`) and names it in
``CROSSDOCK_SIGNING_KEY``. A seal covers a context (``payload``, ``result:<job id>``) so that a
result cannot be replayed onto another job.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
from pathlib import Path
from typing import Any

from crossdock.queue.errors import BadSignature, CrossdockError

KEY_FILE = "hmac.key"
MASTER_KEY_ENV = "CROSSDOCK_MASTER_KEY_FILE"
MAGIC = b"CDS1"
_MAC_LEN = hashlib.sha256().digest_size


def master_path(state_dir: Path) -> Path:
    """Where the service's secret is: ``CROSSDOCK_MASTER_KEY_FILE``, else ``hmac.key`` in ``state_dir``."""
    named = os.environ.get(MASTER_KEY_ENV, "").strip()
    return Path(named) if named else Path(state_dir) / KEY_FILE


def master_key(state_dir: Path) -> bytes:
    """The service's secret, created (0600, in a 0700 state dir) by the first process needing it;
    a file named by ``CROSSDOCK_MASTER_KEY_FILE`` must exist (it is shared, never made here)."""
    path = master_path(state_dir)
    try:
        return path.read_bytes()
    except FileNotFoundError:
        if os.environ.get(MASTER_KEY_ENV, "").strip():
            raise CrossdockError(f"{MASTER_KEY_ENV}={path}: no such file; mount the installation's signing key"
                                 f" there (the Helm chart's Secret), or unset {MASTER_KEY_ENV}") from None
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:  # another process won the race: its key is the key
        return path.read_bytes()
    with os.fdopen(fd, "wb") as f:
        f.write(secrets.token_bytes(32))
    return path.read_bytes()


def derive(master: bytes, user: str) -> bytes:
    return hmac.new(master, b"crossdock-user\0" + user.encode(), hashlib.sha256).digest()


def user_key(state_dir: Path, user: str) -> bytes:
    """``user``'s key: derived from the master key when this process may read it (the service),
    else the key file the service issued to this user (``CROSSDOCK_SIGNING_KEY``), else derived
    from a master key made now (a single-user installation's first use)."""
    master = master_path(state_dir)
    issued = os.environ.get("CROSSDOCK_SIGNING_KEY")
    try:
        return derive(master.read_bytes(), user)
    except FileNotFoundError:
        if not issued:
            return derive(master_key(state_dir), user)
    except PermissionError:
        if not issued:
            raise CrossdockError(f"no signing key for user {user!r}: {master} is the service's; ask an admin"
                                 " for yours (crossdock issue-key) and set CROSSDOCK_SIGNING_KEY to it") from None
    try:
        return Path(issued).read_bytes()
    except OSError as exc:
        raise CrossdockError(f"CROSSDOCK_SIGNING_KEY: cannot read {issued!r}: {exc.strerror}") from None


def issue_user_key(state_dir: Path, user: str, uid: int, gid: int, path: Path) -> Path:
    """Write ``user``'s key to ``path`` (0600, owned by ``uid``:``gid``) for their own clients."""
    key = derive(master_key(state_dir), user)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(key)
    os.chown(path, uid, gid)
    return path


def _mac(key: bytes, context: str, data: bytes) -> bytes:
    return hmac.new(key, context.encode() + b"\0" + data, hashlib.sha256).digest()


def seal(key: bytes, context: str, data: bytes) -> bytes:
    return MAGIC + _mac(key, context, data) + data


def unseal(key: bytes, context: str, blob: bytes, what: str) -> bytes:
    """The data of a sealed ``blob``; :class:`BadSignature` naming ``what`` when unsigned or forged."""
    head, mac, data = blob[:len(MAGIC)], blob[len(MAGIC):len(MAGIC) + _MAC_LEN], blob[len(MAGIC) + _MAC_LEN:]
    if head != MAGIC:
        raise BadSignature(f"{what} is unsigned; refusing to unpickle it (was it written by something"
                           " other than crossdock?)")
    if not hmac.compare_digest(mac, _mac(key, context, data)):
        raise BadSignature(f"{what} has a signature that does not match its owner's key; refusing to unpickle it"
                           " (tampered with in the store?)")
    return data


def sign_text(key: bytes, context: str, text: str) -> str:
    """A hex seal of ``text`` kept beside it (a payload travels as base64 text in the spec)."""
    return _mac(key, context, text.encode()).hex()


def check_text(key: bytes, context: str, text: str, signature: str, what: str) -> None:
    if not signature:
        raise BadSignature(f"{what} is unsigned; refusing to unpickle it")
    if not hmac.compare_digest(bytes.fromhex(signature) if _is_hex(signature) else b"",
                               _mac(key, context, text.encode())):
        raise BadSignature(f"{what} has a signature that does not match its owner's key; refusing to unpickle it")


def check_payload(state_dir: Path, spec: Any, what: str) -> None:
    """Refuse (:class:`BadSignature`) a spec's Python payload not sealed with its owner's key (a
    ``map``'s parts live in the store, each sealed: the runner checks them where it reads them)."""
    if spec.python is not None and not spec.python.parts:
        check_text(user_key(state_dir, spec.user), "payload", spec.python.payload, spec.python.signature, what)


def _is_hex(text: str) -> bool:
    try:
        bytes.fromhex(text)
    except ValueError:
        return False
    return True
