"""The descheduler in the simulator: ``configs/scenarios/descheduler.yaml`` with and without the
live policy, on the scenario's Poisson arrivals and on the Alibaba trace's arrival times
(``openb_pod_list_default.csv``'s submit times folded onto a day), averaged over seeds.

Run: ``python bench/descheduler_sim.py [--seeds 3] [--plot docs/img/descheduler.png] [--json out.json]``;
it prints one row per (arrivals, setup): GPU utilisation, training GPU-hours done, training jobs
never started, migrations and the GPU-hours they lost.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from crossdock.sim.scenario import load_scenario, run_scenario  # noqa: E402
from crossdock.sim.trace import load_pods  # noqa: E402

SCENARIO = ROOT / "configs/scenarios/descheduler.yaml"
TRACE = Path("/work/shared/traces/alibaba-gpu-v2023-openb/openb_pod_list_default.csv")
TRAINING = ("training-small", "training-large")


def row(result) -> dict[str, float]:
    s = result.summary()
    return {
        "gpu_util_pct": s["gpu_util_pct_avg"],
        "training_gpu_h": round(sum(s["completed_gpu_hours"].get(c, 0.0) for c in TRAINING), 1),
        "large_training_gpu_h": s["completed_gpu_hours"].get("training-large", 0.0),
        "never_started": sum(s["queueing_delay"].get(c, {}).get("never_started", 0) for c in TRAINING),
        "migrations": s["migrations"],
        "migration_lost_gpu_h": s.get("migration_lost_gpu_hours", 0.0),
        "large_wait_p50_min": s["queueing_delay"].get("training-large", {}).get("p50_min") or 0.0,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--trace", type=Path, default=TRACE)
    ap.add_argument("--plot", type=Path)
    ap.add_argument("--json", type=Path, help="write the figures here")
    ap.add_argument("--replot", type=Path, help="chart the figures of an earlier --json instead of running")
    args = ap.parse_args()
    sc = load_scenario(SCENARIO)
    tod = load_pods(args.trace).creation % 86400.0 if args.trace.exists() and not args.replot else None
    arrivals = {"Poisson": None, **({"Alibaba": tod} if tod is not None else {})}
    out: dict[str, dict[str, dict[str, float]]] = json.loads(args.replot.read_text()) if args.replot else {}
    for name, times in ({} if args.replot else arrivals).items():
        runs: dict[str, list[dict[str, float]]] = {}
        for seed in range(42, 42 + args.seeds):
            for setup, result in run_scenario(sc, seed=seed, times_of_day=times).items():
                runs.setdefault(setup, []).append(row(result))
        out[name] = {setup: {k: round(float(np.mean([r[k] for r in rs])), 2) for k in rs[0]} for setup, rs in runs.items()}
    cols = list(next(iter(next(iter(out.values())).values())))
    print("| arrivals | setup | " + " | ".join(cols) + " |")
    print("|---|---|" + "---|" * len(cols))
    for name, setups in out.items():
        for setup, r in setups.items():
            print(f"| {name} | {setup} | " + " | ".join(f"{r[c]:g}" for c in cols) + " |")
    if args.json:
        args.json.write_text(json.dumps(out, indent=2))
    if args.plot:
        from crossdock.sim.plot import plot_bars

        labels = {"without": "off", "descheduler": "on"}
        rows = [(f"{name}\n{labels.get(setup, setup)}", r) for name, setups in out.items() for setup, r in setups.items()]
        metrics = [("gpu_util_pct", "GPU utilisation (%)"), ("training_gpu_h", "training GPU-h done"),
                   ("never_started", "training jobs never started"), ("migrations", "migrations"),
                   ("migration_lost_gpu_h", "GPU-h lost to migrations")]
        plot_bars(rows, metrics, args.plot, title=f"{sc.name}: {sc.hours:g} h, mean of {args.seeds} seeds")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
