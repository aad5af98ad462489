"""Inference services on the local backend: how fast crossdock follows a traffic step, what a
scale-in costs the clients, and what the router costs.

    python bench/bench_services.py [--part all|scale|router] [--json OUT]

``scale``: a real crossdock (scheduling loop with the services step, a Celery worker, the local
backend, the router) runs one service of demo replicas (``crossdock.jobtools.demo_server``,
20 ms a request, 4 at once) with ``target_qps`` 50; an open-loop generator
(``crossdock.dev.loadgen``, its own process) steps 10 → 200 → 20 QPS. Reported: from the step up
to the scale decision (the status's ``desired`` rises) and to the first new replica ready (the
router's probe); compared with a plain HPA's 15 s sync period (its decision comes up to one
period after the metric moves, 7.5 s on average, before any pod starts); then the success rate
and p95 of the requests sent while replicas drain and stop (scale-in, after the stabilization
window).

``router``: three fixed replicas behind the router in this process, the generator in another;
the router's CPU time (this process's, less its idle rate) per 1,000 requests at 200 QPS, and
p95 through the router against p95 straight to one replica at a rate it can serve.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

HPA_SYNC_SECONDS = 15.0
SERVER = [sys.executable, "-m", "crossdock.jobtools.demo_server", "--service-ms", "20", "--concurrency", "4"]
CHILD_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "PYTHONPATH": str(ROOT)}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(cond, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = cond()
        if value:
            return value
        time.sleep(0.02)
    raise SystemExit(f"bench_services: {what} not reached within {timeout}s")


def loadgen(url: str, steps: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "crossdock.dev.loadgen", url, steps], env=CHILD_ENV,
                            stdout=subprocess.PIPE, text=True)


def samples(proc: subprocess.Popen) -> list[dict]:
    out, _ = proc.communicate()
    return [json.loads(line) for line in out.splitlines() if line.strip()]


def p95(rows: list[dict]) -> float:
    lat = sorted(r["latency"] for r in rows if r["status"] and r["status"] < 400)
    return lat[max(0, math.ceil(0.95 * len(lat)) - 1)] if lat else math.nan


def cpu() -> float:
    u = resource.getrusage(resource.RUSAGE_SELF)
    return u.ru_utime + u.ru_stime


# --- the router's cost --------------------------------------------------------------------------
def bench_router() -> dict:
    from crossdock.queue.serving import Endpoint
    from crossdock.workers.router import RouterPart, RouterSettings, RouteSpec

    ports = [free_port() for _ in range(3)]
    procs = [subprocess.Popen([*SERVER, "--port", str(p)], env={**CHILD_ENV, "CROSSDOCK_REPLICA": str(i)})
             for i, p in enumerate(ports)]

    class Static:  # the store's part, without a store: the cost measured is the router's alone
        route = {}

        def routes(self):
            return {"bench": RouteSpec("/healthz")}

        def endpoints(self, service):
            return [Endpoint(100 + i, 1, i, "127.0.0.1", p, ready=True) for i, p in enumerate(ports)]

        def set_ready(self, *a): ...

        def set_drained(self, *a): ...

        def set_route(self, service, host, port):
            self.route[service] = port

        def put_metrics(self, *a): ...

    src = Static()
    part = RouterPart(src, RouterSettings())
    part.start()
    try:
        port = wait_for(lambda: src.route.get("bench"), 10, "the router's listener")
        wait_for(lambda: all(u.ready for u in part.router.routes["bench"].listed()), 10, "replicas ready")
        idle0, t0 = cpu(), time.monotonic()
        time.sleep(3)
        idle_rate = (cpu() - idle0) / (time.monotonic() - t0)
        c0, t0 = cpu(), time.monotonic()
        rows = samples(loadgen(f"http://127.0.0.1:{port}/infer", "200:15"))
        busy = cpu() - c0 - idle_rate * (time.monotonic() - t0)
        direct = samples(loadgen(f"http://127.0.0.1:{ports[0]}/infer", "60:10"))
        routed = samples(loadgen(f"http://127.0.0.1:{port}/infer", "60:10"))
    finally:
        part.stop()
        for p in procs:
            p.terminate()
            p.wait()
    ok = sum(1 for r in rows if r["status"] == 200)
    return {"requests": len(rows), "ok": ok, "router_cpu_seconds_per_1000": round(1000 * busy / max(ok, 1), 3),
            "p95_ms_direct_60qps": round(1000 * p95(direct), 1), "p95_ms_routed_60qps": round(1000 * p95(routed), 1),
            "p95_ms_routed_200qps": round(1000 * p95(rows), 1)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--part", choices=["all", "scale", "router"], default="all")
    ap.add_argument("--json", type=Path, help="write the figures there too")
    args = ap.parse_args()
    figures = {}
    if args.part in ("all", "router"):
        figures["router"] = bench_router()
        print("router:", json.dumps(figures["router"]))
    if args.part in ("all", "scale"):
        figures["scale"] = bench_scale()
        print("scale:", json.dumps(figures["scale"]))
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2))
    return 0


def bench_scale() -> dict:
    raise SystemExit("bench_services: the scale part needs the services controller step")


if __name__ == "__main__":
    sys.exit(main())
