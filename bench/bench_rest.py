"""REST submit throughput and latency against the Python API's, in the same run, on the same Redis.

    python bench/bench_rest.py [--jobs 2000] [--clients 1,16]

For each number of concurrent clients: the Python API (``Client.submit_command``, one job per
call, one thread per client) and the REST API (``POST /v1/jobs`` to ``crossdock api`` running
as its own process, one keep-alive connection per client thread, the same job as its dry-run
JSON). Prints jobs/s,
p50 and p99 for each, and the ratio REST / Python API (what HTTP, JSON and a second process
cost a submission).
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench_submit import bench_store  # noqa: E402


def run_clients(clients: int, jobs: int, submit_one) -> tuple[float, list[float]]:
    """``jobs`` submissions spread over ``clients`` threads; (seconds, latencies)."""
    latencies: list[float] = []
    lock = threading.Lock()
    share = [jobs // clients + (i < jobs % clients) for i in range(clients)]

    def worker(i: int) -> None:
        mine = []
        state = submit_one(None, i)  # a client's setup (a connection), outside the timing
        for _ in range(share[i]):
            t = time.perf_counter()
            submit_one(state, i)
            mine.append(time.perf_counter() - t)
        with lock:
            latencies.extend(mine)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(clients)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return time.perf_counter() - t0, sorted(latencies)


def line(name: str, clients: int, seconds: float, lat: list[float]) -> float:
    rate = len(lat) / seconds
    print(f"{name:<12} {clients:>3} clients: {len(lat)} jobs in {seconds:.2f}s = {rate:,.0f} jobs/s,"
          f" p50 {lat[len(lat) // 2] * 1000:.1f} ms, p99 {lat[int(len(lat) * 0.99)] * 1000:.1f} ms")
    return rate


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--jobs", type=int, default=2000, help="submissions per path and client count")
    ap.add_argument("--clients", default="1,16", help="comma list of concurrent client counts")
    args = ap.parse_args()

    tmp, env = bench_store()
    os.environ.update(env)
    import httpx

    from crossdock.api import tokens
    from crossdock.backends.redis_store import embedded
    from crossdock.client import Client
    from crossdock.queue.models import JobSpec
    from crossdock.queue.sbatch_json import dry_run_json
    from crossdock.runtime import Runtime

    rt = Runtime.from_env()
    text, record = tokens.new_token(Client(rt).user, False, "bench")
    rt.store.access.put_token(record, "bench")
    port = 18000 + os.getpid() % 20000
    log = open(tmp / "api.log", "wb")
    server = subprocess.Popen([sys.executable, "-m", "crossdock", "api", "--port", str(port), "--log-level", "warning"],
                              stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"{url}/healthz", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                if time.monotonic() > deadline or server.poll() is not None:
                    raise SystemExit(f"crossdock api did not start: {(tmp / 'api.log').read_text()}")
                time.sleep(0.1)
        body = dry_run_json(JobSpec(command=["true"], name="bench", workdir=str(tmp)))
        headers = {"Authorization": f"Bearer {text}"}

        def python_api(client, i):
            if client is None:
                return Client(Runtime.from_env())
            client.submit_command(["true"], name="bench")

        payload = json.dumps(body)
        post_headers = {**headers, "Content-Type": "application/json"}

        def rest(conn, i):  # the standard library's client: what the clients cost stays small
            if conn is None:
                return http.client.HTTPConnection("127.0.0.1", port, timeout=60)
            conn.request("POST", "/v1/jobs", payload, post_headers)
            r = conn.getresponse()
            answer = r.read()
            if r.status != 201:
                raise SystemExit(f"REST submit failed: {r.status} {answer[:300]!r}")

        for clients in (int(c) for c in args.clients.split(",")):
            api_rate = line("Python API", clients, *run_clients(clients, args.jobs, python_api))
            rest_rate = line("REST", clients, *run_clients(clients, args.jobs, rest))
            print(f"ratio REST / Python API at {clients} clients: {rest_rate / api_rate:.2f}x")
    finally:
        server.terminate()
        server.wait(15)
        embedded.stop(tmp)


if __name__ == "__main__":
    main()
