"""Dump every decision ``run_cycle`` makes on a fixed set of seeded scenarios, to compare two versions.

A speed-up of the scheduler must not change a single decision. This script runs ``run_cycle`` on
seeded random clusters (pools, NVLink islands, MIG, GPU sharing, taints, labels, running jobs of
mixed priorities, terminating jobs, nominations, quotas, gangs with topology, anti-affinity
arrays, node lists, exclusive jobs, every placement strategy) and on the benchmark's Alibaba
scenarios, and writes the admitted placements, preemptions, reservations, nominations, pending
reasons and explanations as JSON, one entry per scenario.

Run: ``python bench/scheduler_decisions.py dump out.json [--seeds 40] [--scale 1.0]``, then
``python bench/scheduler_decisions.py compare before.json after.json`` (exit status 1 on any
difference, with the first differences printed).

Decisions do not depend on the process: two dumps of one version under different
``PYTHONHASHSEED`` values are identical (``tests/unit/scheduler/test_scheduler_determinism.py``).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from crossdock.gcpause import collection_paused  # noqa: E402
from crossdock.queue.config import parse_config  # noqa: E402
from crossdock.queue.cycle import run_cycle  # noqa: E402
from crossdock.queue.models import GpuRequest, Job, JobSpec  # noqa: E402
from crossdock.queue.snapshot import Allocation, GpuDevice, Node, Snapshot  # noqa: E402

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import bench_scheduler as bench  # noqa: E402

NOW = bench.NOW
CLASSES = {"train": ("low", 100, True), "serve": ("high", 1000, False), "batch": ("mid", 500, False),
           "meek": ("never", 900, False), "spot": ("low", 100, True), "pack": ("mid", 500, False)}
MODELS = ["A100", "L4", "H100"]
MIG = ["1g.10gb", "3g.40gb"]


def config(rng: random.Random) -> Any:
    placements = ["binpack", "spread", "most-requested", "balanced"]
    queues = {
        "train": {"priority_class": "low", "pools": ["gpu", "share", "cpu", "mig"], "placement": rng.choice(placements),
                  "quota": {"gpu": rng.choice([None, 40.0]), "cohort": "c1", "borrowing": True},
                  "default_time_minutes": rng.choice([None, 90])},
        "serve": {"priority_class": "high", "pools": ["gpu", "share", "cpu", "mig"],
                  "placement": rng.choice(placements),
                  "plugin_weights": rng.choice([{}, {"cpu": 3, "nvidia.com/gpu": 5}, {"GpuFragmentation": 2}])},
        "batch": {"priority_class": "mid", "pools": ["gpu", "share", "cpu", "mig"], "placement": rng.choice(placements),
                  "per_job": {"gpu": 8, "nodes": 4}, "cpu_request_ratio": rng.choice([1.0, 0.5]),
                  "quota": {"cpu": rng.choice([None, 200.0]), "max_running_per_user": rng.choice([None, 5]),
                            "cohort": "c1"}},
        "meek": {"priority_class": "never", "pools": ["gpu", "cpu"], "placement": rng.choice(placements)},
        "spot": {"priority_class": "low", "pools": ["share", "gpu"], "placement": "binpack", "weight": 2.0,
                 "plugin_weights": rng.choice([{}, {"CrossdockGpu": 1}, {"LeastAllocated": 1}])},
        "pack": {"priority_class": "mid", "pools": ["gpu", "share"], "placement": "most-requested",
                 "plugin_weights": rng.choice([{}, {"BalancedAllocation": 2}])},
    }
    return parse_config({
        "priority_classes": {"high": {"value": 1000}, "mid": {"value": 500},
                             "low": {"value": 100, "preemptible": True, "grace_seconds": 45},
                             "never": {"value": 900, "preemption_policy": "Never"}},
        "pools": {"gpu": {"backend": "k8s"}, "share": {"backend": "k8s", "gpu": {"sharing": True}},
                  "cpu": {"backend": "slurm", "partition": "cpu"},
                  "mig": {"backend": "k8s", "gpu": {"mig": True},
                          "tolerations": [{"key": "mig", "operator": "Exists", "effect": "NoSchedule"}]}},
        "queues": queues,
        "scheduler": {"default_mem_per_cpu_mib": rng.choice([0, 100]),
                      "max_preemptions_per_cycle": rng.choice([3, 20, 100000])},
    })


def nodes_of(rng: random.Random, count: int) -> list[Node]:
    out = []
    for k in range(count):
        pool = rng.choices(["gpu", "share", "cpu", "mig"], [5, 3, 2, 1])[0]
        name = f"n{k:04d}"
        model = rng.choice(MODELS)
        ngpu = 0 if pool == "cpu" else rng.choice([1, 2, 4, 8, 8])
        islands = 2 if ngpu == 8 and rng.random() < 0.7 else (2 if ngpu == 4 and rng.random() < 0.3 else 0)
        per = ngpu // islands if islands else 0
        mig = tuple(rng.sample(MIG, rng.randint(1, 2))) * rng.randint(1, 3) if pool == "mig" else ()
        gpus = tuple(GpuDevice(f"{name}-gpu{i}", i, model, island=(i // per if islands else None),
                               mig=mig if (mig and i % 2 == 0) else ()) for i in range(ngpu))
        labels = {"rack": f"r{rng.randint(0, 3)}"}
        if rng.random() < 0.3:
            labels["tier"] = rng.choice(["gold", "silver"])
        taints: tuple[str, ...] = ()
        if pool == "mig":
            taints = ("mig=yes:NoSchedule",)
        elif rng.random() < 0.08:
            taints = (rng.choice(["dedicated=infer:NoSchedule", "maint:PreferNoSchedule", "gpu=bad:NoExecute"]),)
        out.append(Node(name, pool, "slurm" if pool == "cpu" else "k8s", rng.choice([8, 16, 32, 64, 96]) * 1000,
                        rng.choice([32000, 64000, 128000, 512000]), gpus, labels, taints,
                        gpu_sharing=pool == "share", schedulable=rng.random() > 0.03))
    return out


def running_of(rng: random.Random, nodes: list[Node], count: int) -> list[Allocation]:
    free = {x.name: [x.cpu_milli, x.memory_mib, [g.id for g in x.gpus if not g.mig],
                     [f"{g.id}/mig-{p}-{k}" for g in x.gpus for k, p in enumerate(g.mig)]] for x in nodes}
    out: list[Allocation] = []
    jid = 10_000
    for _ in range(count):
        queue = rng.choice(["train", "train", "batch", "serve", "spot"])
        _, prio, preemptible = CLASSES[queue]
        gang = rng.random() < 0.08
        hosts = rng.sample(nodes, rng.randint(2, 3)) if gang else [rng.choice(nodes)]
        cpu = rng.randint(1, 8) * 1000
        mem = rng.choice([0, 1000, 8000, 30000])
        ngpu = rng.choice([0, 0, 1, 1, 2, 4])
        share = rng.random() < 0.3
        nmig = rng.choice([0, 1, 2])
        start = NOW - timedelta(minutes=rng.randint(1, 300))
        limit = rng.choice([None, 60, 240, 600])
        term = rng.random() < 0.04
        group = rng.choice([None, None, 77, 78])
        made = []
        for x in hosts:
            f = free[x.name]
            if f[0] < cpu or f[1] < mem:
                continue
            gids: tuple[str, ...] = ()
            shares: dict[str, float] = {}
            if x.pool == "share" and share and f[2]:
                shares = {rng.choice(f[2]): rng.choice([0.25, 0.5])}
            elif x.pool == "mig" and nmig and len(f[3]) >= nmig:
                gids, f[3] = tuple(f[3][:nmig]), f[3][nmig:]
            elif ngpu and len(f[2]) >= ngpu:
                gids, f[2] = tuple(f[2][:ngpu]), f[2][ngpu:]
            f[0] -= cpu
            f[1] -= mem
            made.append(Allocation(jid, x.name, cpu, mem, gids, shares, priority=prio, preemptible=preemptible,
                                   queue=queue, user=f"u{rng.randint(0, 3)}", start_time=start,
                                   time_limit_seconds=limit * 60 if limit else None, grace_seconds=rng.choice([0, 30, 60]),
                                   group=group, terminating=term))
        if not made:
            continue
        # share amounts on one device must not exceed it: keep at most two shares (0.5 each) per device
        out.extend(made)
        jid += 1
    seen: dict[str, float] = {}
    valid = []
    for a in out:
        ok = True
        for g, s in a.gpu_share.items():
            if seen.get(g, 0.0) + s > 1.0:
                ok = False
        if ok:
            for g, s in a.gpu_share.items():
                seen[g] = seen.get(g, 0.0) + s
            valid.append(a)
    return valid


def pending_of(rng: random.Random, count: int, first: int) -> list[Job]:
    jobs = []
    for k in range(count):
        jid = first + k
        queue = rng.choices(list(CLASSES), [5, 3, 3, 1, 2, 2])[0]
        pc, prio, preemptible = CLASSES[queue]
        spec: dict[str, Any] = {"command": ["true"], "cpus_per_task": rng.choice([1, 1, 2, 4, 8, 16]),
                                "user": f"u{rng.randint(0, 3)}"}
        if rng.random() < 0.7:
            spec["mem_per_node_mib"] = rng.choice([0, 1000, 4000, 16000, 60000])
        kind = rng.random()
        if kind < 0.3:
            spec["gpus"] = GpuRequest(count=rng.choice([1, 1, 2, 4, 8]),
                                      type=rng.choice([None, None, rng.choice(MODELS)]))
        elif kind < 0.45:
            spec["gpus"] = GpuRequest(count=1, share=rng.choice([0.1, 0.25, 0.5, 0.75]),
                                      models=rng.choice([[], [], ["A100", "L4"]]))
        elif kind < 0.5:
            spec["gpus"] = GpuRequest(count=rng.choice([1, 2]), mig=rng.choice(MIG))
            spec["tolerations"] = [{"key": "mig", "operator": "Exists"}]
        if rng.random() < 0.08:
            n = rng.choice([2, 3, 4])
            spec["nodes"], spec["ntasks"] = n, n
            if rng.random() < 0.5:
                spec["topology"] = "rack"
        if rng.random() < 0.6:
            spec["time_limit_seconds"] = 60 * rng.choice([5, 30, 60, 600])
        if rng.random() < 0.05:
            spec["exclusive"] = True
        if rng.random() < 0.05:
            spec["nodelist"] = [f"n{rng.randint(0, 40):04d}" for _ in range(rng.randint(1, 4))]
        if rng.random() < 0.05:
            spec["exclude"] = [f"n{rng.randint(0, 40):04d}" for _ in range(rng.randint(1, 4))]
        if rng.random() < 0.08:
            spec["node_selector"] = {"tier": rng.choice(["gold", "silver"])}
        if rng.random() < 0.08:
            spec["tolerations"] = spec.get("tolerations", []) + [{"key": "dedicated", "operator": "Equal",
                                                                   "value": "infer", "effect": "NoSchedule"}]
        if rng.random() < 0.03:
            spec["hold"] = True
        if rng.random() < 0.1:
            spec["nice"] = rng.choice([-5, 10])
        if rng.random() < 0.05:
            spec["placement"] = rng.choice(["spread", "binpack", "balanced"])
        extra: dict[str, Any] = {}
        if rng.random() < 0.1:
            spec["anti_affinity"] = True
            extra = {"array_job_id": 500 + rng.randint(0, 2), "array_task_id": k}
        jobs.append(Job(id=jid, spec=JobSpec(**spec), queue=queue, priority_class=pc, priority=prio,
                        preemptible=preemptible, submit_time=NOW - timedelta(seconds=rng.randint(0, 5000)), **extra))
    return jobs


def random_scenario(seed: int, scale: float) -> tuple[Snapshot, list[Job], Any]:
    rng = random.Random(seed)
    nodes = nodes_of(rng, max(3, int(rng.choice([6, 20, 60, 150]) * scale)))
    running = running_of(rng, nodes, int(len(nodes) * rng.choice([0, 1, 3, 6])))
    pending = pending_of(rng, int(rng.choice([20, 80, 250]) * scale) + 1, 1)
    noms = {}
    for j in rng.sample(pending, min(3, len(pending))):
        noms[j.id] = rng.choice(nodes).name
    usage = {"train": rng.random() * 100, "batch": rng.random() * 100, "train/u1": rng.random() * 50}
    return Snapshot(nodes=tuple(nodes), allocations=tuple(running), nominations=noms, usage=usage), pending, config(rng)


def preemption_scenario(seed: int) -> tuple[Snapshot, list[Job], Any]:
    """A full cluster of small low-priority jobs (some gangs, some borrowing) and a stream of
    higher-priority jobs of a few shapes: many preemptions per cycle, victim sets of several jobs,
    the combination budget and the per-cycle cap reached."""
    rng = random.Random(10_000 + seed)
    nodes = []
    for k in range(rng.choice([8, 30, 80])):
        ngpu = rng.choice([4, 8, 8])
        islands = 2 if rng.random() < 0.5 else 0
        per = ngpu // islands if islands else 0
        name = f"n{k:04d}"
        nodes.append(Node(name, rng.choice(["gpu", "gpu", "share"]), "k8s", rng.choice([16, 32, 64]) * 1000, 256000,
                          tuple(GpuDevice(f"{name}-gpu{i}", i, "A100", island=(i // per if islands else None))
                                for i in range(ngpu)), {"rack": f"r{k % 3}"}, gpu_sharing=rng.random() < 0.3))
    allocs: list[Allocation] = []
    jid = 20_000
    for x in nodes:
        cpu, gids = x.cpu_milli, [g.id for g in x.gpus]
        while cpu >= 1000 and rng.random() < 0.93:
            c = min(cpu, rng.choice([1, 1, 2, 4]) * 1000)
            ng = min(len(gids), rng.choice([0, 1, 1, 2]))
            queue = rng.choice(["train", "train", "spot", "batch"])
            _, prio, preemptible = CLASSES[queue]
            share = {}
            if x.gpu_sharing and ng == 0 and gids and rng.random() < 0.3:
                share = {gids[0]: 0.25}
            allocs.append(Allocation(jid, x.name, c, rng.choice([0, 1000]), tuple(gids[:ng]), share, priority=prio,
                                     preemptible=preemptible or rng.random() < 0.2, queue=queue,
                                     start_time=NOW - timedelta(minutes=rng.randint(1, 500)),
                                     time_limit_seconds=rng.choice([None, 36000]), grace_seconds=30,
                                     terminating=rng.random() < 0.02))
            if rng.random() < 0.05:  # the same job on another node too: a gang victim
                y = rng.choice(nodes)
                allocs.append(Allocation(jid, y.name, 1000, 0, (), priority=prio, preemptible=True, queue=queue,
                                         start_time=NOW - timedelta(minutes=5), grace_seconds=30))
            cpu, gids, jid = cpu - c, gids[ng:], jid + 1
    pending = []
    shapes = [(8, 0, 4, 1), (4, 0, 8, 1), (2, 0, 2, 1), (0, 0, 24, 1), (1, 0, 1, 1), (0, 0.5, 2, 1), (4, 0, 4, 2)]
    for k in range(rng.choice([20, 60, 150])):
        gpus, share, cpus, n = rng.choice(shapes)
        queue = rng.choice(["serve", "serve", "batch", "meek"])
        pc, prio, _ = CLASSES[queue]
        spec: dict[str, Any] = {"command": ["true"], "cpus_per_task": cpus, "mem_per_node_mib": 1000,
                                "time_limit_seconds": 3600}
        if gpus:
            spec["gpus"] = GpuRequest(count=gpus)
        elif share:
            spec["gpus"] = GpuRequest(count=1, share=share)
        if n > 1:
            spec["nodes"], spec["ntasks"] = n, n
        pending.append(Job(id=1 + k, spec=JobSpec(**spec), queue=queue, priority_class=pc, priority=prio,
                           submit_time=NOW - timedelta(seconds=k)))
    return Snapshot(nodes=tuple(nodes), allocations=tuple(allocs)), pending, config(rng)


def alibaba(nodes: int, jobs: int, running: int, stream: int) -> list[tuple[str, Snapshot, list[Job]]]:
    ns = bench.load_nodes(bench.DEFAULT_NODES, nodes)
    pods = bench.load_pods(bench.DEFAULT_PODS)
    pending = [bench.job_of(i + 1, pods[i % len(pods)]) for i in range(jobs)]
    out = [(f"alibaba-place-{nodes}-{jobs}", Snapshot(nodes=tuple(ns)), pending)]
    if running:
        allocs = bench.pack_running(ns, pods, running)
        high = [Job(id=5_000_000 + k, spec=JobSpec(command=["true"], cpus_per_task=4, mem_per_node_mib=16384,
                                                   gpus=GpuRequest(count=[8, 4, 8, 2, 1][k % 5]),
                                                   time_limit_seconds=3600),
                    queue="serve", priority_class="high", priority=1000, submit_time=NOW - timedelta(seconds=k))
                for k in range(stream)]
        out.append((f"alibaba-preempt-{nodes}-{running}-{stream}", Snapshot(nodes=tuple(ns), allocations=tuple(allocs)),
                    high))
        mixed = high[:stream // 2] + [bench.job_of(7_000_000 + i, pods[(i * 7) % len(pods)]) for i in range(jobs // 4)]
        out.append((f"alibaba-mixed-{nodes}-{running}", Snapshot(nodes=tuple(ns), allocations=tuple(allocs)), mixed))
    return out


def decisions(result: Any) -> dict[str, Any]:
    return {
        "admitted": [[p.job_id, p.pool, p.backend, list(p.nodes), list(p.gpu_ids), p.cpu_milli, p.memory_mib,
                      [list(g) for g in p.gpus_per_node], p.gpu_share] for p in result.admitted],
        "preemptions": [[p.victim_id, p.preemptor_id, p.grace_seconds, p.requeue] for p in result.preemptions],
        "cancelled": sorted(result.cancelled.items()),
        "pending": sorted(result.pending.items()),
        "explanations": sorted(result.explanations.items()),
        "reservations": [[r.job_id, r.start.isoformat(), list(r.nodes)] for r in result.reservations],
        "nominations": sorted(result.nominations.items()),
    }


def cycle(snap: Snapshot, pending: list[Job], cfg: Any) -> Any:
    """run_cycle as the scheduler loop runs it (the collector paused; decisions do not depend on it)."""
    with collection_paused():
        return run_cycle(snap, pending, cfg, NOW)


def dump(path: str, seeds: int, scale: float, big: bool) -> None:
    out: dict[str, Any] = {}
    t0 = time.process_time()
    for seed in range(seeds):
        snap, pending, cfg = random_scenario(seed, scale)
        out[f"random-{seed}"] = decisions(cycle(snap, pending, cfg))
    for seed in range(seeds // 3):
        snap, pending, cfg = preemption_scenario(seed)
        out[f"preempt-{seed}"] = decisions(cycle(snap, pending, cfg))
    sizes = [(1213, 3000, 4000, 60)] + ([(5000, 10000, 20000, 200)] if big else [])
    for size in sizes:
        for name, snap, pending in alibaba(*size):
            out[name] = decisions(cycle(snap, pending, bench.CONFIG))
    Path(path).write_text(json.dumps(out, sort_keys=True))
    digest = hashlib.sha256(Path(path).read_bytes()).hexdigest()[:16]
    admitted = sum(len(v["admitted"]) for v in out.values())
    victims = sum(len(v["preemptions"]) for v in out.values())
    print(f"{len(out)} scenarios, {admitted} admitted, {victims} victims, sha256 {digest},"
          f" {time.process_time() - t0:.1f} s CPU -> {path}")


def compare(a: str, b: str) -> int:
    left, right = json.loads(Path(a).read_text()), json.loads(Path(b).read_text())
    bad = 0
    for name in sorted(set(left) | set(right)):
        x, y = left.get(name), right.get(name)
        if x == y:
            continue
        bad += 1
        print(f"DIFF {name}")
        for field in sorted(set(x or {}) | set(y or {})):
            fx, fy = (x or {}).get(field), (y or {}).get(field)
            if fx != fy:
                items_x = fx if isinstance(fx, list) else [fx]
                items_y = fy if isinstance(fy, list) else [fy]
                shown = 0
                for ix, iy in zip(items_x, items_y):
                    if ix != iy and shown < 3:
                        print(f"  {field}: {ix!r}\n  {' ' * len(field)}  {iy!r}")
                        shown += 1
                if len(items_x) != len(items_y):
                    print(f"  {field}: {len(items_x)} vs {len(items_y)} entries")
    print(f"{len(set(left) | set(right))} scenarios, {bad} differ")
    return 1 if bad else 0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("dump")
    d.add_argument("out")
    d.add_argument("--seeds", type=int, default=40)
    d.add_argument("--scale", type=float, default=1.0)
    d.add_argument("--big", action="store_true", help="also the full 5,000-node benchmark scenarios")
    c = sub.add_parser("compare")
    c.add_argument("a")
    c.add_argument("b")
    args = ap.parse_args()
    if args.cmd == "dump":
        dump(args.out, args.seeds, args.scale, args.big)
    else:
        sys.exit(compare(args.a, args.b))


if __name__ == "__main__":
    main()
