"""Static packing speed: one FGD-paper run per policy on the openb trace, wall time per run.

    python bench/bench_simulator.py [--nodes FILE] [--pods FILE] [--seeds 42] [--tune 1.3] [--json]
                                    [--policies random,dotprod,packing,bestfit,fgd,crossdock]

Cluster: ``openb_node_list_gpu_node.csv`` (1,213 nodes, 6,212 GPUs); workload: the pod list
(default ``openb_pod_list_default.csv``; both shipped in ``crossdock/sim/data``) tuned to 130 % of the cluster's GPUs (~10,900 pods).
Each run loads nothing (the CSVs are read once before the clock starts), samples, places every
pod and records allocation and fragmentation after each one. Prints, per policy, the median wall
time over the seeds, pods placed per second, and the allocation at 100 % arrived.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from crossdock.sim.static import parse_seeds, run_static  # noqa: E402
from crossdock.sim.trace import DEFAULT_NODES, DEFAULT_PODS, load_nodes, load_pods  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=Path, default=DEFAULT_NODES)
    ap.add_argument("--pods", type=Path, default=DEFAULT_PODS)
    ap.add_argument("--policies", default="random,dotprod,packing,bestfit,fgd,crossdock")
    ap.add_argument("--seeds", default="42")
    ap.add_argument("--tune", type=float, default=1.3)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    nodes = load_nodes(args.nodes)
    pods = load_pods(args.pods, nodes.models)
    rows = []
    for policy in [p for p in args.policies.split(",") if p]:
        runs = [run_static(nodes, pods, policy, seed, args.tune) for seed in parse_seeds(args.seeds)]
        wall = statistics.median(r.wall_s for r in runs)
        rows.append({"policy": policy, "pods": runs[0].pods, "wall_s": round(wall, 2),
                     "pods_per_s": round(runs[0].pods / wall), "allocated_pct_at_100":
                     statistics.median(r.at(100)["allocated_pct"] for r in runs)})
    if args.json:
        print(json.dumps({"nodes": len(nodes), "gpus": nodes.total_gpu_milli // 1000, "rows": rows}))
    else:
        print(f"{len(nodes)} nodes, {nodes.total_gpu_milli // 1000} GPUs, {args.pods.name}, tune {args.tune}")
        print(f"{'policy':<15}{'pods':>7}{'wall s':>9}{'pods/s':>9}{'alloc@100':>11}")
        for r in rows:
            print(f"{r['policy']:<15}{r['pods']:>7}{r['wall_s']:>9.2f}{r['pods_per_s']:>9}{r['allocated_pct_at_100']:>11.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
