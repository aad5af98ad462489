"""A clock the code under test takes as a parameter (``clock=``): it reads ``now``, which the test moves."""

from __future__ import annotations


class Clock:
    def __init__(self, now: float = 0.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now
