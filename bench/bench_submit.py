"""Submission throughput: the Python API (batched, pipelined) and the CLI against a bare Celery
``.delay()`` loop of the same count, in the same run, on the same Redis.

    python bench/bench_submit.py [--jobs 10000] [--cli-jobs 100]

Prints jobs/s for each path and the ratio API / bare Celery (target: >= 1).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import yaml


def bench_store() -> tuple[Path, dict[str, str]]:
    """A temporary state dir with an embedded Redis and a one-node local config; the CROSSDOCK_*
    variables that point a process at them (a prefix of its own)."""
    tmp = Path(tempfile.mkdtemp(prefix="crossdock-bench-"))
    from crossdock.backends.redis_store import embedded

    url = embedded.ensure_running(tmp)
    cfg = tmp / "crossdock.yaml"
    cfg.write_text(yaml.safe_dump({
        "priority_classes": {"batch": {"value": 100}},
        "pools": {"local": {"backend": "local", "nodes": [{"name": "localhost", "cpus": 64, "memory_mib": 65536}]}},
        "queues": {"batch": {"priority_class": "batch", "pools": ["local"]}},
    }))
    return tmp, {"CROSSDOCK_REDIS_URL": url, "CROSSDOCK_CONFIG": str(cfg), "CROSSDOCK_STATE_DIR": str(tmp),
                 "CROSSDOCK_PREFIX": f"bench{uuid.uuid4().hex[:6]}"}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=10_000)
    ap.add_argument("--cli-jobs", type=int, default=100)
    args = ap.parse_args()

    from crossdock.backends.redis_store import embedded

    tmp, env = bench_store()
    url = env["CROSSDOCK_REDIS_URL"]
    os.environ.update(env)

    from celery import Celery

    from crossdock.client import Client
    from crossdock.queue.models import JobSpec
    from crossdock.workers.app import celery_url

    n = args.jobs
    bare = Celery("bare", broker=celery_url(url))
    bare.conf.task_ignore_result = True

    @bare.task(name="bench.noop")
    def noop(i: int) -> int:
        return i

    t0 = time.perf_counter()
    for i in range(n):
        noop.apply_async((i,), queue="bench-bare")
    celery_s = time.perf_counter() - t0

    client = Client()
    specs = [JobSpec(command=["true"], name=f"job{i}", user="bench", workdir=str(tmp)) for i in range(n)]
    t0 = time.perf_counter()
    handles = client.submit_specs(specs)
    api_s = time.perf_counter() - t0
    assert len(handles) == n and len(client.runtime.store.pending_ids()) == n

    m = args.cli_jobs
    t0 = time.perf_counter()
    for i in range(m):
        subprocess.run([sys.executable, "-m", "crossdock.cli.main", "submit", "--parsable", "--wrap", "true"],
                       check=True, capture_output=True)
    cli_s = time.perf_counter() - t0

    print(f"bare Celery .apply_async loop: {n} messages in {celery_s:.2f}s = {n / celery_s:,.0f}/s")
    print(f"crossdock Python API (batched): {n} jobs in {api_s:.2f}s = {n / api_s:,.0f} jobs/s")
    print(f"crossdock CLI (one process per job): {m} jobs in {cli_s:.2f}s = {m / cli_s:,.1f} jobs/s")
    print(f"ratio API / bare Celery: {(n / api_s) / (n / celery_s):.2f}x")
    embedded.stop(tmp)


if __name__ == "__main__":
    main()
