"""How a face (the CLI, the Python API) reaches the service.

:class:`~crossdock.gateway.direct.Direct`: this process talks to Redis itself (single-user, the
default). :class:`~crossdock.gateway.remote.Remote`: the multi-user service's Unix socket
(``crossdock up --multi-user``), which knows the caller from the kernel; the client never needs
Redis or its password. Both have the same methods; :func:`connect` picks one from the settings.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Union

from crossdock.settings import Settings

if TYPE_CHECKING:
    from crossdock.gateway.direct import Direct
    from crossdock.gateway.remote import Remote
    from crossdock.runtime import Runtime

Gateway = Union["Direct", "Remote"]


def connect(rt: "Runtime | None" = None, user: str | None = None, settings: Settings | None = None) -> Gateway:
    """The service as this process may reach it: a given ``rt`` is used directly; else the
    socket when the service runs multi-user (``CROSSDOCK_SOCKET``, or the default one exists),
    else Redis directly. ``user``: act as that user (root or an admin only)."""
    settings = settings or Settings.from_env()
    if rt is None and settings.socket is not None:
        from crossdock.gateway.remote import Remote

        return Remote(settings.socket, user)
    from crossdock import service
    from crossdock.gateway.direct import Direct
    from crossdock.runtime import Runtime

    rt = rt or Runtime.from_env()
    return Direct(rt, service.caller(rt, user))
