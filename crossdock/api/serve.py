"""Serving the API (``crossdock api``): uvicorn on a loopback TCP port, or on a Unix socket whose
connections carry their peer's uid (``SO_PEERCRED``) into each request, so that local users
need no token there.

uvicorn keeps the socket to itself; its HTTP protocol is subclassed so that each connection's
app sees the peer's uid under :data:`crossdock.api.auth.PEER_UID` in the ASGI scope.
"""

from __future__ import annotations

import signal
import socket
from pathlib import Path
from typing import Any

import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from crossdock.api.auth import PEER_UID
from crossdock.gateway.server import peer_uid


def with_peer(app: Any, uid: int) -> Any:
    async def scoped(scope: dict, receive: Any, send: Any) -> None:
        scope[PEER_UID] = uid
        await app(scope, receive, send)

    return scoped


class PeerCredentials(H11Protocol):
    """uvicorn's h11 protocol; on a Unix socket, each request's scope names the peer's uid."""

    def connection_made(self, transport: Any) -> None:  # type: ignore[override]
        super().connection_made(transport)
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family == socket.AF_UNIX:
            self.app = with_peer(self.app, peer_uid(sock))


KEEP_ALIVE_SECONDS = 30
"""How long an idle connection is kept for its client's next request (uvicorn's default, 5 s,
closes connections under clients slowed by load, which then fail their next request)."""


def config(app: Any, host: str = "127.0.0.1", port: int = 8400, uds: Path | None = None,
           log_level: str = "info") -> uvicorn.Config:
    common = {"log_level": log_level, "access_log": False, "timeout_keep_alive": KEEP_ALIVE_SECONDS, "backlog": 2048}
    if uds is not None:
        return uvicorn.Config(app, uds=str(uds), http=PeerCredentials, **common)
    return uvicorn.Config(app, host=host, port=port, **common)


def serve(app: Any, host: str = "127.0.0.1", port: int = 8400, uds: Path | None = None,
          log_level: str = "info") -> None:
    """Serve ``app`` until SIGINT/SIGTERM, then return (the socket file removed). On ``uds`` the
    socket is 0666: anyone may connect, since who they are comes from the kernel, not from what
    they send. (Run from the main thread: it takes the two signals.)"""
    if uds is not None:
        uds.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
        uds.unlink(missing_ok=True)
    # uvicorn stops gracefully on these, then raises the signal again for the handler it found:
    # this one, so that the process ends here, cleanly, rather than killed by its own signal
    previous = {sig: signal.signal(sig, lambda *_: None) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        uvicorn.Server(config(app, host, port, uds, log_level)).run()  # uvicorn makes a new socket file 0666
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if uds is not None:
            uds.unlink(missing_ok=True)

