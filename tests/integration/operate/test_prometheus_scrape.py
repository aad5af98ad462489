"""A real Prometheus (Debian's ``prometheus``) scrapes a running ``crossdock up`` on the embedded
default (local backend, its own Redis) and answers PromQL over what it scraped: placements and
ends counted by the scheduler, dispatch latency recorded in the Celery worker's pool children
(multiprocess mode), Redis round trips, both processes found through the discovery files they
write. The test fails, not skips, under CI=true when prometheus is not installed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from crossdock.dev.proc import free_port
from tests.prometheus_server import prometheus_binary

pytestmark = [pytest.mark.operate, pytest.mark.redis, pytest.mark.celery]

JOBS = 3


def wait_until(what: str, condition, timeout: float, log: Path | None = None):
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        if time.monotonic() > deadline:
            tail = log.read_text()[-3000:] if log and log.exists() else ""
            pytest.fail(f"timed out after {timeout:.0f}s waiting for {what}\n{tail}", pytrace=False)
        time.sleep(0.2)
    return value


@pytest.fixture
def crossdock_up(tmp_path):
    """``crossdock up`` on the embedded default config, in its own state dir, metrics on a free
    base port; yields (state dir, env, log)."""
    state = tmp_path / "state"
    env = {k: v for k, v in os.environ.items() if not k.startswith("CROSSDOCK_")}
    env.update({"CROSSDOCK_STATE_DIR": str(state), "CROSSDOCK_METRICS_ADDRESS": f"127.0.0.1:{free_port()}",
                "CROSSDOCK_SOCKET": "none"})
    log = tmp_path / "up.log"
    with open(log, "ab") as out:
        proc = subprocess.Popen([sys.executable, "-m", "crossdock", "up", "--workers", "1"], env=env, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)
    try:
        yield state, env, log
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        from crossdock.backends.redis_store import embedded

        embedded.stop(state, timeout=5)


@pytest.fixture
def prometheus(tmp_path, crossdock_up):
    """Prometheus on loopback, scraping every target crossdock's discovery files name, every second."""
    state, _env, _log = crossdock_up
    binary = prometheus_binary()
    port = free_port()
    config = tmp_path / "prometheus.yml"
    config.write_text(json.dumps({  # JSON is YAML
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "scrape_configs": [{"job_name": "crossdock", "scrape_interval": "1s",
                            "file_sd_configs": [{"files": [str(state / "metrics" / "targets" / "*.json")],
                                                 "refresh_interval": "1s"}]}]}))
    log = tmp_path / "prometheus.log"
    with open(log, "ab") as out:
        proc = subprocess.Popen([binary, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                                 f"--web.listen-address=127.0.0.1:{port}"], stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until("prometheus to be ready", lambda: _get(f"{url}/-/ready") is not None or proc.poll() is not None,
                   60, log)
        assert proc.poll() is None, log.read_text()[-3000:]
        yield url, log
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _get(url: str) -> bytes | None:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return resp.read()
    except OSError:
        return None


def query(base: str, promql: str) -> float | None:
    """The value of an instant query with one result (None: no result yet)."""
    raw = _get(f"{base}/api/v1/query?{urllib.parse.urlencode({'query': promql})}")
    if raw is None:
        return None
    data = json.loads(raw)
    assert data["status"] == "success", data
    result = data["data"]["result"]
    return float(result[0]["value"][1]) if result else None


def test_prometheus_scrapes_a_running_crossdock(crossdock_up, prometheus):
    state, env, up_log = crossdock_up
    prom, prom_log = prometheus
    report = wait_until("up to report its metrics endpoint",
                        lambda: _up_report(state).get("metrics", {}).get("url"), 60, up_log)
    assert report.startswith("http://127.0.0.1:")
    assert b"crossdock_scheduler_cycles_total" in _get(report)
    ids = []
    for i in range(JOBS):
        out = subprocess.run([sys.executable, "-m", "crossdock", "submit", "--parsable", "-J", f"scrape-{i}",
                              "--wrap", "sleep 0.3"], env=env, capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        ids.append(int(out.stdout.strip().split(";")[0]))
    # Every process that listed itself is a target (up, its worker and the services' router), found
    # through the files they wrote, and is up.
    targets = Path(state) / "metrics" / "targets"
    listed = lambda: len(list(targets.glob("*.json"))) if targets.is_dir() else 0  # noqa: E731
    wait_until("every listed target up",
               lambda: listed() >= 2 and query(prom, 'count(up{job="crossdock"} == 1)') == listed(), 60, prom_log)
    assert query(prom, 'count by (role) (up{role="worker"})') == 1
    # The scheduler placed and saw the end of every job; the worker's pool child timed each dispatch.
    wait_until(f"{JOBS} placements", lambda: (query(prom, "sum(crossdock_placements_total{pool='local'})") or 0)
               >= JOBS, 60, up_log)
    wait_until(f"{JOBS} completed",
               lambda: (query(prom, 'sum(crossdock_jobs_finished_total{state="COMPLETED",backend="local"})') or 0)
               >= JOBS, 90, up_log)
    wait_until("the dispatch latencies",
               lambda: (query(prom, 'sum(crossdock_dispatch_latency_seconds_count{backend="local",role="worker"})')
                        or 0) >= JOBS, 60, up_log)
    # a rate needs two scrapes of a target; the jobs may all have ended before the second one
    wait_until("two scrapes of each target",
               lambda: (query(prom, 'min(count_over_time(up{job="crossdock"}[1m]))') or 0) >= 2, 60, prom_log)
    # over every cycle since start: the cycles may all have come before the second scrape
    p99 = query(prom, "histogram_quantile(0.99, sum by (le) (crossdock_scheduler_cycle_seconds_bucket))")
    assert p99 is not None and 0 < p99 < 30
    assert (query(prom, 'sum(rate(crossdock_redis_round_trip_seconds_count{role="up"}[1m]))') or 0) > 0
    assert (query(prom, 'sum(crossdock_redis_round_trip_seconds_count{role="worker"})') or 0) > 0
    assert query(prom, 'crossdock_scheduler_leader{role="up"}') == 1
    # run times of 0.3 s jobs land in the first buckets
    assert (query(prom, 'sum(crossdock_job_run_seconds_bucket{le="5.0",state="COMPLETED"})') or 0) >= JOBS
    # every query of the Grafana dashboard is PromQL this Prometheus evaluates (with Grafana's variables set)
    for expr in dashboard_queries():
        raw = _get(f"{prom}/api/v1/query?{urllib.parse.urlencode({'query': expr})}")
        assert raw is not None and json.loads(raw)["status"] == "success", expr
    assert query(prom, 'sum(crossdock_jobs{queue=~".*"})') is not None


def dashboard_queries() -> list[str]:
    dash = json.loads((Path(__file__).resolve().parents[3] / "deploy" / "grafana" / "crossdock.json").read_text())
    return [t["expr"].replace("$__rate_interval", "1m").replace("$queue", ".*")
            for p in dash["panels"] for t in p.get("targets", [])]


def _up_report(state: Path) -> dict:
    try:
        return json.loads((state / "up.json").read_text())
    except (OSError, ValueError):
        return {}
