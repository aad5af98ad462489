"""crossdock.observe: what each recording function counts (read back from the registry), the
exporter's address rules and port fallback, and its discovery file."""

from __future__ import annotations

import json
import socket
import urllib.request
from datetime import datetime, timedelta, timezone
from types import SimpleNamespace

import pytest
from prometheus_client import REGISTRY

from crossdock.observe import exporter, metrics
from crossdock.queue.config import Metrics
from crossdock.queue.cycle import CycleResult, Placement, Preemption
from crossdock.queue.ports import BackendUnavailable, SubmitFailed
from crossdock.queue.states import JobState

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=timezone.utc)


def value(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def job(i: int, queue: str = "q-unit", state: JobState = JobState.PENDING, backend: str | None = None, **kw):
    fields = dict(id=i, queue=queue, state=state, backend=backend, pool=kw.pop("pool", None),
                  submit_time=kw.pop("submit_time", NOW - timedelta(seconds=30)), eligible_time=None,
                  start_time=None, end_time=None, scheduled_time=None)
    fields.update(kw)
    return SimpleNamespace(**fields)


@pytest.mark.parametrize("text,expected", [
    ("127.0.0.1:9700", exporter.Address("127.0.0.1", 9700)),
    ("9701", exporter.Address("127.0.0.1", 9701)),
    ("[::1]:9702", exporter.Address("::1", 9702)),
    ("0.0.0.0:9703", exporter.Address("0.0.0.0", 9703)),
    ("0", None), ("off", None), ("127.0.0.1:0", None),
], ids=["host-port", "port", "ipv6", "all-interfaces", "zero", "off", "port-zero"])
def test_addresses_from_the_environment(text, expected):
    assert exporter.parse(text) == expected


@pytest.mark.parametrize("text", ["localhost:http", "127.0.0.1:70000", "nine"], ids=["name", "too-big", "word"])
def test_a_bad_address_is_one_line_naming_the_variable(text):
    with pytest.raises(exporter.BadAddress) as err:
        exporter.parse(text)
    assert str(err.value).startswith(f"CROSSDOCK_METRICS_ADDRESS={text!r}") and "\n" not in str(err.value)


def test_the_environment_wins_over_the_config_and_port_0_disables():
    cfg = Metrics(address="127.0.0.2", port=9800)
    assert exporter.resolve(cfg, {}) == exporter.Address("127.0.0.2", 9800)
    assert exporter.resolve(cfg, {exporter.ENV: "9801"}) == exporter.Address("127.0.0.1", 9801)
    assert exporter.resolve(Metrics(port=0), {}) is None
    assert exporter.resolve(Metrics(), {}) == exporter.Address("127.0.0.1", 9640)


def test_a_cycle_counts_placements_preemptions_waits_phases_and_reasons():
    jobs = {1: job(1), 2: job(2), 3: job(3), 9: job(9, state=JobState.RUNNING, backend="local", pool="p-victim")}
    result = CycleResult(admitted=[Placement(1, "p-unit", "local", ("n1",)), Placement(2, "p-unit", "local", ("n1",))],
                         preemptions=[Preemption(9, 3, 5)], pending={3: "Resources"},
                         timings={"schedule": 0.002, "order": 0.001})
    before = (value("crossdock_placements_total", queue="q-unit", pool="p-unit", backend="local"),
              value("crossdock_job_queue_wait_seconds_count", queue="q-unit"),
              value("crossdock_job_queue_wait_seconds_sum", queue="q-unit"),
              value("crossdock_preemptions_total", queue="q-unit", pool="p-victim"),
              value("crossdock_scheduler_cycle_phase_seconds_count", phase="commit"))
    metrics.record_cycle(result, jobs, NOW, 0.01, {"commit": 0.003})
    after = (value("crossdock_placements_total", queue="q-unit", pool="p-unit", backend="local"),
             value("crossdock_job_queue_wait_seconds_count", queue="q-unit"),
             value("crossdock_job_queue_wait_seconds_sum", queue="q-unit"),
             value("crossdock_preemptions_total", queue="q-unit", pool="p-victim"),
             value("crossdock_scheduler_cycle_phase_seconds_count", phase="commit"))
    assert [a - b for a, b in zip(after, before)] == [2, 2, pytest.approx(60), 1, 1]
    assert value("crossdock_pending_jobs", queue="q-unit", reason="Resources") == 1
    metrics.record_cycle(CycleResult(), jobs, NOW, 0.01, {})
    assert value("crossdock_pending_jobs", queue="q-unit", reason="Resources") == 0  # gone, kept at 0


def test_the_jobs_gauge_follows_the_cycles_view():
    metrics.record_jobs([job(1, queue="q-gauge"), job(2, queue="q-gauge")],
                        [job(3, queue="q-gauge", state=JobState.RUNNING, backend="k8s")])
    assert value("crossdock_jobs", queue="q-gauge", state="PENDING", backend="none") == 2
    assert value("crossdock_jobs", queue="q-gauge", state="RUNNING", backend="k8s") == 1
    metrics.record_jobs([], [job(3, queue="q-gauge", state=JobState.RUNNING, backend="k8s")])
    assert value("crossdock_jobs", queue="q-gauge", state="PENDING", backend="none") == 0
    metrics.forget_cycle_view()  # a leader that became a standby counts nothing
    assert value("crossdock_jobs", queue="q-gauge", state="RUNNING", backend="k8s") == 0


def test_ended_attempts_count_by_state_with_their_run_time():
    start = NOW - timedelta(seconds=42)
    ended = job(5, queue="q-end", state=JobState.COMPLETED, backend="local", start_time=start, end_time=NOW)
    before = value("crossdock_job_run_seconds_sum", queue="q-end", backend="local", state="COMPLETED")
    metrics.record_ended([ended])
    assert value("crossdock_jobs_finished_total", queue="q-end", backend="local", state="COMPLETED") == 1
    assert value("crossdock_job_run_seconds_sum", queue="q-end", backend="local", state="COMPLETED") - before == 42


def test_backend_calls_count_errors_and_one_outage_per_streak():
    def call(exc=None):
        with pytest.raises(type(exc)) if exc else _nothing():
            with metrics.backend_call("b-unit", "submit"):
                if exc:
                    raise exc

    call()
    assert value("crossdock_backend_up", backend="b-unit") == 1
    call(BackendUnavailable("away", retryable=True))
    call(BackendUnavailable("still away", retryable=True))
    assert value("crossdock_backend_up", backend="b-unit") == 0
    assert value("crossdock_backend_outages_total", backend="b-unit") == 1
    call(SubmitFailed("refused"))  # the backend answered: up again, one error more
    assert value("crossdock_backend_up", backend="b-unit") == 1
    assert value("crossdock_backend_errors_total", backend="b-unit", operation="submit", error="SubmitFailed") == 1
    assert value("crossdock_backend_errors_total", backend="b-unit", operation="submit",
                 error="BackendUnavailable") == 2
    assert value("crossdock_backend_request_seconds_count", backend="b-unit", operation="submit") == 4


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def test_dispatch_latency_is_from_the_commit():
    scheduled = datetime.now(timezone.utc) - timedelta(seconds=2)
    metrics.record_dispatch("b-disp", "submitted", [job(1, scheduled_time=scheduled)])
    metrics.record_dispatch("b-disp", "duplicate")
    assert value("crossdock_dispatches_total", backend="b-disp", outcome="submitted") == 1
    assert value("crossdock_dispatches_total", backend="b-disp", outcome="duplicate") == 1
    assert value("crossdock_dispatch_latency_seconds_count", backend="b-disp") == 1
    assert 2 <= value("crossdock_dispatch_latency_seconds_sum", backend="b-disp") < 10


def test_autoscaler_gauges_from_a_pass():
    metrics.record_autoscale({"fleets": [{"queue": "q-as", "backlog": 12, "current": 1, "desired": 3}],
                              "pools": [{"pool": "p-as", "current": 2, "desired": 4, "waiting": 5},
                                        {"pool": "p-err", "error": "away"}]})
    assert value("crossdock_autoscaler_backlog_jobs", queue="q-as") == 12
    assert value("crossdock_autoscaler_desired_replicas", queue="q-as") == 3
    assert value("crossdock_autoscaler_desired_nodes", pool="p-as") == 4
    assert REGISTRY.get_sample_value("crossdock_autoscaler_current_nodes", {"pool": "p-err"}) is None


def test_the_exporter_takes_the_next_free_port_and_writes_its_discovery_file(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        served = exporter.serve(exporter.Address("127.0.0.1", port), "unit", 0, tmp_path)
        assert served is not None
        try:
            assert served.address.port > port
            with urllib.request.urlopen(served.url, timeout=5) as resp:
                assert b"crossdock_scheduler_cycles_total" in resp.read()
            target, = (tmp_path / "metrics" / "targets").glob("unit-*.json")
            assert json.loads(target.read_text()) == [{"targets": [f"127.0.0.1:{served.address.port}"],
                                                       "labels": {"role": "unit"}}]
        finally:
            served.stop()
        assert not list((tmp_path / "metrics" / "targets").glob("*.json"))
