"""Who calls the REST API: a bearer token's user (``crossdock tokens create``), or, on the API's
Unix socket, the connecting process's uid from the kernel (``SO_PEERCRED``), as the multi-user
socket knows its callers. Nothing a request declares (a user name, a header) makes anyone
someone else; admins are a token's own grant or the config's ``admins`` (root on the socket).

What then may be done to which job is the service's one ownership check
(:func:`crossdock.service.authorize`), shared with the CLI and the Python API.
"""

from __future__ import annotations

import threading
import time
from typing import Callable

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.concurrency import run_in_threadpool

from crossdock import service
from crossdock.api import tokens
from crossdock.runtime import Runtime

REMEMBER_SECONDS = 5.0
"""How long a checked credential is taken as it was (a revoked token is refused within this
long): most requests then need no store read, nor a worker thread, before their own work."""

PEER_UID = "crossdock.peer_uid"
"""The ASGI scope key where the Unix-socket server puts the peer's uid (see :mod:`crossdock.api.serve`)."""


BEARER = HTTPBearer(auto_error=False, description="a token from `crossdock tokens create USER` (not needed on"
                    " the API's Unix socket)")
"""Declares the scheme in the OpenAPI schema; the header is read by :func:`identify`, whose messages say more."""


class Unauthenticated(Exception):
    """No identity the API accepts (401): no token and not on the Unix socket, or a bad token."""


def identify(rt: Runtime, authorization: str | None, peer_uid: int | None) -> tuple[service.Caller, str]:
    """The caller and how it was known (``token <id>`` or ``peer uid <n>``)."""
    if authorization:
        scheme, _, credential = authorization.partition(" ")
        if scheme.lower() != "bearer" or not credential.strip():
            raise Unauthenticated("Authorization: give `Bearer <token>`")
        try:
            token = tokens.verify(credential.strip(), rt.store)
        except tokens.BadToken as exc:
            raise Unauthenticated(str(exc)) from None
        return service.Caller(token.user, token.admin or token.user in rt.config.admins), f"token {token.id}"
    if peer_uid is not None:
        return service.caller(rt, uid=peer_uid), f"peer uid {peer_uid}"
    raise Unauthenticated("no credentials: send `Authorization: Bearer <token>` (an admin makes one with"
                          " `crossdock tokens create USER`), or connect through the API's Unix socket")


class Remembered:
    """Credentials checked in the last :data:`REMEMBER_SECONDS`: (authorization, peer uid) -> caller.
    ``clock``: seconds, monotonic (tests drive it)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._seen: dict[tuple[str | None, int | None], tuple[float, service.Caller, str]] = {}
        self._lock = threading.Lock()
        self._clock = clock

    def get(self, key: tuple[str | None, int | None]) -> tuple[service.Caller, str] | None:
        hit = self._seen.get(key)
        return None if hit is None or hit[0] < self._clock() else hit[1:]

    def put(self, key: tuple[str | None, int | None], who: service.Caller, via: str) -> None:
        now = self._clock()
        with self._lock:
            if len(self._seen) > 10_000:
                self._seen = {k: v for k, v in self._seen.items() if v[0] >= now}
            self._seen[key] = (now + REMEMBER_SECONDS, who, via)


async def caller(request: Request, _: HTTPAuthorizationCredentials | None = Depends(BEARER)) -> service.Caller:
    """The FastAPI dependency: this request's caller (``request.state.via`` says how it was known)."""
    key = (request.headers.get("authorization"), request.scope.get(PEER_UID))
    remembered: Remembered = request.app.state.remembered
    known = remembered.get(key)
    if known is None:
        known = await run_in_threadpool(identify, request.app.state.rt, *key)
        remembered.put(key, *known)
    request.state.via = known[1]
    return known[0]
