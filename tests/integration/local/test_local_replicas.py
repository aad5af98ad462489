"""Local replica jobs behind the router, through the real scheduler, worker, supervisor and store:
the replica gets its port and identity, its endpoint is recorded, the router finds it, probes
it ready, routes to it, drains it and reports it drained, and a cancel stops it."""

from __future__ import annotations

import sys
import time
from pathlib import Path
import urllib.request

import pytest

from crossdock import service
from crossdock.backends.local.backend import LocalBackend
from crossdock.queue.models import JobSpec, ServiceReplica
from crossdock.queue.serving import ServiceSpec
from crossdock.queue.states import JobState
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
    services.put(ServiceSpec(name="echo", command=SERVER, queue="inference"))
    job, = service.submit(rt, [JobSpec(command=SERVER, queue="inference", workdir=str(tmp_path), env=ENV,
                                       service=ServiceReplica(name="echo", replica=3))])
    services.add_replicas("echo", [job.id])
    part = RouterPart(StoreRoutes(services, rt.config), RouterSettings(refresh_seconds=0.1, probe_seconds=0.1))
    part.start()
    try:
        cluster.wait(job.id, {JobState.RUNNING})
        ep = wait_for(lambda: services.endpoint(job.id), what="the endpoint recorded")
        assert ep.host == "127.0.0.1" and ep.port > 0 and ep.attempt == 1 and ep.replica == 3
        wait_for(lambda: services.endpoint(job.id).ready, what="the router's probe marks it ready")
        address = wait_for(lambda: services.get("echo").address, what="the router's address recorded")
        with urllib.request.urlopen(f"http://{address}/predict", timeout=10) as r:
            assert r.status == 200 and b'"replica": "3"' in r.read()  # CROSSDOCK_REPLICA reached it
        assert part.report()["services"] == {"echo": int(address.rsplit(":", 1)[1])}

        LocalBackend(rt.store, rt.config, rt.settings.state_dir, {}).drain_replica(rt.store.get(job.id))
        wait_for(lambda: services.endpoint(job.id).drained, what="drained by the router")
        service.cancel(rt, [str(job.id)], cluster.send)
        assert cluster.wait(job.id, timeout=30).state is JobState.CANCELLED
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
