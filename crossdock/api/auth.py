"""Who calls the REST API: a bearer token's user (``crossdock tokens create``), or, on the API's
Unix socket, the connecting process's uid from the kernel (``SO_PEERCRED``), as the multi-user
socket knows its callers. Nothing a request declares (a user name, a header) makes anyone
someone else; admins are a token's own grant or the config's ``admins`` (root on the socket).

What then may be done to which job is the service's one ownership check
(:func:`crossdock.service.authorize`), shared with the CLI and the Python API.
"""

from __future__ import annotations

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from crossdock import service
from crossdock.api import tokens
from crossdock.runtime import Runtime

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


def caller(request: Request, _: HTTPAuthorizationCredentials | None = Depends(BEARER)) -> service.Caller:
    """The FastAPI dependency (run in a worker thread): this request's caller, checked anew on
    every request, so a token revoked is refused from the next request on (one store read;
    ``request.state.via`` says how the caller was known)."""
    who, request.state.via = identify(request.app.state.rt, request.headers.get("authorization"),
                                      request.scope.get(PEER_UID))
    return who
