"""Inference services on the local backend: how fast crossdock follows a traffic step, what a
scale-in costs the clients, and what the router costs.

    python bench/bench_services.py [--part all|scale|router] [--window 5] [--interval 1] [--json OUT]

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
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from crossdock.dev.proc import free_port  # noqa: E402

HPA_SYNC_SECONDS = 15.0
SERVER = [sys.executable, "-m", "crossdock.jobtools.demo_server", "--service-ms", "20", "--concurrency", "4"]
CHILD_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "PYTHONPATH": str(ROOT)}


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
            return {"bench": RouteSpec("/healthz", self.route.get("bench", 0))}

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
    failed: dict[str, int] = {}
    for r in rows:
        if r["status"] != 200:
            kind = str(r["status"] or r["error"])
            failed[kind] = failed.get(kind, 0) + 1
    return {"requests": len(rows), "ok": ok, "failed": failed, "router_cpu_seconds_per_1000": round(1000 * busy / max(ok, 1), 3),
            "p95_ms_direct_60qps": round(1000 * p95(direct), 1), "p95_ms_routed_60qps": round(1000 * p95(routed), 1),
            "p95_ms_routed_200qps": round(1000 * p95(rows), 1)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--part", choices=["all", "scale", "router"], default="all")
    ap.add_argument("--window", type=float, default=5.0, help="services.router.window_seconds (default 5)")
    ap.add_argument("--interval", type=float, default=1.0, help="services.interval_seconds (default 1)")
    ap.add_argument("--json", type=Path, help="write the figures there too")
    args = ap.parse_args()
    figures = {}
    if args.part in ("all", "router"):
        figures["router"] = bench_router()
        print("router:", json.dumps(figures["router"]))
    if args.part in ("all", "scale"):
        figures["scale"] = bench_scale(args.window, args.interval)
        print("scale:", json.dumps(figures["scale"]))
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2))
    return 0


# --- following a traffic step ----------------------------------------------------------------------
TARGET_QPS, STABILIZATION = 60, 10.0  # 10 QPS -> 1 replica, 200 -> 4, 20 -> 1


def scale_config(window: float, interval: float) -> dict:
    return {
        "priority_classes": {"inference": {"value": 1000, "preemptible": False}},
        "pools": {"local": {"backend": "local", "nodes": [{"name": "localhost", "cpus": 16, "memory_mib": 16384}]}},
        "queues": {"inference": {"priority_class": "inference", "pools": ["local"], "placement": "spread"}},
        "scheduler": {"interval_seconds": 0.2, "kill_wait_seconds": 2, "lease_seconds": 2},
        "services": {"interval_seconds": interval, "router": {"window_seconds": window, "probe_seconds": 0.2}},
    }


def bench_scale(window: float = 5.0, interval: float = 1.0) -> dict:
    import threading

    import yaml

    from crossdock.backends.redis_store import embedded
    from crossdock.dev.loadgen import LoadRun, Step
    from crossdock.dev.servicewatch import Timeline
    from crossdock.queue.serving import ServiceSpec
    from crossdock.runtime import Runtime
    from crossdock.settings import current_user
    from crossdock.workers.app import celery_sender, make_app
    from crossdock.workers.leader import Scheduler
    from crossdock.workers.routes import router_part
    from crossdock.workers.supervision import start_worker, stop_worker

    tmp = Path(tempfile.mkdtemp(prefix="crossdock-bench-services-"))
    url = embedded.ensure_running(tmp / "redis")
    (tmp / "crossdock.yaml").write_text(yaml.safe_dump(scale_config(window, interval)))
    os.environ.update({"CROSSDOCK_REDIS_URL": url, "CROSSDOCK_CONFIG": str(tmp / "crossdock.yaml"),
                       "CROSSDOCK_STATE_DIR": str(tmp / "state"), "CROSSDOCK_PREFIX": f"bs{uuid.uuid4().hex[:6]}"})
    rt = Runtime.from_env()
    services = rt.store.services
    sched = Scheduler(rt, celery_sender(make_app(rt.redis_url)))
    stop = threading.Event()
    loop = threading.Thread(target=sched.run, args=(stop,), daemon=True)
    worker = start_worker(rt, 2, tmp / "worker.log")
    router, = router_part(rt)
    loop.start()
    router.start()
    steps = [Step(10, 10), Step(200, 20), Step(20, STABILIZATION + window + 15)]
    try:
        services.put(ServiceSpec(name="bench", user=current_user(), command=SERVER, env={"PYTHONPATH": str(ROOT)},
                                 workdir=str(tmp),
                                 queue="inference", min_replicas=1, max_replicas=8, target_qps=TARGET_QPS,
                                 scale_down_stabilization_seconds=STABILIZATION))
        ready = lambda: sum(e.ready and not e.draining for e in services.endpoints("bench"))  # noqa: E731
        wait_for(lambda: ready() == 1 and services.get("bench").address, 90, "the first replica ready")
        address = services.get("bench").address
        t0 = time.monotonic()
        timeline = Timeline(services, "bench", t0, every=0.05).start()
        result = LoadRun(f"http://{address}/infer", steps).start().wait()
        wait_for(lambda: services.get("bench").status.desired == 1 and ready() == 1, 60, "back to one replica")
        timeline.close()
    finally:
        stop.set()
        router.stop()
        stop_worker(worker)
        loop.join(10)
        ids = rt.store.active_ids()
        for job_id in ids:
            rt.store.cancel(job_id)
        deadline = time.monotonic() + 30
        while any(j.state.active for j in rt.store.get_many(ids)) and time.monotonic() < deadline:
            time.sleep(0.2)
        embedded.stop(tmp / "redis")
    shift = result.started - t0
    up_at, down_at = shift + result.step_started(1), shift + result.step_started(2)
    first_decision = timeline.first(lambda p: p.desired > 1, since=up_at)
    full_decision = timeline.first(lambda p: p.desired >= 4, since=up_at)
    first_ready = timeline.first(lambda p: p.ready >= 2, since=up_at)
    all_ready = timeline.first(lambda p: p.ready >= 4, since=up_at)
    lowered = timeline.first(lambda p: p.desired < 4, since=down_at)
    drain_from = (lowered or down_at) - shift
    scale_in = dict(since=drain_from)
    hpa_mean = HPA_SYNC_SECONDS / 2

    def rel(t):
        return None if t is None else round(t - up_at, 2)

    decision = rel(first_decision)
    return {"window_seconds": window, "interval_seconds": interval,
            "step_to_first_decision_s": decision, "step_to_desired_4_s": rel(full_decision),
            "step_to_first_new_replica_ready_s": rel(first_ready), "step_to_4_ready_s": rel(all_ready),
            "hpa_sync_period_s": HPA_SYNC_SECONDS,
            "decision_vs_hpa_mean_wait": None if decision is None else round(decision / hpa_mean, 3),
            "step_down_to_scale_in_s": None if lowered is None else round(lowered - down_at, 2),
            "stabilization_s": STABILIZATION,
            "scale_in_requests": len(result.select(**scale_in)),
            "scale_in_success_rate": result.success_rate(**scale_in),
            "scale_in_p95_ms": round(1000 * result.p95(**scale_in), 1),
            "step_p95_ms": round(1000 * result.p95(step=1), 1),
            "step_p95_ms_once_ready": round(1000 * result.p95(step=1, since=(all_ready or up_at) - shift), 1),
            "overall_success_rate": result.success_rate()}


if __name__ == "__main__":
    sys.exit(main())
