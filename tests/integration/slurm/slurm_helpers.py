"""Polling helpers for the Slurm integration tests."""

from __future__ import annotations

import itertools
import random
import time
from collections.abc import Callable
from pathlib import Path

from crossdock.queue.ports import BackendStatus
from crossdock.backends.slurm import JobStatus, SlurmBackend
from crossdock.queue.models import Job

DRIVERS = ["cli", "rest"]
_ids = itertools.count(random.SystemRandom().randrange(10**9, 10**12))
"""Job ids of this test process: a random start, so that two processes (xdist workers, whose
backends share the default tag prefix) never make the same ids. (A start from the clock once
did: workers started within a second overlapped, and each took the other's job for its own.)"""


def next_job_id() -> int:
    return next(_ids)


def wait_for(
    backend: SlurmBackend, ref: str, predicate: Callable[[JobStatus], bool], timeout: float = 30, every: float = 0.25
) -> JobStatus:
    deadline = time.monotonic() + timeout
    while True:
        status = backend.status_refs([ref])[ref]
        if predicate(status):
            return status
        if time.monotonic() > deadline:
            raise AssertionError(f"job {ref}: condition not met within {timeout}s; last status {status}")
        time.sleep(every)


def wait_terminal(backend: SlurmBackend, ref: str, timeout: float = 30) -> JobStatus:
    return wait_for(backend, ref, lambda s: s.state is not None and s.state.terminal, timeout)


def wait_job(backend: SlurmBackend, job: Job, predicate: Callable[[BackendStatus], bool], timeout: float = 30) -> BackendStatus:
    """Poll through the Backend protocol (``status(jobs)``) until ``predicate`` holds."""
    deadline = time.monotonic() + timeout
    while True:
        status = backend.status([job]).get(job.id)
        if status is not None and predicate(status):
            return status
        if time.monotonic() > deadline:
            raise AssertionError(f"job {job.id}: condition not met within {timeout}s; last status {status}")
        time.sleep(0.25)


def wait_file(path: Path, contains: str = "", timeout: float = 30) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and contains in (text := path.read_text()):
            return text
        time.sleep(0.1)
    raise AssertionError(f"{path} did not get {contains!r} within {timeout}s")
