"""Reaction time to a backlog spike: crossdock's autoscaler loop against a KEDA-like 30 s poll.

    python bench/bench_elastic.py [--spikes 20] [--jobs 5000] [--seed 42] [--json]
    python bench/bench_elastic.py --day [--seed 42] [--json]

``--day``: the elastic day instead (``configs/scenarios/elastic-day.yaml``, 8,152 jobs of the
trace over one day): node-hours and the p95/p99 queue wait of crossdock and the KEDA-like poll on
the same arrivals, as ratios against the poll (about 1.5 min for crossdock, 1 min for the poll on
one core).

An empty autoscaled GPU pool and CPU pool (no node up, ``min_nodes: 0``) on the elastic
simulation's virtual clock (``crossdock.sim.elastic``); at a moment drawn uniformly within one
poll period, ``--jobs`` jobs arrive at once (the openb default pod mix, cycled; the issue's
5,000 tasks). Reaction = simulated time from the spike to the first scale request. crossdock:
``plan()`` on every pass of its loop (``autoscaler.interval_seconds``, 1 s); the KEDA-like setup
polls every 30 s (KEDA's pollingInterval) and its node follower adds nodes at that poll. Each
spike runs both on the same arrivals, so the ratio compares like with like.

Besides the simulated reaction, the wall time of the ``plan()`` pass that first asked for nodes
(the decision for the whole spike), which a real loop adds to its reaction. Figures are printed
as ratios against the baseline of the same run (the 30 s poll = 1.0).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from crossdock.queue.config import parse_config  # noqa: E402
from crossdock.sim.autoscalers import CrossdockPlan, KedaPoll  # noqa: E402
from crossdock.sim.day import DayJob  # noqa: E402
from crossdock.sim.elastic import ElasticSim, elastic_jobs  # noqa: E402
from crossdock.sim.elastic_scenario import load_elastic, run_elastic  # noqa: E402
from crossdock.sim.trace import DEFAULT_PODS, MILLI, load_pods  # noqa: E402

ROUTE = {"gpu": "gpu", "cpu": "cpu"}
CONFIG = {
    "priority_classes": {"batch": {"value": 100}},
    "pools": {
        "gpu": {"backend": "k8s", "gpu": {"model": "G3", "sharing": True}, "provisioner": "kwok", "max_nodes": 800,
                "node_template": {"cpus": 128, "memory_mib": 786432, "gpus": 8, "gpu_model": "G3"}},
        "cpu": {"backend": "k8s", "provisioner": "kwok", "max_nodes": 400,
                "node_template": {"cpus": 64, "memory_mib": 262144}},
    },
    "queues": {
        "gpu": {"priority_class": "batch", "pools": ["gpu"], "placement": "most-requested",
                "elastic": {"metric": "queue_length", "per_replica": 8, "max": 800}},
        "cpu": {"priority_class": "batch", "pools": ["cpu"], "placement": "most-requested",
                "elastic": {"metric": "queue_length", "per_replica": 3, "max": 400}},
    },
    "autoscaler": {"interval_seconds": 1},
}


def spike_jobs(n: int, at: float) -> list[DayJob]:
    pods = load_pods(DEFAULT_PODS)
    out = []
    for k in range(n):
        i = k % len(pods)
        num = int(pods.num_gpu[i])
        out.append(DayJob(at, 3600.0, int(-(-int(pods.cpu[i]) // MILLI)) * MILLI, int(pods.mem[i]), num,
                          int(pods.gpu_milli[i]) if num else 0))
    return out


class TimedFirst(CrossdockPlan):
    """crossdock's loop, also keeping the wall time of the first pass that asked for nodes."""

    first_wall_s: float | None = None

    def tick(self, sim, now):
        before = self.wall_s
        actions = super().tick(sim, now)
        if actions.add and self.first_wall_s is None:
            self.first_wall_s = self.wall_s - before
        return actions


def react(setup: str, jobs: list[DayJob], at: float, config) -> tuple[float, float | None]:
    scaler = TimedFirst(config) if setup == "crossdock" else KedaPoll(config)
    sim = ElasticSim(config, elastic_jobs(config, jobs, ROUTE), scaler, horizon_s=at + 31, provision_s=60.0)
    result = sim.run()
    if result.first_scale_up is None:
        raise RuntimeError(f"{setup}: no scale request within 31 s of the spike")
    return result.first_scale_up - at, getattr(scaler, "first_wall_s", None)


DAY = Path(__file__).resolve().parents[1] / "configs" / "scenarios" / "elastic-day.yaml"
DAY_METRICS = ("node_hours", "wait_p95_s", "wait_p99_s", "wait_max_s")


def day(seed: int, as_json: bool) -> int:
    sc, config = load_elastic(DAY)
    t0 = time.perf_counter()
    results = {k: r.summary() for k, r in run_elastic(sc, config, seed=seed, setups=("keda", "crossdock")).items()}
    base = results["keda"]
    rows = [{"setup": k, **{m: r[m] for m in DAY_METRICS},
             **{f"{m}_ratio": round(r[m] / base[m], 3) if base[m] else None for m in DAY_METRICS}}
            for k, r in results.items()]
    out = {"scenario": DAY.name, "seed": seed, "jobs": base["jobs"],
           "bench_wall_s": round(time.perf_counter() - t0, 1), "rows": rows}
    if as_json:
        print(json.dumps(out))
        return 0
    print(f"{out['scenario']}, {out['jobs']} jobs, seed {seed} (simulated day; baseline: KEDA-like 30 s poll = 1.000)")
    print(f"{'setup':<12}{'node-hours':>12}{'×':>7}{'wait p95 s':>12}{'×':>7}{'wait p99 s':>12}{'×':>7}{'max s':>9}")
    for r in rows:
        print(f"{r['setup']:<12}{r['node_hours']:>12.1f}{r['node_hours_ratio']:>7.3f}{r['wait_p95_s']:>12.1f}"
              f"{r['wait_p95_s_ratio'] or 0:>7.3f}{r['wait_p99_s']:>12.1f}{r['wait_p99_s_ratio'] or 0:>7.3f}"
              f"{r['wait_max_s']:>9.0f}")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--spikes", type=int, default=20)
    ap.add_argument("--jobs", type=int, default=5000)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--day", action="store_true", help="the elastic day instead of spikes")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    if args.day:
        return day(args.seed, args.json)
    config = parse_config(CONFIG)
    rng = np.random.default_rng(args.seed)
    rows: dict[str, list[float]] = {"keda": [], "crossdock": []}
    walls: list[float] = []
    t0 = time.perf_counter()
    for _ in range(args.spikes):
        at = 30.0 + float(rng.uniform(0, 30))  # after the first poll, anywhere in a poll period
        jobs = spike_jobs(args.jobs, at)
        for setup in rows:
            reaction, wall = react(setup, jobs, at, config)
            rows[setup].append(reaction)
            if wall is not None:
                walls.append(wall)
    base = statistics.median(rows["keda"])
    out = {"spikes": args.spikes, "jobs": args.jobs, "seed": args.seed, "bench_wall_s": round(time.perf_counter() - t0, 1),
           "rows": [{"setup": s, "median_s": round(statistics.median(v), 2), "max_s": round(max(v), 2),
                     "ratio_to_poll": round(statistics.median(v) / base, 3)} for s, v in rows.items()],
           "plan_wall_ms_median": round(1000 * statistics.median(walls), 1) if walls else None,
           "plan_wall_ms_max": round(1000 * max(walls), 1) if walls else None}
    if args.json:
        print(json.dumps(out))
        return 0
    print(f"{args.spikes} spikes of {args.jobs} jobs, seed {args.seed} (simulated clock; baseline: KEDA-like 30 s poll)")
    print(f"{'setup':<12}{'median s':>10}{'max s':>9}{'× baseline':>12}")
    for r in out["rows"]:
        print(f"{r['setup']:<12}{r['median_s']:>10.2f}{r['max_s']:>9.2f}{r['ratio_to_poll']:>12.3f}")
    if walls:
        print(f"plan() wall time of the pass that first asked for nodes: median {out['plan_wall_ms_median']} ms,"
              f" max {out['plan_wall_ms_max']} ms ({out['plan_wall_ms_median'] / 1000 / base:.4f} × baseline)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
