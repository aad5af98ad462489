"""Local replica jobs behind the router, through the real scheduler (with its services step),
worker, supervisor and store: the replica gets its port and identity, its endpoint is recorded,
the router finds it, probes it ready, routes to it, drains it and reports it drained, and the
controller then stops it."""

from __future__ import annotations

import sys
import time
import urllib.request
from pathlib import Path

import pytest

from crossdock.queue.serving import ServiceSpec
from crossdock.queue.states import JobState
from crossdock.settings import current_user
from crossdock.workers.router import RouterPart, RouterSettings
from crossdock.workers.routes import StoreRoutes

pytestmark = [pytest.mark.services, pytest.mark.redis, pytest.mark.celery]

SERVER = [sys.executable, "-m", "crossdock.jobtools.demo_server", "--service-ms", "5"]
ENV = {"PYTHONPATH": str(Path(__file__).resolve().parents[3])}  # this checkout's crossdock


def wait_for(cond, timeout: float = 30.0, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = cond()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"{what} not reached within {timeout}s")


def test_replica_job_is_routed_drained_and_stopped(cluster, tmp_path):
    rt = cluster.rt
    services = rt.store.services
    services.put(ServiceSpec(name="echo", user=current_user(), command=SERVER, env=ENV, workdir=str(tmp_path),
                             queue="inference"))
    part = RouterPart(StoreRoutes(services, rt.config), RouterSettings(refresh_seconds=0.1, probe_seconds=0.1))
    part.start()
    try:
        job_id = wait_for(lambda: services.replica_ids("echo"), what="the controller's replica job")[0]
        cluster.wait(job_id, {JobState.RUNNING})
        ep = wait_for(lambda: services.endpoint(job_id), what="the endpoint recorded")
        assert ep.host == "127.0.0.1" and ep.port > 0 and ep.attempt == 1 and ep.replica == 0
        wait_for(lambda: services.endpoint(job_id).ready, what="the router's probe marks it ready")
        address = wait_for(lambda: services.get("echo").address, what="the router's address recorded")
        with urllib.request.urlopen(f"http://{address}/predict", timeout=10) as r:
            assert r.status == 200 and b'"replica": "0"' in r.read()  # CROSSDOCK_REPLICA reached it
        assert part.report()["services"] == {"echo": int(address.rsplit(":", 1)[1])}

        services.set_override("echo", 0)  # the controller drains it (drain_replica), the router reports it drained
        wait_for(lambda: (e := services.endpoint(job_id)) is None or e.drained, what="drained by the router")
        assert cluster.wait(job_id, timeout=30).state is JobState.CANCELLED  # then the controller stops it
    finally:
        part.stop()


def test_up_runs_the_router_where_a_pool_is_local(runtime):
    from crossdock.workers.supervision import Service

    svc = Service(runtime, workers=0, scheduler=False)
    try:
        report = wait_for(lambda: (r := svc.report()["router"]) and r["metrics_port"] and r, what="the router part")
        assert report["alive"] and report["services"] == {} and report["restarts"] == 0
        with urllib.request.urlopen(f"http://127.0.0.1:{report['metrics_port']}/metrics", timeout=10) as r:
            assert r.status == 200
        next(p for p in svc.parts if p.name == "router").stop()  # it dies: up's check starts it again
        svc.check()
        assert wait_for(lambda: svc.report()["router"]["alive"], what="the router restarted")
        assert svc.report()["router"]["restarts"] == 1
    finally:
        svc.stop()
