"""The API under 200 concurrent clients on loopback for a bounded time: ``crossdock api`` as its
own process, each client its own connection, reads and submissions mixed; not one error, and
the latency percentiles printed (a speed target is bench/bench_rest.py's, as a ratio)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
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
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        assert proc.poll() is None, log.read_text()
        try:
            if httpx.get(f"{url}/healthz", timeout=2).status_code == 200:
                break
        except httpx.TransportError:
            pass
        assert time.monotonic() < deadline, f"crossdock api did not answer in 60s:\n{log.read_text()}"
        time.sleep(0.1)
    yield url
    proc.terminate()
    assert proc.wait(15) in (0, -15), log.read_text()[-3000:]  # uvicorn stops cleanly, then re-raises the signal


async def client(i: int, c: httpx.AsyncClient, job_id: int, chdir: str, until: float,
                 latencies: list[float], errors: list[str]) -> int:
    body = {"command": ["true"], "hold": True, "chdir": chdir, "name": f"load-{i}"}
    n = 0
    while time.monotonic() < until:
        start = time.perf_counter()
        try:
            if n % 10 == 9:
                r = await c.post("/v1/jobs", json=body)
            elif n % 10 == 4:
                r = await c.get("/v1/whoami")
            else:
                r = await c.get(f"/v1/jobs/{job_id}")
            if r.status_code >= 300:
                errors.append(f"{r.request.method} {r.request.url.path}: {r.status_code} {r.text[:200]}")
        except httpx.HTTPError as exc:
            errors.append(f"client {i}: {type(exc).__name__}: {exc!r}")
        latencies.append(time.perf_counter() - start)
        n += 1
    return n


def test_two_hundred_concurrent_clients_get_no_error(api_process, runtime, tmp_path):
    headers = make_token(runtime.store, "root")
    job_id = httpx.post(f"{api_process}/v1/jobs", json={"command": ["true"], "hold": True, "chdir": str(tmp_path)},
                        headers=headers).json()["job_id"]
    latencies: list[float] = []
    errors: list[str] = []

    async def run() -> list[int]:
        # one pool of CLIENTS connections, one per client (a pool's clients share its TLS setup,
        # which costs the client process seconds when made 200 times)
        async with httpx.AsyncClient(base_url=api_process, headers=headers, timeout=60,
                                     limits=httpx.Limits(max_connections=CLIENTS, max_keepalive_connections=CLIENTS)) as c:
            until = time.monotonic() + SECONDS
            return await asyncio.gather(*(client(i, c, job_id, str(tmp_path), until, latencies, errors)
                                          for i in range(CLIENTS)))

    started = time.monotonic()
    counts = asyncio.run(run())
    elapsed = time.monotonic() - started
    latencies.sort()
    p50, p99 = latencies[len(latencies) // 2], latencies[int(len(latencies) * 0.99)]
    print(f"\n{CLIENTS} clients, {sum(counts)} requests in {elapsed:.1f}s ({sum(counts) / elapsed:.0f}/s):"
          f" p50 {p50 * 1000:.0f} ms, p99 {p99 * 1000:.0f} ms, max {latencies[-1] * 1000:.0f} ms, {len(errors)} errors")
    assert errors == []
    assert all(n >= 1 for n in counts), "a client got no answer in the time"
    submitted = [j for j in runtime.store.get_many(runtime.store.all_ids()) if j.spec.name.startswith("load-")]
    assert len(submitted) == sum(n // 10 for n in counts)  # every accepted submission stored, once
