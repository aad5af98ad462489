"""The Prometheus metrics source against a real Prometheus scraping an exporter the test drives:
request rates and the p95 latency come back through PromQL instant queries, per replica and
summed; an unreachable server or a refused query gives no metrics instead of a guess."""

from __future__ import annotations

import threading
import time

import pytest

from crossdock.backends.prometheus import PrometheusMetrics, from_config
from tests.prometheus_server import scraped

pytestmark = [pytest.mark.services]

QPS = 'sum by (replica) (rate(svc_requests_total{service="{service}"}[3s]))'
P95 = ('histogram_quantile(0.95, sum by (le) '
       '(rate(svc_request_duration_seconds_bucket{service="{service}"}[3s])))')
IN_FLIGHT = 'sum by (replica) (svc_in_flight{service="{service}"})'
CPU = 'sum by (replica) (svc_cpu_cores{service="{service}"})'


def wait_for(what, fn, timeout=30.0):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = fn()
        if last:
            return last
        time.sleep(0.25)
    pytest.fail(f"timed out waiting for {what} (last: {last!r})")


def test_rates_latency_and_in_flight_come_from_promql(tmp_path):
    from prometheus_client import Counter, Gauge, Histogram

    with scraped(tmp_path) as (registry, url):
        requests = Counter("svc_requests", "requests", ["service", "replica"], registry=registry)
        latency = Histogram("svc_request_duration_seconds", "latency", ["service"],
                            buckets=(0.1, 0.2, 0.4, 0.8), registry=registry)
        in_flight = Gauge("svc_in_flight", "in flight", ["service", "replica"], registry=registry)
        in_flight.labels("chat", "0").set(3)
        in_flight.labels("chat", "1").set(1)
        in_flight.labels("other", "0").set(50)
        cpu = Gauge("svc_cpu_cores", "cores used", ["service", "replica"], registry=registry)
        cpu.labels("chat", "0").set(1.5)
        cpu.labels("chat", "1").set(0.5)
        stop = threading.Event()

        def traffic():  # replica 0 gets 40/s, replica 1 20/s, every request takes 0.3 s; "other" 100/s
            while not stop.wait(0.05):
                requests.labels("chat", "0").inc(2)
                requests.labels("chat", "1").inc(1)
                requests.labels("other", "0").inc(5)
                for _ in range(3):
                    latency.labels("chat").observe(0.3)

        thread = threading.Thread(target=traffic, daemon=True)
        thread.start()
        try:
            source = from_config({"source": "prometheus", "url": url, "qps_query": QPS, "p95_query": P95,
                                  "in_flight_query": IN_FLIGHT, "cpu_query": CPU, "window_seconds": 3})
            m = wait_for("a full rate window", lambda: (s := source.service_metrics("chat")) is not None
                         and len(s.replica_qps) == 2 and s.p95_seconds is not None and s.qps > 50 and s)
        finally:
            stop.set()
            thread.join()
    assert m.qps == pytest.approx(60, rel=0.3)
    assert m.replica_qps[0] == pytest.approx(2 * m.replica_qps[1], rel=0.25)
    assert m.qps == pytest.approx(sum(m.replica_qps.values()))
    # every observation in the (0.2, 0.4] bucket: linear interpolation gives 0.2 + 0.95 × 0.2
    assert m.p95_seconds == pytest.approx(0.39, abs=1e-6)
    assert m.in_flight == {0: 3, 1: 1}
    assert m.cpu_used == {0: 1.5, 1: 0.5}
    assert m.window_seconds == 3


def test_no_traffic_is_zero_and_no_server_is_no_metrics(tmp_path):
    with scraped(tmp_path) as (_registry, url):
        quiet = PrometheusMetrics(url, QPS, P95).service_metrics("nobody")
        assert quiet is not None and quiet.qps == 0 and quiet.p95_seconds is None and quiet.replica_qps == {}
        # a query Prometheus refuses (400 bad_data) is no metrics, not an exception
        assert PrometheusMetrics(url, "sum(rate(x[", None).service_metrics("chat") is None
    # the server is gone
    assert PrometheusMetrics(url, QPS, timeout=1).service_metrics("chat") is None
