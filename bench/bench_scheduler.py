"""One scheduling cycle at 5,000 nodes, against a naive reference run in the same process.

Cluster: the Alibaba GPU node mix (``openb_node_list_gpu_node.csv``, 1,213 nodes) repeated to
5,000 nodes; 8-GPU nodes get two NVLink islands of four; one GPU-sharing pool. Pending jobs:
the Alibaba pod mix (``openb_pod_list_default.csv``, or ``--pods``), cycled to 10,000 (CPU
rounded up to whole CPUs, as JobSpec counts CPUs; GPU shares, whole GPUs and GPU model sets
kept).

Scenarios:
1. ``place``: an empty cluster, 10,000 pending jobs, one ``run_cycle``.
2. ``preempt``: 20,000 running low-priority preemptible jobs from the same mix packed onto the
   nodes, then a stream of high-priority jobs (whole GPUs) that can only run by preempting.

Figures: placements (decisions) per second, p50/p99 time per placement, peak Python memory
(tracemalloc, in a separate pass), and the naive reference — a plain Python loop over every
node per job (fit check and MostAllocated score) — on a prefix of the same jobs, with the ratio.

Both CSVs are the ones shipped in ``crossdock/sim/data`` unless ``--node-list``/``--pods`` name others.

Run: ``python bench/bench_scheduler.py`` (``--nodes 5000 --jobs 10000 --running 20000 --stream 200``;
``--repeat 3`` reports the least-CPU of three runs of each cycle, for a machine shared with others;
``--profile fgd`` scores GPUs with FGD alone instead of the default crossdock score).
"""

from __future__ import annotations

import argparse
import csv
import math
import statistics
import sys
import time
import tracemalloc
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Callable

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from crossdock.queue.config import parse_config  # noqa: E402
from crossdock.gcpause import collection_paused  # noqa: E402
from crossdock.queue.cycle import run_cycle  # noqa: E402
from crossdock.queue.models import GpuRequest, Job, JobSpec  # noqa: E402
from crossdock.queue.scheduler import pipeline  # noqa: E402
from crossdock.queue.snapshot import Allocation, GpuDevice, Node, Snapshot  # noqa: E402
from crossdock.sim.trace import DEFAULT_NODES, DEFAULT_PODS  # noqa: E402  (the trace shipped with the package)

NOW = datetime(2026, 1, 1, tzinfo=timezone.utc)
CLOCK = time.thread_time
"""Per-job times are this thread's CPU time, so other processes on a shared machine do not inflate them."""
PROFILES = {"binpack": {}, "fgd": {"CrossdockGpu": 0, "GpuFragmentation": 1}}
"""``--profile``: the default ``binpack`` (the crossdock GPU score, RequestedToCapacityRatio for
its ties) or ``fgd`` (RequestedToCapacityRatio + the FGD score alone, the cheaper score)."""


def make_config(weights: dict[str, int]):
    return parse_config({
        "priority_classes": {"high": {"value": 1000}, "low": {"value": 100, "preemptible": True, "grace_seconds": 30}},
        "pools": {"openb": {"backend": "k8s", "gpu": {"sharing": True}}},
        "queues": {"batch": {"priority_class": "low", "pools": ["openb"], "placement": "binpack",
                             "plugin_weights": weights},
                   "serve": {"priority_class": "high", "pools": ["openb"], "placement": "binpack",
                             "plugin_weights": weights}},
        "scheduler": {"default_mem_per_cpu_mib": 0, "max_preemptions_per_cycle": 100000},
    })


CONFIG = make_config(PROFILES["binpack"])


# --- inputs ---------------------------------------------------------------------------------------

def load_nodes(path: Path, count: int) -> list[Node]:
    rows = list(csv.DictReader(path.open()))
    nodes = []
    for k in range(count):
        r = rows[k % len(rows)]
        name = f"{r['sn']}-{k // len(rows)}"
        ngpu = int(r["gpu"])
        islands = 2 if ngpu == 8 else 0
        gpus = tuple(GpuDevice(f"{name}/gpu{i}", i, r["model"], island=(i // 4 if islands else None))
                     for i in range(ngpu))
        nodes.append(Node(name, "openb", "k8s", int(r["cpu_milli"]), int(r["memory_mib"]), gpus, gpu_sharing=True))
    return nodes


def load_pods(path: Path) -> list[dict]:
    return list(csv.DictReader(path.open()))


def job_of(job_id: int, pod: dict, queue: str = "batch", priority: int = 100) -> Job:
    spec: dict = {"command": ["true"], "cpus_per_task": max(1, math.ceil(int(pod["cpu_milli"]) / 1000)),
                  "mem_per_node_mib": int(pod["memory_mib"]), "time_limit_seconds": 3600}
    num, milli = int(pod["num_gpu"]), int(pod["gpu_milli"])
    models = [m for m in (pod.get("gpu_spec") or "").split("|") if m]
    if num:
        share = milli / 1000 if milli < 1000 else None
        spec["gpus"] = GpuRequest(count=1 if share else num, share=share, models=sorted(set(models)))
    return Job(id=job_id, spec=JobSpec(**spec), queue=queue, priority_class="high" if priority > 100 else "low",
               priority=priority, preemptible=priority <= 100, submit_time=NOW - timedelta(seconds=job_id))


def pack_running(nodes: list[Node], pods: list[dict], count: int) -> list[Allocation]:
    """``count`` low-priority jobs packed first-fit onto the nodes (whole GPUs and CPU only)."""
    free = [[n.cpu_milli, n.memory_mib, [g.id for g in n.gpus]] for n in nodes]
    out: list[Allocation] = []
    k = 0
    jid = 1_000_000
    for pod in (p for _ in range(20) for p in pods):
        if len(out) >= count:
            break
        cpu, mem = math.ceil(int(pod["cpu_milli"]) / 1000) * 1000, int(pod["memory_mib"])
        ngpu = int(pod["num_gpu"]) if int(pod["gpu_milli"]) >= 1000 else min(1, int(pod["num_gpu"]))
        for step in range(len(nodes)):
            i = (k + step) % len(nodes)
            f = free[i]
            if f[0] >= cpu and f[1] >= mem and len(f[2]) >= ngpu:
                gids, f[2] = tuple(f[2][:ngpu]), f[2][ngpu:]
                f[0] -= cpu
                f[1] -= mem
                out.append(Allocation(jid, nodes[i].name, cpu, mem, gids, priority=100, preemptible=True,
                                      queue="batch", start_time=NOW - timedelta(minutes=1 + jid % 50),
                                      time_limit_seconds=7200, grace_seconds=30))
                jid += 1
                k = i + 1
                break
    return out


# --- measuring -----------------------------------------------------------------------------------

def best_cycle(snapshot: Snapshot, jobs: list[Job], repeat: int) -> tuple[object, list[float], float]:
    """:func:`timed_cycle` ``repeat`` times; the run with the least CPU (a shared machine adds noise)."""
    runs = [timed_cycle(snapshot, jobs) for _ in range(max(1, repeat))]
    return min(runs, key=lambda r: r[0].timings["cpu"])


def timed_cycle(snapshot: Snapshot, jobs: list[Job]) -> tuple[object, list[float], float]:
    """run_cycle, with the time of every scheduled job recorded (the cycle's own code unchanged)."""
    per_job: list[float] = []
    original = pipeline.Cycle.schedule

    def schedule(self, req):  # type: ignore[no-untyped-def]
        t0 = CLOCK()
        out = original(self, req)
        per_job.append(CLOCK() - t0)
        return out

    pipeline.Cycle.schedule = schedule
    try:
        c0, t0 = time.process_time(), time.perf_counter()
        with collection_paused():  # as the scheduler loop runs it
            result = run_cycle(snapshot, jobs, CONFIG, NOW)
        total, cpu = time.perf_counter() - t0, time.process_time() - c0
    finally:
        pipeline.Cycle.schedule = original
    result.timings["cpu"] = cpu
    return result, per_job, total


def paused_cycle(snapshot: Snapshot, jobs: list[Job]) -> object:
    with collection_paused():
        return run_cycle(snapshot, jobs, CONFIG, NOW)


def peak_memory(fn: Callable[[], object]) -> float:
    tracemalloc.start()
    fn()
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return peak / 2**20


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


# --- the naive reference --------------------------------------------------------------------------

def naive_place(nodes: list[Node], allocations: list[Allocation], jobs: list[Job]) -> tuple[int, list[float]]:
    """A plain Python loop over every node per job: fit check, MostAllocated score, best node wins."""
    cpu = {n.name: 0 for n in nodes}
    mem = {n.name: 0 for n in nodes}
    gfree = {n.name: n.gpus and [1000] * len(n.gpus) or [] for n in nodes}
    col = {n.name: {g.id: c for c, g in enumerate(n.gpus)} for n in nodes}
    for a in allocations:
        cpu[a.node] += a.cpu_milli
        mem[a.node] += a.memory_mib
        for g in a.gpu_ids:
            gfree[a.node][col[a.node][g]] = 0
    placed, times = 0, []
    for j in sorted(jobs, key=lambda j: (-j.priority, j.id)):
        t0 = CLOCK()
        c, m = j.spec.cpus_per_task * 1000, j.spec.mem_per_node_mib or 0
        req = j.spec.gpu_request()
        share = int(req.share * 1000) if req and req.share else 0
        whole = 0 if share or req is None else req.count
        models = set(req.allowed_models()) if req else set()
        best, best_score = None, -1
        for n in nodes:
            if n.cpu_milli - cpu[n.name] < c or n.memory_mib - mem[n.name] < m:
                continue
            if models and (not n.gpus or n.gpus[0].model not in models):
                continue
            free = gfree[n.name]
            if whole and sum(1 for f in free if f == 1000) < whole:
                continue
            if share and not any(f >= share for f in free):
                continue
            score = ((cpu[n.name] + c) * 100 // n.cpu_milli + (mem[n.name] + m) * 100 // max(n.memory_mib, 1)) // 2
            if score > best_score:
                best, best_score = n, score
        if best is not None:
            cpu[best.name] += c
            mem[best.name] += m
            free = gfree[best.name]
            if whole:
                taken = 0
                for k, f in enumerate(free):
                    if f == 1000 and taken < whole:
                        free[k], taken = 0, taken + 1
            if share:
                k = min((k for k, f in enumerate(free) if f >= share), key=lambda k: free[k])
                free[k] -= share
            placed += 1
        times.append(CLOCK() - t0)
    return placed, times


def naive_preempt(nodes: list[Node], allocations: list[Allocation], jobs: list[Job]) -> tuple[int, list[float]]:
    """A plain Python loop over every node per preemptor: fewest lower-priority victims that make room."""
    by_node: dict[str, list[Allocation]] = {}
    for a in allocations:
        by_node.setdefault(a.node, []).append(a)
    taken: set[int] = set()
    found, times = 0, []
    for j in jobs:
        t0 = CLOCK()
        need_gpu = j.spec.gpus_per_node()
        need_cpu = j.spec.cpus_per_task * 1000
        best = None
        for n in nodes:
            allocs = [a for a in by_node.get(n.name, []) if a.job_id not in taken]
            free_gpu = len(n.gpus) - sum(len(a.gpu_ids) for a in allocs)
            free_cpu = n.cpu_milli - sum(a.cpu_milli for a in allocs)
            victims = []
            for a in sorted((a for a in allocs if a.preemptible and a.priority < j.priority),
                            key=lambda a: -len(a.gpu_ids)):
                if free_gpu >= need_gpu and free_cpu >= need_cpu:
                    break
                victims.append(a)
                free_gpu += len(a.gpu_ids)
                free_cpu += a.cpu_milli
            if free_gpu >= need_gpu and free_cpu >= need_cpu and (best is None or len(victims) < len(best[1])):
                best = (n, victims)
        if best is not None:
            taken.update(a.job_id for a in best[1])
            found += 1
        times.append(CLOCK() - t0)
    return found, times


# --- scenarios ------------------------------------------------------------------------------------

def report(title: str, decided: int, per_job: list[float], total: float, cpu: float, peak_mib: float,
           naive_decided: int, naive_times: list[float]) -> None:
    rate = decided / cpu if cpu else float("inf")
    naive_rate = len(naive_times) / sum(naive_times) if naive_times else float("nan")
    print(f"\n== {title}")
    print(f"  cycle: {len(per_job)} jobs tried, {decided} decided; {cpu:.3f} s CPU ({total:.3f} s wall)"
          f" -> {rate:,.0f} decisions per CPU-second ({decided / total:,.0f}/s wall)")
    print(f"  per job tried (CPU time): p50 {pct(per_job, 0.5) * 1e3:.3f} ms, p99 {pct(per_job, 0.99) * 1e3:.3f} ms,"
          f" mean {statistics.fmean(per_job) * 1e3:.3f} ms")
    print(f"  peak Python memory (tracemalloc): {peak_mib:.1f} MiB")
    print(f"  naive reference on {len(naive_times)} jobs (CPU time): {naive_decided} decided,"
          f" p50 {pct(naive_times, 0.5) * 1e3:.3f} ms, p99 {pct(naive_times, 0.99) * 1e3:.3f} ms per job,"
          f" {naive_rate:,.0f} jobs per CPU-second")
    print(f"  ratio (crossdock / naive): {rate / naive_rate if naive_times else float('nan'):.1f}x decisions per CPU-second,"
          f" p50 {pct(naive_times, 0.5) / max(pct(per_job, 0.5), 1e-12):.1f}x faster,"
          f" p99 {pct(naive_times, 0.99) / max(pct(per_job, 0.99), 1e-12):.1f}x faster")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=5000)
    ap.add_argument("--jobs", type=int, default=10000)
    ap.add_argument("--running", type=int, default=20000)
    ap.add_argument("--stream", type=int, default=200)
    ap.add_argument("--naive-jobs", type=int, default=300)
    ap.add_argument("--pods", default=str(DEFAULT_PODS))
    ap.add_argument("--node-list", default=str(DEFAULT_NODES), help="node list CSV, repeated to --nodes nodes")
    ap.add_argument("--repeat", type=int, default=1, help="run each cycle this many times, report the least CPU")
    ap.add_argument("--profile", choices=sorted(PROFILES), default="binpack", help="the queues' GPU scoring")
    args = ap.parse_args()
    global CONFIG
    CONFIG = make_config(PROFILES[args.profile])
    nodes = load_nodes(Path(args.node_list), args.nodes)
    pods = load_pods(Path(args.pods))
    jobs = [job_of(i + 1, pods[i % len(pods)]) for i in range(args.jobs)]
    print(f"{len(nodes)} nodes ({sum(len(n.gpus) for n in nodes)} GPUs), {len(jobs)} pending jobs,"
          f" python {sys.version.split()[0]}")

    snap = Snapshot(nodes=tuple(nodes))
    result, per_job, total = best_cycle(snap, jobs, args.repeat)
    peak = peak_memory(lambda: paused_cycle(snap, jobs))
    reasons: dict[str, int] = {}
    for r in result.pending.values():
        reasons[r] = reasons.get(r, 0) + 1
    placed_times = per_job
    naive_n, naive_t = naive_place(nodes, [], jobs[:args.naive_jobs])
    report("1. place: empty cluster", len(result.admitted), placed_times, total, result.timings["cpu"], peak,
           naive_n, naive_t)
    print(f"  admitted {len(result.admitted)}, pending by reason {reasons}")
    print("  phases: " + ", ".join(f"{k} {v * 1e3:.1f} ms" for k, v in result.timings.items()))

    running = pack_running(nodes, pods, args.running)
    gpu_nodes = [n for n in nodes if len(n.gpus) == 8]
    stream = [Job(id=5_000_000 + k, spec=JobSpec(command=["true"], cpus_per_task=4, mem_per_node_mib=16384,
                                                 gpus=GpuRequest(count=[8, 4, 8, 2][k % 4]), time_limit_seconds=3600),
                  queue="serve", priority_class="high", priority=1000, submit_time=NOW - timedelta(seconds=k))
              for k in range(args.stream)]
    snap2 = Snapshot(nodes=tuple(nodes), allocations=tuple(running))
    free_gpus = sum(len(n.gpus) for n in nodes) - sum(len(a.gpu_ids) for a in running)
    print(f"\n{len(running)} running low-priority jobs, {free_gpus} GPUs idle, {len(gpu_nodes)} 8-GPU nodes;"
          f" {len(stream)} high-priority jobs of 8/4/8/2 GPUs")
    result2, per_job2, total2 = best_cycle(snap2, stream, args.repeat)
    peak2 = peak_memory(lambda: paused_cycle(snap2, stream))
    decided = len(result2.admitted) + sum(1 for r in result2.pending.values() if r == "Preempting")
    naive_n2, naive_t2 = naive_preempt(nodes, running, stream[:min(args.naive_jobs, 50)])
    report("2. preempt: high-priority stream over 20,000 running jobs", decided, per_job2, total2,
           result2.timings["cpu"], peak2, naive_n2, naive_t2)
    print(f"  admitted {len(result2.admitted)}, preempting {decided - len(result2.admitted)},"
          f" victims {len(result2.preemptions)}")
    print("  phases: " + ", ".join(f"{k} {v * 1e3:.1f} ms" for k, v in result2.timings.items()))


if __name__ == "__main__":
    main()
