"""Shared nodes between a Slurm and a Kubernetes side over the trace's day, with and without
moving them (:mod:`crossdock.sim.shared`, the plan in :mod:`crossdock.queue.shared_nodes`).

Run: ``python bench/shared_nodes.py [--split 9:6 --split 12:3] [--settle 300] [--hold 1800] [--move 180] [--json out.json]``.
A split ``F:S`` gives each side F fixed nodes and S shared ones (8 GPUs each) to start with.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from crossdock.sim.day import trace_day  # noqa: E402
from crossdock.sim.shared import simulate, two_sides  # noqa: E402
from crossdock.sim.trace import DEFAULT_PODS, load_pods  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--split", action="append", help="F:S fixed and shared nodes per side (default 9:6 and 12:3)")
    ap.add_argument("--settle", type=float, default=300.0, help="seconds a side waits before it is given a node")
    ap.add_argument("--hold", type=float, default=1800.0, help="seconds a node stays after a move")
    ap.add_argument("--move", type=float, default=180.0, help="seconds from leaving one side to serving the other")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    day = two_sides(trace_day(load_pods(DEFAULT_PODS)))
    sides = list(day)
    rows = []
    print(f"{sum(len(v) for v in day.values())} GPU jobs of {DEFAULT_PODS.name}'s day, every other one per side,"
          f" {sides[1]}'s arrivals 12 h later; 8-GPU nodes")
    print(f"{'split':>6} {'moving':>6} {'moves':>5} {'idle GPU-h while other waited':>30} "
          + " ".join(f"{s + ' p50/p95 wait (min)':>30}" for s in sides))
    for split in args.split or ["9:6", "12:3"]:
        fixed, shared = (int(x) for x in split.split(":"))
        for moving in (False, True):
            r = simulate(day, dict.fromkeys(sides, fixed), dict.fromkeys(sides, shared), moving=moving,
                         settle_s=args.settle, hold_s=args.hold, move_s=args.move)
            waits = " ".join(f"{f'{s.p50_wait_s / 60:.1f} / {s.p95_wait_s / 60:.1f}':>30}" for s in r.sides.values())
            print(f"{split:>6} {str(moving):>6} {len(r.moves):>5} {r.idle_gpu_hours_while_other_waited:>30.0f} {waits}")
            rows.append({"split": split, "moving": moving, "moves": len(r.moves),
                         "idle_gpu_hours_while_other_waited": r.idle_gpu_hours_while_other_waited,
                         "sides": {k: vars(v) for k, v in r.sides.items()}})
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
