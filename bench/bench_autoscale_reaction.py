"""Reaction time of the autoscaler: from a backlog spike (one submission of --jobs jobs, from
the moment the submission returns) to the first scale request, with the real scheduling loop and plan on a real Redis (the fleet is the
fake backend's, so only crossdock's own path is timed).

    python bench/bench_autoscale_reaction.py [--jobs 5000] [--runs 5]

Prints each run's reaction and their median, and the ratio against KEDA's default 30 s poll
(its reaction is up to one polling interval: 15 s on average for a spike at a random moment).
Target: median <= 1 s, i.e. a ratio <= 1/15 of KEDA's average.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import threading
import time
import uuid
from pathlib import Path

import yaml

KEDA_POLL_SECONDS = 30.0


def config(jobs: int) -> dict:
    return {
        "priority_classes": {"prep": {"value": 500}},
        "pools": {"box": {"backend": "fake", "nodes": [{"name": f"n{i}", "cpus": 64, "memory_mib": 262144}
                                                       for i in range(4)]}},
        "queues": {"prep": {"priority_class": "prep", "pools": ["box"],
                            "elastic": {"metric": "queue_length", "per_replica": 10, "max": max(jobs // 10, 1),
                                        "fleet": {"backend": "fake"}}}},
        "scheduler": {"interval_seconds": 1.0, "lease_seconds": 5},
        "autoscaler": {"interval_seconds": 1.0},
    }


def one_run(tmp: Path, jobs: int) -> float:
    from crossdock import service
    from crossdock.backends.fake.backend import FakeBackend
    from crossdock.queue.models import JobSpec
    from crossdock.runtime import Runtime
    from crossdock.workers.leader import Scheduler

    os.environ["CROSSDOCK_PREFIX"] = f"react{uuid.uuid4().hex[:6]}"
    rt = Runtime.from_env()
    fake = FakeBackend(rt.config, rt.store)
    rt.backends.use("fake", fake)
    first: list[float] = []
    scale = fake.scale_fleet

    def timed(fleet, replicas, busy=frozenset()):
        if replicas > 0 and not first:
            first.append(time.monotonic())
        return scale(fleet, replicas, busy)

    fake.scale_fleet = timed
    sched = Scheduler(rt, lambda *_: None)
    stop = threading.Event()
    thread = threading.Thread(target=sched.run, args=(stop,), daemon=True)
    thread.start()
    try:
        while sched.parts["autoscale"].last_success_at is None:  # the loop is up, idle, nothing pending
            time.sleep(0.01)
        time.sleep(0.3)  # a spike at some moment of the idle loop's wait
        specs = [JobSpec(command=["true"], workdir=str(tmp), queue="prep") for _ in range(jobs)]
        service.submit(rt, specs)
        started = time.monotonic()  # the whole spike is in the store (the loop may have seen part of it)
        deadline = started + 60
        while not first and time.monotonic() < deadline:
            time.sleep(0.005)
        if not first:
            raise SystemExit("no scale request within 60 s")
        return max(first[0] - started, 0.0)  # 0: asked for while the spike was being written
    finally:
        stop.set()
        thread.join(10)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=5000)
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="crossdock-bench-"))
    from crossdock.backends.redis_store import embedded

    url = embedded.ensure_running(tmp)
    cfg = tmp / "crossdock.yaml"
    cfg.write_text(yaml.safe_dump(config(args.jobs)))
    os.environ.update({"CROSSDOCK_REDIS_URL": url, "CROSSDOCK_CONFIG": str(cfg), "CROSSDOCK_STATE_DIR": str(tmp)})
    try:
        times = [one_run(tmp, args.jobs) for _ in range(args.runs)]
    finally:
        embedded.stop(tmp)
    median = statistics.median(times)
    print(f"spike of {args.jobs} jobs -> first scale request: " + ", ".join(f"{t:.3f}s" for t in times))
    print(f"median {median:.3f}s; against KEDA's average {KEDA_POLL_SECONDS / 2:.0f}s (poll {KEDA_POLL_SECONDS:.0f}s):"
          f" ratio {median / (KEDA_POLL_SECONDS / 2):.3f} (target <= {1 / (KEDA_POLL_SECONDS / 2):.3f}, i.e. <= 1 s)")


if __name__ == "__main__":
    main()
