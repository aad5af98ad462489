"""A bounded open-loop HTTP load generator on loopback, for the services tests, benchmark and demo.

Open loop: request *i* of a step is sent at ``step start + i / qps`` whether or not earlier ones
have been answered (a closed loop would slow down with the server and hide its latency). It is
bounded: at most ``max_outstanding`` requests are under way; one due beyond that is not sent
and counts as a failure (``error="overload"``), so an overloaded server cannot make the
generator grow without end. Every request is recorded (when it was due, its status or error,
its latency), and :class:`LoadResult` answers for any time range: success rate, p95, count.

    run = LoadRun("http://127.0.0.1:8080/", [Step(10, 5), Step(200, 10), Step(20, 10)])
    run.start(); ...; result = run.wait()
    result.p95(step=1), result.failures(), result.step_started(1)
"""

from __future__ import annotations

import asyncio
import math
import threading
import time
from dataclasses import dataclass, field

import aiohttp


@dataclass(frozen=True)
class Step:
    qps: float
    seconds: float


@dataclass(frozen=True)
class Sample:
    step: int
    due: float
    """Seconds from the start of the run at which it was due (and sent, unless ``overload``)."""
    latency: float | None
    status: int | None
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.status is not None and 200 <= self.status < 400


@dataclass
class LoadResult:
    steps: list[Step]
    samples: list[Sample] = field(default_factory=list)
    started: float = 0.0
    """time.monotonic() at the start of the run."""

    def step_started(self, step: int) -> float:
        """Seconds from the start of the run to the start of ``step``."""
        return sum(s.seconds for s in self.steps[:step])

    def select(self, step: int | None = None, since: float | None = None, until: float | None = None) -> list[Sample]:
        return [s for s in self.samples if (step is None or s.step == step)
                and (since is None or s.due >= since) and (until is None or s.due < until)]

    def failures(self, **where) -> list[Sample]:
        return [s for s in self.select(**where) if not s.ok]

    def success_rate(self, **where) -> float:
        chosen = self.select(**where)
        return sum(s.ok for s in chosen) / len(chosen) if chosen else math.nan

    def p95(self, **where) -> float:
        """p95 latency (seconds) of the successful requests (nearest rank), nan when none."""
        return self.percentile(0.95, **where)

    def percentile(self, q: float, **where) -> float:
        """The ``q`` quantile (0 < q ≤ 1) of the successful requests' latency in seconds (nearest
        rank), nan when none."""
        lat = sorted(s.latency for s in self.select(**where) if s.ok and s.latency is not None)
        return lat[max(0, math.ceil(q * len(lat)) - 1)] if lat else math.nan


async def _one(session: aiohttp.ClientSession, url: str, step: int, due: float, t0: float, out: list[Sample]) -> None:
    sent = time.monotonic()
    try:
        async with session.get(url) as resp:
            await resp.read()
            out.append(Sample(step, due, time.monotonic() - sent, resp.status))
    except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as exc:
        out.append(Sample(step, due, time.monotonic() - sent, None, type(exc).__name__))


async def generate(url: str, steps: list[Step], timeout: float = 10.0, max_outstanding: int = 500,
                   stop: threading.Event | None = None) -> LoadResult:
    result = LoadResult(list(steps))
    pending: set[asyncio.Task] = set()
    conn = aiohttp.TCPConnector(limit=max_outstanding)
    async with aiohttp.ClientSession(connector=conn, timeout=aiohttp.ClientTimeout(total=timeout)) as session:
        t0 = result.started = time.monotonic()
        for k, step in enumerate(steps):
            begin = result.step_started(k)
            for i in range(int(step.qps * step.seconds)):
                due = begin + i / step.qps
                delay = t0 + due - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
                if stop is not None and stop.is_set():
                    break
                if len(pending) >= max_outstanding:
                    result.samples.append(Sample(k, due, None, None, "overload"))
                    continue
                task = asyncio.create_task(_one(session, url, k, due, t0, result.samples))
                pending.add(task)
                task.add_done_callback(pending.discard)
        if pending:
            await asyncio.wait(pending)
    result.samples.sort(key=lambda s: s.due)
    return result


class LoadRun:
    """One run in a thread of its own (its own event loop), so a test can watch while it runs."""

    def __init__(self, url: str, steps: list[Step], timeout: float = 10.0, max_outstanding: int = 500):
        self.url, self.steps, self.timeout, self.max_outstanding = url, steps, timeout, max_outstanding
        self.stop = threading.Event()
        self.result: LoadResult | None = None
        self.error: BaseException | None = None
        self.started = 0.0
        self.thread = threading.Thread(target=self._run, name="loadgen", daemon=True)

    def _run(self) -> None:
        try:
            self.result = asyncio.run(generate(self.url, self.steps, self.timeout, self.max_outstanding, self.stop))
        except BaseException as exc:  # handed to wait()
            self.error = exc

    def start(self) -> "LoadRun":
        self.started = time.monotonic()
        self.thread.start()
        return self

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def wait(self, timeout: float | None = None) -> LoadResult:
        self.thread.join(timeout)
        if self.thread.is_alive():
            self.stop.set()
            self.thread.join()
        if self.error is not None:
            raise self.error
        assert self.result is not None
        return self.result


def main(argv: list[str] | None = None) -> int:
    """``python -m crossdock.jobtools.loadgen URL QPS:SECONDS[,QPS:SECONDS…] [--timeout S]``: run the
    steps and print one JSON line per request (step, due, latency, status, error)."""
    import argparse
    import json

    p = argparse.ArgumentParser(prog="python -m crossdock.jobtools.loadgen", description=main.__doc__)
    p.add_argument("url")
    p.add_argument("steps", help="QPS:SECONDS,… e.g. 10:5,200:10,20:10")
    p.add_argument("--timeout", type=float, default=10.0)
    p.add_argument("--max-outstanding", type=int, default=500)
    args = p.parse_args(argv)
    try:
        steps = [Step(float(q), float(s)) for q, s in (part.split(":") for part in args.steps.split(","))]
    except ValueError:
        p.error(f"steps: {args.steps!r} is not QPS:SECONDS[,QPS:SECONDS…]; e.g. 10:5,200:10")
    if any(s.qps <= 0 or s.seconds <= 0 for s in steps):
        p.error(f"steps: {args.steps!r}: every QPS and SECONDS must be above 0")
    result = asyncio.run(generate(args.url, steps, args.timeout, args.max_outstanding))
    for s in result.samples:
        print(json.dumps({"step": s.step, "due": s.due, "latency": s.latency, "status": s.status, "error": s.error}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
