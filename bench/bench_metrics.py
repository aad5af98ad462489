"""The cost of metrics on the scheduling cycle: the leader's whole ``cycle_once`` (read the store,
snapshot, ``run_cycle``, commit, record) with and without instrumentation, in the same run.

"With": the store counts every Redis round trip (``crossdock.observe``'s hook, a timed client)
and the leader records the cycle (placements, waits, phases, reasons, the jobs gauge, ended
attempts). "Without": a plain redis-py client and the leader's recording functions replaced by
no-ops. Each repeat submits the same jobs under a fresh key prefix of one embedded Redis and times
one cycle in each mode, alternating the order, so both see the same machine at the same time.

Scenario (defaults): 200 local nodes of 8 CPUs, 2,000 pending jobs of 1–4 CPUs over 3 queues: a
cycle places ~650 and leaves the rest pending (Resources), so every recording path runs.

Run: ``python bench/bench_metrics.py [--nodes 200] [--jobs 2000] [--repeat 7]``. Prints the median
cycle time of each mode (wall, and the leader thread's CPU time, which other processes on a
shared machine disturb less), the overhead as ratios, and the recording functions' own time.
"""

from __future__ import annotations

import argparse
import contextlib
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from types import SimpleNamespace

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from crossdock.backends.redis_store import embedded  # noqa: E402
from crossdock.backends.redis_store.store import JobStore  # noqa: E402
from crossdock.observe import metrics  # noqa: E402
from crossdock.queue.models import JobSpec  # noqa: E402
from crossdock.runtime import Runtime  # noqa: E402
from crossdock.settings import Settings  # noqa: E402
from crossdock.workers import leader  # noqa: E402

QUEUES = ("training", "inference", "preprocessing")


def config(nodes: int) -> dict:
    return {
        "priority_classes": {"high": {"value": 1000}, "mid": {"value": 500}, "low": {"value": 100, "preemptible": True}},
        "pools": {"local": {"backend": "local", "nodes": [{"name": f"n{i:04d}", "cpus": 8, "memory_mib": 32768}
                                                          for i in range(nodes)]}},
        "queues": {"training": {"priority_class": "low", "pools": ["local"]},
                   "inference": {"priority_class": "high", "pools": ["local"], "placement": "spread"},
                   "preprocessing": {"priority_class": "mid", "pools": ["local"], "placement": "most-requested"}},
        "scheduler": {"interval_seconds": 0.5},
    }


NO_METRICS = SimpleNamespace(**{**{name: (lambda *a, **k: None) for name in dir(metrics) if not name.startswith("_")},
                                "backend_call": lambda *a: contextlib.nullcontext()})
"""The leader's ``metrics`` module with every function a no-op."""


def one_cycle(tmp: Path, url: str, cfg_path: Path, jobs: int, instrumented: bool) -> tuple[float, float, int]:
    """One leader cycle over ``jobs`` fresh pending jobs: (wall seconds, this thread's CPU seconds, placed)."""
    settings = Settings(state_dir=tmp, redis_url=url, config_path=cfg_path, prefix=f"b{uuid.uuid4().hex[:8]}")
    rt = Runtime(settings, url)
    hook = metrics.redis_round_trip if instrumented else None
    rt.__dict__["store"] = JobStore.from_url(url, settings.prefix, actor="bench", on_round_trip=hook)
    specs = [JobSpec(command=["true"], cpus_per_task=1 + i % 4, mem_per_node_mib=256,
                     queue=QUEUES[i % len(QUEUES)], user="bench") for i in range(jobs)]
    rt.store.submit(_admitted(rt, specs))
    leader.metrics = metrics if instrumented else NO_METRICS
    sched = leader.Scheduler(rt, lambda *_: None, holder="bench", fleets={}, busy=lambda: set())
    sched.inventory()  # the backend's inventory is cached across cycles in the service too
    started, cpu = time.perf_counter(), time.thread_time()
    stats = sched.cycle_once()
    return time.perf_counter() - started, time.thread_time() - cpu, stats.admitted


def _admitted(rt: Runtime, specs: list[JobSpec]) -> list:
    from datetime import datetime, timezone

    from crossdock.backends.local.backend import local_nodes
    from crossdock.queue.admission import admit

    nodes = list(local_nodes(rt.config, []))
    now = datetime.now(timezone.utc)
    return [job for spec in specs for job in admit(spec, rt.config, nodes, now)]


def recording_cost(jobs: int, repeat: int = 20) -> float:
    """The recording functions alone over one cycle's data (seconds, median)."""
    from datetime import datetime, timezone

    from crossdock.queue.cycle import CycleResult, Placement
    from crossdock.queue.states import JobState

    now = datetime.now(timezone.utc)
    fake = [SimpleNamespace(id=i, queue=QUEUES[i % 3], state=JobState.PENDING, backend=None, pool=None,
                            submit_time=now, eligible_time=None) for i in range(jobs)]
    by_id = {j.id: j for j in fake}
    result = CycleResult(admitted=[Placement(i, "local", "local", ("n0",)) for i in range(0, jobs, 3)],
                         pending={i: "Resources" for i in range(jobs) if i % 3},
                         timings={"eligibility": 0.001, "schedule": 0.01})
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        metrics.record_cycle(result, by_id, now, 0.1, {"read_store": 0.01, "build_snapshot": 0.01, "commit": 0.01})
        metrics.record_jobs(fake, [])
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=200)
    ap.add_argument("--jobs", type=int, default=2000)
    ap.add_argument("--repeat", type=int, default=7)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="crossdock-bench-metrics-"))
    url = embedded.ensure_running(tmp)
    cfg_path = tmp / "crossdock.yaml"
    cfg_path.write_text(yaml.safe_dump(config(args.nodes)))
    on, off, cpu_on, cpu_off, placed = [], [], [], [], set()
    try:
        one_cycle(tmp, url, cfg_path, args.jobs, True)  # warm-up: imports, caches, Lua scripts loaded
        for rep in range(args.repeat):
            for instrumented in ((True, False) if rep % 2 else (False, True)):
                seconds, cpu, admitted = one_cycle(tmp, url, cfg_path, args.jobs, instrumented)
                (on if instrumented else off).append(seconds)
                (cpu_on if instrumented else cpu_off).append(cpu)
                placed.add(admitted)
    finally:
        leader.metrics = metrics
        embedded.stop(tmp, timeout=5)
        shutil.rmtree(tmp, ignore_errors=True)
    m_on, m_off = statistics.median(on), statistics.median(off)
    print(f"cycle_once, {args.nodes} nodes, {args.jobs} pending, placed {sorted(placed)} per cycle, {args.repeat} repeats")
    print(f"  without metrics: median {m_off * 1000:8.1f} ms  (min {min(off) * 1000:.1f})")
    print(f"  with metrics:    median {m_on * 1000:8.1f} ms  (min {min(on) * 1000:.1f})")
    print(f"  ratio with/without: {m_on / m_off:.3f} (median), {min(on) / min(off):.3f} (min)")
    c_on, c_off = statistics.median(cpu_on), statistics.median(cpu_off)
    print(f"  CPU of the leader thread: {c_off * 1000:.1f} ms without, {c_on * 1000:.1f} ms with, ratio"
          f" {c_on / c_off:.3f} (median), {min(cpu_on) / min(cpu_off):.3f} (min)")
    print(f"  recording functions alone over {args.jobs} jobs: {recording_cost(args.jobs) * 1000:.2f} ms")


if __name__ == "__main__":
    main()
