"""What every command shares: the runtime, task sending, exit codes and one-line errors."""

from __future__ import annotations

import json
import sys
from functools import lru_cache
from typing import Any, NoReturn

import typer
from rich.console import Console

from crossdock.runtime import Runtime

# Pipes and CI logs get a wide console instead of rich's 80-column default.
console = Console(width=None if sys.stdout.isatty() else 160)
err_console = Console(stderr=True)

EXIT_USAGE = 2


@lru_cache(maxsize=1)
def runtime() -> Runtime:
    return Runtime.from_env()


def sender():
    from crossdock.workers.app import celery_sender, make_app

    return celery_sender(make_app(runtime().redis_url))


def fail(message: str, code: int = EXIT_USAGE) -> NoReturn:
    """One line on stderr naming what is wrong and what is accepted; exit 2 for bad input."""
    err_console.print(f"crossdock: error: {message}", markup=False, highlight=False, soft_wrap=True)
    raise typer.Exit(code)


def print_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")
