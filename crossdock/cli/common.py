"""What every command shares: the runtime, task sending, exit codes and one-line errors."""

from __future__ import annotations

import json
import sys
from functools import lru_cache
from typing import Any, NoReturn

import typer
from rich.console import Console

from crossdock.queue.errors import ConfigError
from crossdock.runtime import Runtime

# Pipes and CI logs get a wide console instead of rich's 80-column default.
console = Console(width=None if sys.stdout.isatty() else 160)
err_console = Console(stderr=True)

EXIT_USAGE = 2


@lru_cache(maxsize=2)
def runtime(start_redis: bool = True) -> Runtime:
    """This process's runtime, its config loaded: a broken config is one line here, for every
    command, rather than a traceback wherever it is first read. ``start_redis=False`` leaves the
    embedded Redis alone (``submit --dry-run`` stores nothing)."""
    rt = Runtime.from_env(start_redis=start_redis)
    try:
        rt.config
    except ConfigError as exc:
        fail(f"config {rt.settings.config_path} (CROSSDOCK_CONFIG): {'; '.join(exc.errors)}")
    return rt


def sender():
    from crossdock.workers.app import celery_sender, make_app

    return celery_sender(make_app(runtime().redis_url))


def one_line(text: str) -> str:
    """``text`` with line breaks, control characters and undecodable bytes escaped: a user's value
    inside a message keeps it one line that a terminal shows as it is."""
    return "".join(c if c.isprintable() else ascii(c)[1:-1] for c in text)


def fail(message: str, code: int = EXIT_USAGE) -> NoReturn:
    """One line on stderr naming what is wrong and what is accepted; exit 2 for bad input."""
    err_console.print(f"crossdock: error: {one_line(message)}", markup=False, highlight=False, soft_wrap=True)
    raise typer.Exit(code)


def fail_each(messages: list[str], code: int = EXIT_USAGE) -> NoReturn:
    """Several problems, one ``crossdock: error:`` line each, then exit as :func:`fail` does."""
    for message in messages[:-1]:
        err_console.print(f"crossdock: error: {one_line(message)}", markup=False, highlight=False, soft_wrap=True)
    fail(messages[-1], code)


def print_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")
