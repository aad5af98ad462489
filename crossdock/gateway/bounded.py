"""The multi-user socket's bounds, so that no local user starves the service: connections per uid
and in all (each is one of the service's threads), and requests read a bounded piece at a time.

A request line is read 64 KiB at a time and never past ``limits.max_request_bytes``. A longer
line (a Python job's arguments) is read and answered holding one of its user's two large-request
slots, so that one user's memory in the service is at most two such requests plus 64 KiB per
connection, however many connections they open.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import BinaryIO, Iterator

from crossdock.queue.bounds import too_many_connections
from crossdock.queue.config_limits import Limits

CHUNK = 64 * 1024
"""A request up to this long is read without a large-request slot."""
LARGE_PER_USER = 2
"""Requests over :data:`CHUNK` one user may have in the service at once; more wait their turn."""


class TooLarge(Exception):
    """A request line over ``limits.max_request_bytes`` (what was read of it is dropped)."""


class Connections:
    """Open connections per uid, and each uid's large-request slots."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._open: dict[int, int] = {}
        self._large: dict[int, threading.BoundedSemaphore] = {}

    def admit(self, uid: int, limits: Limits) -> str | None:
        """Count a new connection of ``uid``; or, over a limit, the line that refuses it (not counted)."""
        with self._lock:
            total, mine = sum(self._open.values()), self._open.get(uid, 0)
            if mine >= limits.max_connections_per_user:
                return too_many_connections(uid, mine, True, limits)
            if total >= limits.max_connections:
                return too_many_connections(uid, total, False, limits)
            self._open[uid] = mine + 1
            self._large.setdefault(uid, threading.BoundedSemaphore(LARGE_PER_USER))
            return None

    def release(self, uid: int) -> None:
        with self._lock:
            left = self._open.get(uid, 0) - 1
            if left > 0:
                self._open[uid] = left
            else:
                self._open.pop(uid, None)
                self._large.pop(uid, None)

    def open(self, uid: int | None = None) -> int:
        """Connections open: ``uid``'s, or all."""
        with self._lock:
            return sum(self._open.values()) if uid is None else self._open.get(uid, 0)

    def slot(self, uid: int) -> threading.BoundedSemaphore:
        with self._lock:
            return self._large.setdefault(uid, threading.BoundedSemaphore(LARGE_PER_USER))


@contextmanager
def next_request(rfile: BinaryIO, limit: int, slot: threading.BoundedSemaphore, wait: float) -> Iterator[bytes]:
    """The next request line (b"" at the end of the stream), held while the body runs; a line
    over :data:`CHUNK` is read and handled holding ``slot`` (waiting up to ``wait`` s for it).
    Raises :class:`TooLarge` past ``limit`` bytes, TimeoutError when the socket's timeout or the
    wait for a slot runs out."""
    line = rfile.readline(min(CHUNK, limit + 1))
    if not line or line.endswith(b"\n") or len(line) > limit:
        if len(line) > limit:
            raise TooLarge()
        yield line
        return
    if not slot.acquire(timeout=wait):
        raise TimeoutError("no large-request slot came free")
    try:
        parts = [line]
        size = len(line)
        while not parts[-1].endswith(b"\n") and size <= limit:
            part = rfile.readline(min(1 << 20, limit + 1 - size))
            if not part:
                break
            parts.append(part)
            size += len(part)
        if size > limit:
            del parts
            raise TooLarge()
        yield b"".join(parts)
    finally:
        slot.release()
