"""A tiny HTTP model server to try services with: a fixed service time, a concurrency limit,
readiness and Prometheus metrics.

    crossdock serve demo --command "python -m crossdock.jobtools.demo_server --service-ms 20" \
        --ready-path /healthz --replicas 1:4 --target-qps 50

It listens on ``127.0.0.1:$PORT`` (``--port`` overrides). Every path but two answers after
``--service-ms`` milliseconds of "work" with ``{"replica": …, "path": …}``; at most
``--concurrency`` requests work at once, the others wait their turn (so latency grows with
load, as in a real server), and beyond ``--queue-limit`` waiting ones it answers 503.
With ``--cpu-ms`` each request also burns that much CPU time in one of ``--workers`` processes
(a model's inference), so that its latency shows the CPU the server gets.
``/healthz`` answers 200 once the server is ready (``--ready-after`` seconds after start: a
model loading) and 503 before; ``/metrics`` is Prometheus text. SIGTERM stops it gracefully:
no new connection is taken and requests under way finish.

Used as the replica of the services tests and benchmark (``tests/integration/local/
test_services_local.py``, ``bench/bench_services.py``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor

from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m crossdock.jobtools.demo_server", description=__doc__.split("\n\n")[0])
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=None, help="default: $PORT")
    p.add_argument("--service-ms", type=float, default=20.0, help="time one request takes (default 20)")
    p.add_argument("--concurrency", type=int, default=4, help="requests worked on at once (default 4)")
    p.add_argument("--queue-limit", type=int, default=1000, help="waiting requests before 503 (default 1000)")
    p.add_argument("--ready-after", type=float, default=0.0, help="seconds before /healthz says ready")
    p.add_argument("--cpu-ms", type=float, default=0.0,
                   help="CPU time one request burns, in one of --workers processes, after --service-ms (default 0)")
    p.add_argument("--workers", type=int, default=2, help="processes that burn --cpu-ms (default 2)")
    args = p.parse_args(argv)
    if args.port is None:
        try:
            args.port = int(os.environ["PORT"])
        except (KeyError, ValueError):
            p.error(f"--port: not given and PORT={os.environ.get('PORT')!r} is not a port number; pass --port N")
    for name in ("service_ms", "ready_after", "cpu_ms"):
        if getattr(args, name) < 0:
            p.error(f"--{name.replace('_', '-')}: {getattr(args, name)} is negative; pass 0 or more")
    if args.concurrency < 1 or args.queue_limit < 0 or args.workers < 1:
        p.error("--concurrency and --workers must be 1 or more and --queue-limit 0 or more")
    return args


def burn(ms: float) -> None:
    """Spin until this process has used ``ms`` of CPU: on a contended CPU it takes longer."""
    until = time.process_time() + ms / 1000
    while time.process_time() < until:
        pass


def make_app(args: argparse.Namespace) -> web.Application:
    replica = os.environ.get("CROSSDOCK_REPLICA", "0")
    registry = CollectorRegistry()
    requests = Counter("demo_requests_total", "Requests answered", ["code"], registry=registry)
    in_flight = Gauge("demo_in_flight", "Requests being worked on or waiting", registry=registry)
    duration = Histogram("demo_request_duration_seconds", "Time from arrival to answer", registry=registry)
    slots = asyncio.Semaphore(args.concurrency)
    pool = ProcessPoolExecutor(args.workers) if args.cpu_ms else None
    ready_at = time.monotonic() + args.ready_after
    waiting = 0

    async def healthz(_: web.Request) -> web.Response:
        ok = time.monotonic() >= ready_at
        return web.Response(status=200 if ok else 503, text="ok" if ok else "loading")

    async def metrics(_: web.Request) -> web.Response:
        return web.Response(body=generate_latest(registry), headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def work(request: web.Request) -> web.Response:
        nonlocal waiting
        started = time.monotonic()
        if waiting >= args.queue_limit + args.concurrency:
            requests.labels("503").inc()
            return web.Response(status=503, text="busy")
        waiting += 1
        in_flight.inc()
        try:
            await request.read()
            async with slots:
                await asyncio.sleep(args.service_ms / 1000)
                if pool is not None:
                    await asyncio.get_running_loop().run_in_executor(pool, burn, args.cpu_ms)
        finally:
            waiting -= 1
            in_flight.dec()
        requests.labels("200").inc()
        duration.observe(time.monotonic() - started)
        return web.Response(text=json.dumps({"replica": replica, "path": request.path}),
                            content_type="application/json")

    app = web.Application()
    if pool is not None:
        async def warm(_: web.Application) -> None:  # every worker started before the first request
            await asyncio.gather(*(asyncio.get_running_loop().run_in_executor(pool, burn, 0)
                                   for _ in range(args.workers)))

        async def close(_: web.Application) -> None:
            pool.shutdown(cancel_futures=True)

        app.on_startup.append(warm)
        app.on_cleanup.append(close)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/metrics", metrics)
    app.router.add_route("*", "/{tail:.*}", work)
    return app


def main(argv: list[str] | None = None) -> int:
    args = parse(sys.argv[1:] if argv is None else argv)
    # run_app: SIGTERM/SIGINT close the listener, then wait for the handlers under way
    web.run_app(make_app(args), host=args.host, port=args.port, print=None, access_log=None, shutdown_timeout=30)
    return 0


if __name__ == "__main__":
    sys.exit(main())
