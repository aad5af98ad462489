"""A service's timeline as the store shows it, sampled every ``every`` seconds in a thread: the
controller's desired replicas, the replicas ready and not draining, those draining. For the
services tests and benchmark, beside :mod:`crossdock.dev.loadgen` (times are seconds from the
same ``t0``, a time.monotonic())."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass


@dataclass(frozen=True)
class Point:
    t: float
    desired: int
    ready: int
    """Endpoints ready and not draining: what takes traffic."""
    draining: int
    replicas: int
    """The status's replica jobs alive (pending or placed, not draining)."""
    qps: float | None = None
    """The traffic sample the controller reads (the router's), when there is one."""


class Timeline:
    def __init__(self, services, name: str, t0: float, every: float = 0.1):
        self.services, self.name, self.t0, self.every = services, name, t0, every
        self.points: list[Point] = []
        self.drained: dict[int, float] = {}
        """Replica job id → when its endpoint was first seen drained."""
        self.jobs: set[int] = set()
        """Every replica job seen."""
        self.errors = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="servicewatch", daemon=True)

    def start(self) -> "Timeline":
        self.thread.start()
        return self

    def close(self) -> list[Point]:
        self.stop.set()
        self.thread.join(5)
        return self.points

    def _run(self) -> None:
        while not self.stop.wait(self.every):
            try:
                rec = self.services.get(self.name)
                eps = self.services.endpoints(self.name)
                sample = self.services.metrics(self.name)
            except Exception:  # a store hiccup: the next sample
                self.errors += 1
                continue
            if rec is None:
                continue
            now = time.monotonic() - self.t0
            self.jobs.update(e.job_id for e in eps)
            for e in eps:
                if e.drained:
                    self.drained.setdefault(e.job_id, now)
            self.points.append(Point(now, rec.status.desired,
                                     sum(e.ready and not e.draining for e in eps), sum(e.draining for e in eps),
                                     rec.status.replicas, None if sample is None else round(sample.qps, 1)))

    def first(self, cond, since: float = 0.0) -> float | None:
        """The first sample time at or after ``since`` where ``cond(point)`` holds."""
        return next((p.t for p in self.points if p.t >= since and cond(p)), None)

    def between(self, since: float, until: float) -> list[Point]:
        return [p for p in self.points if since <= p.t < until]

    def changes(self) -> str:
        """The samples where desired or ready changed, one line each (for a failing assertion)."""
        out, last = [], None
        for p in self.points:
            if last is None or (p.desired, p.ready, p.draining) != (last.desired, last.ready, last.draining):
                out.append(f"{p.t:6.2f}s desired={p.desired} ready={p.ready} draining={p.draining} qps={p.qps}")
            last = p
        return "\n".join(out)
