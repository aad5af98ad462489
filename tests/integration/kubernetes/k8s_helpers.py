"""What the Kubernetes tests share besides fixtures: polling for a condition with a deadline."""

from __future__ import annotations

import time
from typing import Callable, TypeVar

import pytest

T = TypeVar("T")


def wait_for(what: str, fn: Callable[[], T | None], timeout: float = 60.0, interval: float = 0.25) -> T:
    """Poll ``fn`` until it returns a truthy value, which is returned; fail the test after ``timeout``."""
    deadline = time.monotonic() + timeout
    last: T | None = None
    while time.monotonic() < deadline:
        last = fn()
        if last:
            return last
        time.sleep(interval)
    pytest.fail(f"timed out after {timeout:.0f}s waiting for {what} (last: {last!r})")
