"""Loops that survive: a long-running loop, or one step of it, that fails is logged, backs off
(bounded exponential with jitter) and resumes, and records how it is doing for ``crossdock health``.

A store or backend error (Redis restarting, Slurm's controller away) is expected and logged in one
line; anything else is a bug, logged once with its traceback per streak of failures, and retried
the same way: a service that schedules nothing because of one bad turn is worse than one that
retries it. ``BaseException`` (SystemExit, KeyboardInterrupt) still ends the loop, and ``crossdock up``
restarts a loop thread that ended.

    part = Part("cycle")
    resilient(part, stop, lambda: work(stop))        # the whole loop, one turn per call
    part.call(step)                                  # one step inside a turn, with its own backoff
"""

from __future__ import annotations

import logging
import random
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from crossdock.queue.errors import StoreUnavailable
from crossdock.queue.ports import BackendError

log = logging.getLogger(__name__)

EXPECTED = (StoreUnavailable, BackendError, OSError)
"""Errors of the world rather than of the code: logged in one line, without a traceback."""

RUNNING, BACKING_OFF, STOPPED, DEAD = "running", "backing-off", "stopped", "dead"


@dataclass
class Backoff:
    """``min(cap, base * 2**(n-1))`` seconds after the n-th failure in a row, times a random factor
    in [0.5, 1] so that processes that failed together do not retry together.

    Hand-written rather than tenacity: a :class:`Part` does not block on one call until it works;
    it skips its step until ``retry_at`` while the rest of the turn goes on (:meth:`Part.call`),
    and keeps its failures for ``crossdock health``."""

    base: float = 0.2
    cap: float = 5.0

    def delay(self, failures: int) -> float:
        return min(self.cap, self.base * 2 ** min(max(failures - 1, 0), 30)) * random.uniform(0.5, 1.0)


@dataclass
class Part:
    """One loop or step and how it is doing: what ``crossdock health`` shows of it."""

    name: str
    backoff: Backoff = field(default_factory=Backoff)
    state: str = RUNNING
    failures: int = 0
    """Failures in a row (0 once a call succeeds)."""
    last_error: str | None = None
    last_error_at: float | None = None
    last_success_at: float | None = None
    retry_at: float = 0.0
    """time.monotonic() before which :meth:`call` skips the step."""

    def succeeded(self) -> None:
        if self.failures:
            log.info("%s recovered after %s failures", self.name, self.failures)
        self.state, self.failures, self.retry_at, self.last_success_at = RUNNING, 0, 0.0, time.time()

    def failed(self, exc: BaseException) -> float:
        """Record a failure; the seconds to wait before the next try."""
        self.failures += 1
        self.state, self.last_error, self.last_error_at = BACKING_OFF, f"{type(exc).__name__}: {exc}", time.time()
        delay = self.backoff.delay(self.failures)
        self.retry_at = time.monotonic() + delay
        if isinstance(exc, EXPECTED):
            log.warning("%s failed (%s); retrying in %.1fs (failure %s in a row)", self.name, self.last_error,
                        delay, self.failures)
        elif self.failures == 1:
            log.exception("%s failed; retrying in %.1fs", self.name, delay)
        else:
            log.error("%s failed again (%s); retrying in %.1fs (failure %s in a row)", self.name,
                      self.last_error, delay, self.failures)
        return delay

    def call(self, fn: Callable[[], Any]) -> bool:
        """Run one step unless it is backing off; True when it ran and succeeded."""
        if time.monotonic() < self.retry_at:
            return False
        try:
            fn()
        except Exception as exc:
            self.failed(exc)
            return False
        self.succeeded()
        return True

    def report(self) -> dict[str, Any]:
        return {"state": self.state, "failures": self.failures, "last_error": self.last_error,
                "last_error_at": self.last_error_at, "last_success_at": self.last_success_at,
                "retry_in": max(self.retry_at - time.monotonic(), 0.0) if self.state == BACKING_OFF else None}


def resilient(part: Part, stop: threading.Event, turn: Callable[[], Any]) -> None:
    """Call ``turn`` until ``stop`` is set; after a failure wait the part's backoff and go on.
    The part ends ``stopped`` on a stop, ``dead`` when a BaseException ends it."""
    part.state = RUNNING
    try:
        while not stop.is_set():
            try:
                turn()
            except Exception as exc:
                stop.wait(part.failed(exc))
            else:
                part.succeeded()
    except BaseException as exc:
        part.state, part.last_error, part.last_error_at = DEAD, f"{type(exc).__name__}: {exc}", time.time()
        raise
    part.state = STOPPED
