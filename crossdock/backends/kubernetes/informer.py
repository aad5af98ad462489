"""An informer: a local cache of one kind of object, kept current by a watch.

It lists once (paged), then watches from the list's resourceVersion. When a watch ends
(server timeout, dropped connection, an API server restart) it resumes from the last
resourceVersion it saw, so no change is missed; when the server answers 410 Gone (that
version was compacted away) it lists again and turns every object that vanished meanwhile
into a DELETED event. Deleted objects stay as tombstones for a while: the last state of a
pod that kube-scheduler preempted and deleted is what tells crossdock why it ended.

Objects are the API's JSON (dicts); the client is only used to make the HTTP requests.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from kubernetes.client.rest import ApiException
from kubernetes.watch.watch import iter_resp_lines

log = logging.getLogger(__name__)

Obj = dict[str, Any]
Key = tuple[str, str]
ListCall = Callable[..., Any]
"""A ``list_*`` method of the client: called with ``label_selector``, ``_preload_content=False`` …"""


class Expired(Exception):
    """The watch's resourceVersion is gone (410): list again."""


def key_of(obj: Obj) -> Key:
    meta = obj.get("metadata") or {}
    return meta.get("namespace") or "", meta.get("name") or ""


def body(resp: Any) -> bytes:
    """Read a ``_preload_content=False`` response whole and give its connection back to the pool
    (an unread response keeps its connection, and the next call pays a new TLS handshake)."""
    try:
        return bytes(resp.data)
    finally:
        resp.release_conn()


def list_all(call: ListCall, page: int = 500, **kwargs: Any) -> tuple[list[Obj], str]:
    """Every object (paged) and the list's resourceVersion, as raw JSON."""
    items: list[Obj] = []
    token: str | None = None
    while True:
        resp = call(limit=page, _continue=token, _preload_content=False, **kwargs)
        page_body = json.loads(body(resp))
        items.extend(page_body.get("items") or [])
        meta = page_body.get("metadata") or {}
        token = meta.get("continue")
        if not token:
            return items, meta.get("resourceVersion", "")


class Informer:
    def __init__(self, call: ListCall, *, label_selector: str = "", field_selector: str = "",
                 watch_timeout: int = 60, tombstone_seconds: float = 900.0,
                 on_event: Callable[[str, Obj], None] | None = None, name: str = "informer") -> None:
        self.call = call
        self.selectors = {k: v for k, v in (("label_selector", label_selector),
                                             ("field_selector", field_selector)) if v}
        self.watch_timeout = watch_timeout
        self.tombstone_seconds = tombstone_seconds
        self.on_event = on_event
        self.name = name
        self.resource_version = ""
        self.lists = 0
        """How many times it listed (1 + one per 410)."""
        self.reconnects = 0
        self._objects: dict[Key, Obj] = {}
        self._tombstones: dict[Key, tuple[float, Obj]] = {}
        self._lock = threading.Lock()
        self._synced = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._response: Any = None

    # --- reading ---------------------------------------------------------------------------
    def objects(self, *, with_tombstones: bool = True) -> list[Obj]:
        with self._lock:
            live = list(self._objects.values())
            if not with_tombstones:
                return live
        return live + self.tombstones()

    def tombstones(self) -> list[Obj]:
        """The last state of each object deleted within ``tombstone_seconds`` (and not back)."""
        with self._lock:
            self._expire()
            return [o for k, (_, o) in self._tombstones.items() if k not in self._objects]

    def get(self, namespace: str, name: str) -> tuple[Obj | None, bool]:
        """(object, deleted): the live object, else its tombstone, else (None, False)."""
        with self._lock:
            obj = self._objects.get((namespace, name))
            if obj is not None:
                return obj, False
            tomb = self._tombstones.get((namespace, name))
            return (tomb[1], True) if tomb else (None, False)

    def wait_synced(self, timeout: float) -> bool:
        return self._synced.wait(timeout)

    @property
    def synced(self) -> bool:
        return self._synced.is_set()

    # --- feeding ---------------------------------------------------------------------------
    def _expire(self) -> None:
        cutoff = time.monotonic() - self.tombstone_seconds
        for k in [k for k, (t, _) in self._tombstones.items() if t < cutoff]:
            del self._tombstones[k]

    def _emit(self, kind: str, obj: Obj) -> None:
        if self.on_event is not None:
            try:
                self.on_event(kind, obj)
            except Exception:  # noqa: BLE001 - a listener must not stop the informer
                log.exception("%s: event listener failed", self.name)

    def apply(self, kind: str, obj: Obj) -> None:
        key = key_of(obj)
        with self._lock:
            if kind == "DELETED":
                self._objects.pop(key, None)
                self._tombstones[key] = (time.monotonic(), obj)
            else:
                self._objects[key] = obj
                self._tombstones.pop(key, None)
        self._emit(kind, obj)

    def relist(self) -> None:
        items, rv = list_all(self.call, **self.selectors)
        fresh = {key_of(o): o for o in items}
        with self._lock:
            gone = [o for k, o in self._objects.items() if k not in fresh]
            old = dict(self._objects)
        for obj in gone:
            self.apply("DELETED", obj)
        for k, obj in fresh.items():
            before = old.get(k)
            if before is None or (before.get("metadata") or {}).get("resourceVersion") != \
                    (obj.get("metadata") or {}).get("resourceVersion"):
                self.apply("ADDED" if before is None else "MODIFIED", obj)
        self.resource_version = rv
        self.lists += 1
        self._synced.set()

    def events(self) -> Iterator[tuple[str, Obj]]:
        """One watch from the current resourceVersion until the server ends it."""
        resp = self.call(watch=True, resource_version=self.resource_version, allow_watch_bookmarks=True,
                         timeout_seconds=self.watch_timeout, _preload_content=False,
                         _request_timeout=(10, self.watch_timeout + 15), **self.selectors)
        self._response = resp
        try:
            for line in iter_resp_lines(resp):
                event = json.loads(line)
                kind, obj = event.get("type"), event.get("object") or {}
                if kind == "ERROR":
                    if obj.get("code") == 410:
                        raise Expired(obj.get("message", "410 Gone"))
                    raise ApiException(status=obj.get("code") or 500, reason=obj.get("message"))
                yield str(kind), obj
        finally:
            self._response = None
            resp.release_conn()

    def watch_once(self) -> None:
        for kind, obj in self.events():
            rv = (obj.get("metadata") or {}).get("resourceVersion")
            if kind != "BOOKMARK":
                self.apply(kind, obj)
            if rv:
                self.resource_version = rv

    # --- the loop --------------------------------------------------------------------------
    def run(self) -> None:
        # A watch loop rather than a retried call (so not tenacity): each kind of end has its own next
        # step (410 Gone and Expired list again at once, a connection error backs off, a watch that
        # ran resets the backoff), and the pause is the stop event's wait, so a stop ends it at once.
        backoff = 0.2
        while not self._stop.is_set():
            try:
                if not self._synced.is_set() or not self.resource_version:
                    self.relist()
                self.watch_once()
                backoff = 0.2
            except Expired as exc:
                log.info("%s: watch expired (%s); listing again", self.name, exc)
                self.resource_version = ""
            except ApiException as exc:
                if exc.status == 410:
                    self.resource_version = ""
                    continue
                self._pause(backoff, exc)
                backoff = min(backoff * 2, 5.0)
            except Exception as exc:  # noqa: BLE001 - connection refused/reset while the server restarts
                self._pause(backoff, exc)
                backoff = min(backoff * 2, 5.0)

    def _pause(self, seconds: float, exc: BaseException) -> None:
        if self._stop.is_set():
            return
        self.reconnects += 1
        log.debug("%s: watch interrupted (%s); resuming from %s in %.1fs", self.name, exc,
                  self.resource_version or "a new list", seconds)
        self._stop.wait(seconds)

    def start(self) -> "Informer":
        if self._thread is None:
            self._thread = threading.Thread(target=self.run, name=self.name, daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        resp = self._response
        if resp is not None:
            try:
                resp.shutdown()
            except Exception:  # noqa: BLE001 - best effort: the thread is a daemon
                pass
        if self._thread is not None:
            self._thread.join(timeout=5)
