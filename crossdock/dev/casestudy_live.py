"""The case study, live and small: real processes under real cgroup CPU quotas on this machine.

A real inference server (:mod:`crossdock.jobtools.demo_server`, each request burning ``cpu_ms``
of CPU in one of two worker processes) under a steady open-loop load
(:mod:`crossdock.jobtools.loadgen`, its own process), beside CPU-heavy training stand-ins (one
busy process each: a job that uses all the CPUs it asked for), every one of them a crossdock job
on the local backend, placed by a real scheduling loop and started by a real Celery worker. The
local backend holds each job to its CPU request (cgroup weight) and limit (CFS quota), as the
kubelet holds a pod (:mod:`crossdock.backends.local.cpulimit`). Three setups, one after the
other on the same machine:

- ``alone``: the server by itself, the reference (the story's 20 ms).
- ``baseline``: one mixed pool over the whole machine, one priority, no preemption, requests at
  50 % of use (``cpu_request_ratio: 0.5``): three training jobs of 1 CPU fit beside the server's
  1 CPU on 2 CPUs' worth of requests, and use 4 CPUs' worth.
- ``crossdock``: the policy table's levers on this machine: two pools of one CPU each (a local
  node's ``cpuset``), inference on its own with training allowed to backfill it, inference high
  priority and never preempted, training low and preemptible, requests at 0.8 of use. The
  training job that backfilled the inference node is preempted (a live preemption through the
  local backend) and requeued; the server starts in its place.

Each row: the server's p50/p99 over the load, failures, the training CPU used meanwhile (from
``/proc``: what the training jobs got), the training jobs running and the preemptions.
``python bench/casestudy.py --live`` prints the table; ``tests/integration/local/test_casestudy_live.py``
runs a short version and checks its invariants.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import yaml

from crossdock.dev.proc import free_port

BURN = "while True:\n    pass"
CLASSES = {"inference": {"value": 1000, "preemptible": False},
           "training": {"value": 100, "preemptible": True, "grace_seconds": 1},
           "default": {"value": 500, "preemptible": False}}
SCHEDULER = {"interval_seconds": 0.2, "kill_wait_seconds": 1, "lease_seconds": 2}


def setup_config(name: str) -> dict[str, Any]:
    """The config of one setup (see the module's docstring)."""
    if name in ("alone", "baseline"):
        queue = {"priority_class": "default", "pools": ["mixed"], "placement": "spread", "cpu_request_ratio": 0.5}
        return {"priority_classes": CLASSES, "scheduler": SCHEDULER, "default_queue": "training",
                "pools": {"mixed": {"backend": "local", "nodes": [{"name": "node-a", "cpus": 2, "memory_mib": 4096}]}},
                "queues": {"training": queue, "inference": queue}}
    if name == "crossdock":
        return {"priority_classes": CLASSES, "scheduler": SCHEDULER, "default_queue": "training",
                "pools": {"infer": {"backend": "local", "nodes": [{"name": "node-i", "cpus": 1, "memory_mib": 2048,
                                                                   "cpuset": "0"}]},
                          "train": {"backend": "local", "nodes": [{"name": "node-t", "cpus": 1, "memory_mib": 2048,
                                                                   "cpuset": "1"}]}},
                "queues": {"inference": {"priority_class": "inference", "pools": ["infer"], "placement": "spread",
                                         "cpu_request_ratio": 0.8},
                           "training": {"priority_class": "training", "pools": ["train", "infer"],
                                        "placement": "binpack", "cpu_request_ratio": 0.8}}}
    raise ValueError(f"setup {name!r}: not one of alone, baseline, crossdock")


SETUPS = ("alone", "baseline", "crossdock")
FITTING_TRAINING = {"baseline": 3, "crossdock": 2}
"""Training jobs of 1 CPU running before the server arrives: 3 × 0.5 of the mixed node's 2 CPUs;
one per 1-CPU node at 0.8 (one of them then preempted by the server)."""


@dataclass
class LiveRow:
    setup: str
    requests: int
    failed: int
    p50_ms: float
    p99_ms: float
    training_running: int
    training_cpu_cores: float
    """CPU the training jobs used during the load, in cores (CPU-seconds per second)."""
    preemptions: int


def _cpu_seconds(pids: list[int]) -> float:
    """CPU time (user + system) of these processes, from ``/proc``."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / tick
    return total


def _wait(cond, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = cond()
        if value:
            return value
        time.sleep(0.05)
    raise RuntimeError(f"case study (live): {what} not reached within {timeout:.0f} s")


def _healthy(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1) as r:
            return r.status == 200
    except OSError:
        return False


def run_setup(name: str, redis_url: str, tmp: Path, *, seconds: float, qps: float, cpu_ms: float,
              training_jobs: int = 3) -> LiveRow:
    """One setup from an empty queue to its row; every job cancelled and ended before it returns."""
    from crossdock import service
    from crossdock.queue.models import JobSpec
    from crossdock.queue.states import TERMINAL, JobState
    from crossdock.runtime import Runtime
    from crossdock.workers.app import celery_sender, make_app
    from crossdock.workers.leader import Scheduler
    from crossdock.workers.supervision import start_worker, stop_worker

    work = tmp / name
    work.mkdir(parents=True)
    (work / "crossdock.yaml").write_text(yaml.safe_dump(setup_config(name)))
    os.environ.update({"CROSSDOCK_REDIS_URL": redis_url, "CROSSDOCK_CONFIG": str(work / "crossdock.yaml"),
                       "CROSSDOCK_STATE_DIR": str(work / "state"), "CROSSDOCK_PREFIX": f"cs{uuid.uuid4().hex[:8]}"})
    rt = Runtime.from_env()
    sched = Scheduler(rt, celery_sender(make_app(rt.redis_url)))
    stop = threading.Event()
    loop = threading.Thread(target=sched.run, args=(stop,), daemon=True)
    worker = start_worker(rt, 2, work / "worker.log")
    loop.start()
    port = free_port()
    try:
        training = [] if name == "alone" else service.submit(rt, [
            JobSpec(name=f"train-{i}", command=[sys.executable, "-c", BURN], cpus_per_task=1, queue="training",
                    workdir=str(work)) for i in range(training_jobs)])
        ids = [j.id for j in training]
        if ids:  # every training job that fits is running before inference arrives
            fit = FITTING_TRAINING[name]
            _wait(lambda: sum(j.state is JobState.RUNNING for j in rt.store.get_many(ids)) >= fit, 60,
                  f"{fit} training jobs running")
        server = [sys.executable, "-m", "crossdock.jobtools.demo_server", "--port", str(port), "--service-ms", "0",
                  "--cpu-ms", str(cpu_ms), "--workers", "2", "--concurrency", "8"]
        infer, = service.submit(rt, [JobSpec(name="inference", command=server, cpus_per_task=1, queue="inference",
                                             workdir=str(work))])
        _wait(lambda: rt.store.get(infer.id).state is JobState.RUNNING and _healthy(port), 60, "the server answering")
        _wait(lambda: not any(j.state is JobState.SCHEDULED for j in rt.store.get_many(ids)), 30,
              "the training jobs settled")
        running = [j for j in rt.store.get_many(ids) if j.state is JobState.RUNNING and j.pid]
        pids = [p for j in running for p in _group(j.pid)]
        cpu0, t0 = _cpu_seconds(pids), time.monotonic()
        samples = _load(port, qps, seconds)
        cores = (_cpu_seconds(pids) - cpu0) / (time.monotonic() - t0)
        preemptions = sum(1 for i in ids for e in rt.store.events(i) if e.get("to") == JobState.PREEMPTED.value)
        for job_id in [*ids, infer.id]:
            rt.store.cancel(job_id)
        _wait(lambda: all(j.state in TERMINAL for j in rt.store.get_many([*ids, infer.id])), 60, "every job ended")
    finally:
        stop.set()
        loop.join(10)
        stop_worker(worker)
    lat = sorted(s["latency"] for s in samples if s["status"] == 200)
    return LiveRow(name, len(samples), sum(1 for s in samples if s["status"] != 200),
                   round(1000 * _rank(lat, 0.5), 1), round(1000 * _rank(lat, 0.99), 1), len(running),
                   round(cores, 2), preemptions)


def _group(pgid: int) -> list[int]:
    """Every process of process group ``pgid`` (a job and what it started)."""
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[2]) == pgid:
                out.append(int(entry))
    return out


def _rank(values: list[float], q: float) -> float:
    return values[max(0, math.ceil(q * len(values)) - 1)] if values else math.nan


WARMUP_SECONDS = 1.0
"""Load sent first and not counted: the generator's and the server's first connections (every
setup's slowest requests came in its first 0.2 s)."""


def _load(port: int, qps: float, seconds: float) -> list[dict]:
    """The load generator in its own process: the requests after the warm-up, one dict each."""
    proc = subprocess.run([sys.executable, "-m", "crossdock.jobtools.loadgen", f"http://127.0.0.1:{port}/infer",
                           f"{qps:g}:{WARMUP_SECONDS:g},{qps:g}:{seconds:g}", "--timeout", "5"], capture_output=True,
                          text=True, timeout=seconds + 60, check=True)
    rows = (json.loads(line) for line in proc.stdout.splitlines() if line.strip())
    return [r for r in rows if r["step"] == 1]


def run(setups=SETUPS, *, seconds: float = 30.0, qps: float = 40.0, cpu_ms: float = 10.0) -> dict[str, Any]:
    """Every setup in turn on one embedded Redis; ``{"setups": {NAME: row}, "load": …}``."""
    from crossdock.backends.redis_store import embedded

    tmp = Path(tempfile.mkdtemp(prefix="crossdock-casestudy-live-"))
    url = embedded.ensure_running(tmp / "redis")
    saved = dict(os.environ)
    try:
        rows = {name: asdict(run_setup(name, url, tmp, seconds=seconds, qps=qps, cpu_ms=cpu_ms)) for name in setups}
    finally:
        os.environ.clear()
        os.environ.update(saved)
        embedded.stop(tmp / "redis")
    return {"load": {"qps": qps, "seconds": seconds, "cpu_ms_per_request": cpu_ms, "cpus": len(os.sched_getaffinity(0))},
            "setups": rows}


def render(data: dict[str, Any]) -> str:
    head = ("| setup | requests | failed | p50 ms | p99 ms | training jobs running | training CPU (cores) |"
            " preemptions |\n|---|---|---|---|---|---|---|---|")
    rows = [f"| {r['setup']} | {r['requests']} | {r['failed']} | {r['p50_ms']} | {r['p99_ms']} |"
            f" {r['training_running']} | {r['training_cpu_cores']} | {r['preemptions']} |"
            for r in data["setups"].values()]
    return "\n".join([head, *rows])
