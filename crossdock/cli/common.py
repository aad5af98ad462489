"""What every command shares: the runtime, the gateway to the service, exit codes and one-line errors."""

from __future__ import annotations

import json
import os
import sys
from datetime import date, datetime
from enum import Enum
from functools import lru_cache
from typing import Any, NoReturn

from crossdock.queue.errors import ConfigError, CrossdockError
from crossdock.runtime import Runtime

EXIT_USAGE = 2


@lru_cache(maxsize=None)
def _console(stderr: bool):
    from rich.console import Console

    # Pipes and CI logs get a wide console instead of rich's 80-column default.
    return Console(stderr=True) if stderr else Console(width=None if sys.stdout.isatty() else 160)


def __getattr__(name: str):
    """``console`` and ``err_console`` (rich) are made on first use: ``crossdock submit``, which
    prints plain lines, never imports rich."""
    if name in ("console", "err_console"):
        return _console(name == "err_console")
    raise AttributeError(name)


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


@lru_cache(maxsize=2)
def gateway(start_redis: bool = True):
    """The service as this command reaches it: the multi-user service's socket when it runs one
    (nothing here then touches Redis or reads the config), else this process's own runtime
    (``start_redis=False``: the embedded Redis is left alone, as ``runtime``)."""
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
