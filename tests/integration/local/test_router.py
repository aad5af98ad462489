"""The router in front of real HTTP replicas (crossdock.jobtools.demo_server processes), with an
in-memory source in place of the store: balancing, readiness, drain without a failed request,
a replica that dies, and its Prometheus metrics."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import threading
import urllib.request

import pytest

from crossdock.dev.loadgen import LoadRun, Step
from crossdock.dev.proc import free_port
from crossdock.queue.ports import ReadsServiceMetrics
from crossdock.queue.serving import Endpoint
from crossdock.workers.router import RouterPart, RouterSettings, RouteSpec
from tests.waiting import eventually

pytestmark = pytest.mark.services


class MemorySource:
    """The router's source, in memory: what the store would hold, and every call the router made."""

    def __init__(self):
        self.lock = threading.Lock()
        self.specs: dict[str, RouteSpec] = {}
        self.eps: dict[str, dict[int, Endpoint]] = {}
        self.ready: dict[int, bool] = {}
        self.drained: list[int] = []
        self.route: dict[str, int] = {}
        self.samples: list = []

    def add(self, service: str, job_id: int, replica: int, port: int) -> None:
        with self.lock:
            self.specs.setdefault(service, RouteSpec("/healthz"))
            self.eps.setdefault(service, {})[job_id] = Endpoint(job_id, 1, replica, "127.0.0.1", port)

    def drain(self, service: str, job_id: int) -> None:
        with self.lock:
            self.eps[service][job_id] = dataclasses.replace(self.eps[service][job_id], draining=True)

    def routes(self):
        with self.lock:  # as the store does: a service's recorded address is the port asked for
            return {n: dataclasses.replace(spec, port=self.route.get(n, 0)) for n, spec in self.specs.items()}

    def endpoints(self, service):
        with self.lock:
            return [dataclasses.replace(v, drained=v.job_id in self.drained, ready=self.ready.get(v.job_id, False))
                    for v in self.eps.get(service, {}).values()]

    def set_ready(self, job_id, attempt, ready):
        self.ready[job_id] = ready

    def set_drained(self, job_id):
        self.drained.append(job_id)

    def set_route(self, service, host, port):
        self.route[service] = port

    def put_metrics(self, service, sample):
        self.samples.append((service, sample))


@pytest.fixture
def replicas(request):
    procs = []

    def start(n: int, service_ms: float = 10, concurrency: int = 4, ready_after: float = 0.0) -> list[int]:
        ports = []
        for i in range(n):
            port = free_port()
            procs.append(subprocess.Popen(
                [sys.executable, "-m", "crossdock.jobtools.demo_server", "--port", str(port), "--service-ms",
                 str(service_ms), "--concurrency", str(concurrency), "--ready-after", str(ready_after)],
                env={"PATH": "/usr/bin:/bin", "CROSSDOCK_REPLICA": str(len(procs)), "PYTHONPATH": ":".join(sys.path)}))
            ports.append(port)
        return ports

    start.procs = procs
    yield start
    for p in procs:
        p.kill()
        p.wait()


@pytest.fixture
def router():
    parts = []

    def start(source, **settings):
        part = RouterPart(source, RouterSettings(refresh_seconds=0.1, probe_seconds=0.1, publish_seconds=0.2,
                                                 window_seconds=2, **settings))
        part.start()
        parts.append(part)
        return part

    yield start
    for part in parts:
        part.stop()


def get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def test_balances_ready_replicas_and_follows_readiness(replicas, router):
    ports = replicas(2) + replicas(1, ready_after=2.0)
    src = MemorySource()
    for i, port in enumerate(ports):
        src.add("m", 10 + i, i, port)
    part = router(src)
    port = eventually("the listener", lambda: src.route.get("m"))
    eventually("replicas 0 and 1 ready", lambda: src.ready.get(10) and src.ready.get(11))
    assert not src.ready.get(12)  # still loading
    result = LoadRun(f"http://127.0.0.1:{port}/infer", [Step(60, 2)]).start().wait()
    assert result.failures() == []
    eventually("replica 2 ready after its load time", lambda: src.ready.get(12))
    seen = {get(f"http://127.0.0.1:{port}/x")[1] for _ in range(30)}
    assert len(seen) == 3  # every ready replica answers
    metrics = urllib.request.urlopen(f"http://127.0.0.1:{part.router.metrics_port}/metrics").read().decode()
    assert 'crossdock_service_requests_total{code="200",replica="0",service="m"}' in metrics
    assert "crossdock_service_request_duration_seconds_bucket" in metrics
    assert isinstance(part.router, ReadsServiceMetrics)
    m = part.router.service_metrics("m")
    assert m.qps > 0 and m.p95_seconds > 0.009  # at least the 10 ms service time
    assert src.samples and src.samples[-1][0] == "m"


def test_drain_loses_no_request_and_reports_drained_at_zero_in_flight(replicas, router):
    ports = replicas(2, service_ms=200, concurrency=8)
    src = MemorySource()
    for i, port in enumerate(ports):
        src.add("m", 20 + i, i, port)
    part = router(src)
    port = eventually("the listener", lambda: src.route.get("m"))
    eventually("both replicas ready", lambda: src.ready.get(20) and src.ready.get(21))
    run = LoadRun(f"http://127.0.0.1:{port}/", [Step(40, 4)]).start()
    ups = part.router.routes["m"].listed
    eventually("requests of 200 ms in flight on both", lambda: len(ups()) == 2 and all(u.in_flight for u in ups()))
    src.drain("m", 21)
    eventually("replica 1 drained", lambda: 21 in src.drained)
    replicas.procs[1].terminate()  # what the controller does next: stop the job
    replicas.procs[1].wait()
    result = run.wait()
    assert result.failures() == [] and len(result.samples) == 160
    assert src.drained == [21]
    after = LoadRun(f"http://127.0.0.1:{port}/", [Step(40, 1)]).start().wait()  # with replica 1 gone
    assert after.samples and after.failures() == []


def test_a_replica_that_dies_costs_no_request(replicas, router):
    ports = replicas(2)
    src = MemorySource()
    for i, port in enumerate(ports):
        src.add("m", 30 + i, i, port)
    router(src, failure_threshold=50)  # the probe would not notice for 5 s: the retry must
    port = eventually("the listener", lambda: src.route.get("m"))
    eventually("both replicas ready", lambda: src.ready.get(30) and src.ready.get(31))
    replicas.procs[0].kill()
    replicas.procs[0].wait()
    result = LoadRun(f"http://127.0.0.1:{port}/", [Step(50, 1)]).start().wait()
    assert result.failures() == []


def test_no_ready_replica_answers_503_after_the_wait(replicas, router):
    src = MemorySource()
    src.add("m", 40, 0, free_port())  # nothing listens there
    router(src, wait_seconds=0.3)
    port = eventually("the listener", lambda: src.route.get("m"))
    status, body = get(f"http://127.0.0.1:{port}/")
    assert status == 503 and b"no ready replica" in body
