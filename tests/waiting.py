"""Waiting on a condition, the suite's one way to let time pass: poll until ``condition()`` is
truthy and return its value, or fail naming what was awaited. The timeout only bounds a broken
run; nothing is asserted about how long the wait took (a busy machine is slow, not wrong)."""

from __future__ import annotations

import time
from typing import Callable, TypeVar

T = TypeVar("T")


def eventually(what: str, condition: Callable[[], T], timeout: float = 60.0, every: float = 0.05,
               why: Callable[[], str] = lambda: "") -> T:
    """``condition()``'s first truthy value, polled every ``every`` s; an AssertionError naming
    ``what`` (and ``why()``, what the test knows of the state) after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        if time.monotonic() >= deadline:
            detail = why()
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what}" + (f"\n{detail}" if detail else ""))
        time.sleep(every)
    return value
