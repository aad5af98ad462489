"""What every command shares: the runtime, the gateway to the service, exit codes and one-line errors."""

from __future__ import annotations

import json
import os
import sys
import threading
from contextlib import contextmanager
from datetime import date, datetime
from enum import Enum
from functools import lru_cache
from typing import Any, Iterator, NoReturn

from crossdock.queue.errors import ConfigError, CrossdockError
from crossdock.runtime import Runtime

EXIT_USAGE = 2


_served = threading.local()
"""The command a service runs for a socket's caller, in this thread (:func:`serving`)."""


@lru_cache(maxsize=None)
def _console(stderr: bool):
    from rich.console import Console

    # Pipes and CI logs get a wide console instead of rich's 80-column default.
    return Console(stderr=True) if stderr else Console(width=None if sys.stdout.isatty() else 160)


def _served_console(stderr: bool):
    """:func:`_console` as the caller's terminal would have made it: the service's own terminal
    (if any) is not the caller's, so the width is the one the client sent."""
    from rich.console import Console

    consoles = _served.consoles
    if stderr not in consoles:
        tty = (sys.stderr if stderr else sys.stdout).isatty()  # the caller's (gateway.commands.Routed)
        width = _served.width if tty and _served.width else (80 if stderr else 160)
        consoles[stderr] = Console(stderr=stderr, width=width)
    return consoles[stderr]


class _Console:
    """``console``/``err_console``: the rich console of this process, or of the caller a service
    serves in this thread; made on first use."""

    def __init__(self, stderr: bool) -> None:
        self._stderr = stderr

    def _current(self) -> Any:
        current = _served_console if getattr(_served, "gateway", None) is not None else _console
        return current(self._stderr)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._current(), name)

    # Looked up on the type, not through __getattr__: rich's Live enters its console.
    def __enter__(self) -> Any:
        return self._current().__enter__()

    def __exit__(self, *exc: Any) -> Any:
        return self._current().__exit__(*exc)


_CONSOLES = {"console": _Console(False), "err_console": _Console(True)}


def __getattr__(name: str):
    """``console`` and ``err_console`` (rich) are made on first use: ``crossdock submit``, which
    prints plain lines, never imports rich."""
    if name in _CONSOLES:
        return _CONSOLES[name]
    raise AttributeError(name)


@contextmanager
def serving(view: Any, width: int | None = None) -> Iterator[None]:
    """Run a command in a service for a socket's caller (:mod:`crossdock.gateway.commands`):
    :func:`gateway` is ``view`` (the caller's), the consoles are ``width`` wide when the caller's
    stream is a terminal (else as a pipe gets them) and write to ``sys.stdout``/``sys.stderr``,
    which the service routes to the conversation."""
    _served.gateway, _served.width, _served.consoles = view, width, {}
    try:
        yield
    finally:
        del _served.gateway, _served.width, _served.consoles


@lru_cache(maxsize=2)
def runtime(start_redis: bool = True) -> Runtime:
    """This process's runtime, its config loaded: a broken config is one line here, for every
    command, rather than a traceback wherever it is first read. ``start_redis=False`` leaves the
    embedded Redis alone (``submit --dry-run`` stores nothing).

    In a multi-user installation (the service's socket exists) only the service reaches its
    store: a user's command that needs it directly says so in one line, rather than starting a
    Redis of its own under the user's home and showing an empty world."""
    from crossdock.settings import Settings

    settings = Settings.from_env()
    if settings.socket is not None and settings.redis_url is None and os.geteuid() != 0:
        fail(f"{_command()}: needs the service's store, which in this multi-user installation only the service"
             f" reaches (its socket {settings.socket}); ask root or an admin to run it on the service's machine",
             code=EXIT_USAGE)
    try:
        rt = Runtime.from_env(start_redis=start_redis)
    except CrossdockError as exc:  # CROSSDOCK_REDIS_URL unreadable, the embedded Redis unable to start
        fail(str(exc), code=1)
    try:
        rt.config
    except ConfigError as exc:
        fail(f"config {rt.settings.config_path} (CROSSDOCK_CONFIG): {'; '.join(exc.errors)}")
    return rt


def gateway(start_redis: bool = True):
    """The service as this command reaches it: the multi-user service's socket when it runs one
    (nothing here then touches Redis or reads the config), else this process's own runtime
    (``start_redis=False``: the embedded Redis is left alone, as ``runtime``); in a service running
    the command for a socket's caller, that caller's view (:func:`serving`)."""
    view = getattr(_served, "gateway", None)
    return _gateway(start_redis) if view is None else view


@lru_cache(maxsize=2)
def _gateway(start_redis: bool):
    from crossdock import gateway as gw
    from crossdock.settings import Settings

    settings = Settings.from_env()
    if settings.socket is None:
        return gw.connect(runtime(start_redis))
    return _remote(settings)


@lru_cache(maxsize=1)
def _remote(settings):
    from crossdock import gateway as gw

    try:
        return gw.connect(settings=settings)
    except CrossdockError as exc:  # the socket does not answer
        fail(str(exc), code=1)


def _command() -> str:
    """The command being run (``crossdock services list``), for one-line messages."""
    try:  # Typer vendors its own click in recent versions; older ones use click itself
        from typer._click.globals import get_current_context
    except ImportError:
        from click import get_current_context

    names, ctx = [], get_current_context(silent=True)
    while ctx is not None and ctx.parent is not None:
        names.append(ctx.info_name or "")
        ctx = ctx.parent
    return " ".join(["crossdock", *reversed(names)])


def one_line(text: str) -> str:
    """``text`` with line breaks, control characters and undecodable bytes escaped: a user's value
    inside a message keeps it one line that a terminal shows as it is."""
    return "".join(c if c.isprintable() else ascii(c)[1:-1] for c in text)


def fail(message: str, code: int = EXIT_USAGE) -> NoReturn:
    """One line on stderr naming what is wrong and what is accepted; exit 2 for bad input."""
    sys.stderr.write(f"crossdock: error: {one_line(message)}\n")
    sys.stderr.flush()
    raise SystemExit(code)


def fail_each(messages: list[str], code: int = EXIT_USAGE) -> NoReturn:
    """Several problems, one ``crossdock: error:`` line each, then exit as :func:`fail` does."""
    for message in messages[:-1]:
        sys.stderr.write(f"crossdock: error: {one_line(message)}\n")
    fail(messages[-1], code)


def jsonable(value: Any) -> Any:
    """What ``--json`` writes for a value JSON has no type for: times in ISO 8601 with a ``T``
    (``2026-12-01T12:00:00+00:00``), enums as their value, anything else as text."""
    if isinstance(value, (datetime, date)):
        return value.isoformat()
    if isinstance(value, Enum):
        return value.value
    return str(value)


def print_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, default=jsonable) + "\n")
