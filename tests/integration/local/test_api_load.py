"""The API under 200 concurrent clients on loopback for a bounded time: ``crossdock api`` as its
own process, each client a thread with its own keep-alive connection (the standard library's
``http.client``, light enough that the clients do not starve the server on a small machine),
reads and submissions mixed; not one error, and the latency percentiles printed (a speed
target is bench/bench_rest.py's, as a ratio)."""

from __future__ import annotations

import http.client
import json
import os
import subprocess
import sys
import threading
import time

import httpx
import pytest

from tests.integration.local.rest import make_token
from tests.integration.local.test_users import free_port

pytestmark = [pytest.mark.operate, pytest.mark.redis]

CLIENTS = 200
SECONDS = 8.0


@pytest.fixture
def api_process(runtime, tmp_path):
    port = free_port()
    log = tmp_path / "api.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "crossdock", "api", "--port", str(port), "--log-level", "warning"],
                                stdout=out, stderr=subprocess.STDOUT, env=dict(os.environ), start_new_session=True)
    deadline = time.monotonic() + 60
    while True:
        assert proc.poll() is None, log.read_text()
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code == 200:
                break
        except httpx.TransportError:
            pass
        assert time.monotonic() < deadline, f"crossdock api did not answer in 60s:\n{log.read_text()}"
        time.sleep(0.1)
    yield port
    proc.terminate()
    assert proc.wait(15) == 0, log.read_text()[-3000:]  # a clean stop on SIGTERM


def client(i: int, port: int, headers: dict, job_id: int, chdir: str, start: threading.Barrier, until: list[float],
           latencies: list[float], errors: list[str], counts: list[int]) -> None:
    body = json.dumps({"command": ["true"], "hold": True, "chdir": chdir, "name": f"load-{i}"})
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    mine, n = [], 0
    start.wait()
    while n == 0 or time.monotonic() < until[0]:  # one request at least, however late this thread starts
        t = time.perf_counter()
        try:
            if n % 10 == 9:
                conn.request("POST", "/v1/jobs", body, {**headers, "Content-Type": "application/json"})
            else:
                conn.request("GET", "/v1/whoami" if n % 10 == 4 else f"/v1/jobs/{job_id}", headers=headers)
            r = conn.getresponse()
            data = r.read()
            if r.status >= 300:
                errors.append(f"client {i}: {r.status} {data[:200]!r}")
        except (OSError, http.client.HTTPException) as exc:
            errors.append(f"client {i}: {type(exc).__name__}: {exc}")
            conn.close()
        mine.append(time.perf_counter() - t)
        n += 1
    conn.close()
    latencies.extend(mine)
    counts[i] = n


def test_two_hundred_concurrent_clients_get_no_error(api_process, runtime, tmp_path):
    headers = make_token(runtime.store, "root")
    job_id = httpx.post(f"http://127.0.0.1:{api_process}/v1/jobs", headers=headers,
                        json={"command": ["true"], "hold": True, "chdir": str(tmp_path)}).json()["job_id"]
    latencies: list[float] = []
    errors: list[str] = []
    counts = [0] * CLIENTS
    until = [0.0]
    start = threading.Barrier(CLIENTS + 1)
    threads = [threading.Thread(target=client, args=(i, api_process, headers, job_id, str(tmp_path), start, until,
                                                     latencies, errors, counts)) for i in range(CLIENTS)]
    for t in threads:
        t.start()
    until[0] = time.monotonic() + SECONDS
    started = time.monotonic()
    start.wait()
    for t in threads:
        t.join(120)
    elapsed = time.monotonic() - started
    latencies.sort()
    p50, p99 = latencies[len(latencies) // 2], latencies[int(len(latencies) * 0.99)]
    print(f"\n{CLIENTS} clients, {sum(counts)} requests in {elapsed:.1f}s ({sum(counts) / elapsed:.0f}/s):"
          f" p50 {p50 * 1000:.0f} ms, p99 {p99 * 1000:.0f} ms, max {latencies[-1] * 1000:.0f} ms, {len(errors)} errors")
    assert errors == []
    assert all(n >= 1 for n in counts), "a client sent no request"
    submitted = [j for j in runtime.store.get_many(runtime.store.all_ids()) if j.spec.name.startswith("load-")]
    assert len(submitted) == sum(n // 10 for n in counts)  # every accepted submission stored, once
