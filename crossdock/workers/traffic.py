"""What the router knows of one service's traffic: its upstreams (the replicas' endpoints, with
their readiness and in-flight counts), which one gets the next request (least outstanding among
the ready ones that are not draining), and the sliding window its metrics come from.

No I/O here: :mod:`crossdock.workers.router` does the serving, probing and store calls; this
module decides and counts, and its unit tests run without a socket.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

from crossdock.queue.serving import ServiceMetrics


@dataclass
class Upstream:
    """One replica endpoint as the router sees it (the store's ``Endpoint`` plus local counts)."""

    job_id: int
    attempt: int
    replica: int
    host: str
    port: int
    ready: bool = False
    """The router's own probe says ready (the store is told when this changes)."""
    draining: bool = False
    drained: bool = False
    """``set_drained`` was called: draining with nothing in flight."""
    in_flight: int = 0
    last_pick: int = 0
    """When it was last picked (the router's request count then): ties go round-robin."""
    fails: int = 0
    """Failed probes in a row."""
    reported: bool | None = None
    """The readiness the store holds (told by the router when its probe disagrees)."""

    @property
    def key(self) -> tuple[int, int]:
        return self.job_id, self.attempt

    @property
    def serving(self) -> bool:
        return self.ready and not self.draining and not self.drained

    def url(self, path: str) -> str:
        return f"http://{self.host}:{self.port}{path}"


def pick(upstreams: list[Upstream], exclude: frozenset[tuple[int, int]] = frozenset()) -> Upstream | None:
    """Least outstanding among the serving upstreams not in ``exclude``; ties go to the one
    picked longest ago, then the lowest replica (so equal replicas take requests in turn)."""
    chosen = [u for u in upstreams if u.serving and u.key not in exclude]
    return min(chosen, key=lambda u: (u.in_flight, u.last_pick, u.replica, u.key), default=None)


def to_drain(upstreams: list[Upstream]) -> list[Upstream]:
    """Draining upstreams with nothing in flight that were not reported drained yet."""
    return [u for u in upstreams if u.draining and not u.drained and u.in_flight == 0]


@dataclass
class Window:
    """Arrivals (for the rate) and completions (for latency) of the last ``seconds``.

    The rate counts arrivals, not answers: an overloaded service answers at its capacity, and
    scaling on answers would never ask for more than it has. Until the router has watched a
    whole window the rate is over the time it has watched (at least one second)."""

    seconds: float
    started: float
    arrivals: deque = field(default_factory=deque)
    """(time, replica ordinal or None when no replica took it)"""
    done: deque = field(default_factory=deque)
    """(time, latency seconds)"""

    def arrive(self, now: float, replica: int | None) -> None:
        self.arrivals.append((now, replica))
        self._prune(now)

    def finish(self, now: float, latency: float) -> None:
        self.done.append((now, latency))
        self._prune(now)

    def _prune(self, now: float) -> None:
        edge = now - self.seconds
        while self.arrivals and self.arrivals[0][0] < edge:
            self.arrivals.popleft()
        while self.done and self.done[0][0] < edge:
            self.done.popleft()

    def stats(self, now: float, upstreams: list[Upstream], at: float = 0.0) -> ServiceMetrics:
        """The sample of the window ending ``now`` (monotonic), stamped ``at`` (epoch seconds)."""
        self._prune(now)
        span = max(min(self.seconds, now - self.started), 1.0)
        per: dict[int | None, int] = {}
        for _, replica in self.arrivals:
            per[replica] = per.get(replica, 0) + 1
        latencies = sorted(lat for _, lat in self.done)
        p95 = latencies[max(0, math.ceil(0.95 * len(latencies)) - 1)] if latencies else None
        live = [u for u in upstreams if not u.drained]
        in_flight: dict[int, int] = {}
        for u in live:  # a replacement attempt and the one it replaces share the ordinal
            in_flight[u.replica] = in_flight.get(u.replica, 0) + u.in_flight
        return ServiceMetrics(qps=len(self.arrivals) / span, p95_seconds=p95,
                              replica_qps={r: per.get(r, 0) / span for r in in_flight}, in_flight=in_flight,
                              window_seconds=self.seconds, at=at)
