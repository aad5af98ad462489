"""The case study, simulated: ``configs/scenarios/casestudy.yaml``'s setups side by side on the same
arrivals, the table printed as docs/casestudy.md holds it, and the issue's targets checked for
the ``crossdock`` row.

Run: ``python bench/casestudy.py [--seed 42] [--hours 48] [--jobs 2] [--json out.json] [--plot docs/img/casestudy.png]``.
The setups run in parallel (``--jobs`` processes), each on the same arrivals.

``--live`` adds the live part (:mod:`crossdock.dev.casestudy_live`: the demo server under a load
generator beside CPU-heavy training, real cgroup quotas, one setup after the other; about three
minutes); ``--live-only`` runs it alone. Its rows go to the JSON's ``live`` key.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from crossdock.sim.casestudy import load_casestudy, run_casestudy  # noqa: E402
from crossdock.sim.casestudy_table import TARGETS, plot_table, render_table, targets_met  # noqa: E402

SCENARIO = ROOT / "configs/scenarios/casestudy.yaml"


def _one(args: tuple[str, int, float | None, str]) -> dict:
    path, seed, hours, setup = args
    cs = load_casestudy(path)
    if hours:
        cs = cs.model_copy(update={"hours": hours})
    return run_casestudy(cs, seed=seed, setups=[setup])["setups"][setup]


def run_live(seconds: float, qps: float) -> dict:
    from crossdock.dev import casestudy_live

    t0 = time.monotonic()
    live = casestudy_live.run(seconds=seconds, qps=qps)
    load = live["load"]
    print(f"live: {load['qps']:g} requests/s of {load['cpu_ms_per_request']:g} ms CPU for {load['seconds']:g} s per setup,"
          f" {load['cpus']} CPUs, {time.monotonic() - t0:.0f} s wall")
    print(casestudy_live.render(live))
    return live


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scenario", default=str(SCENARIO))
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--hours", type=float, default=None, help="simulated hours (default: the file's)")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--setups", default=None, help="comma-separated setups to run (default: the table's)")
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--plot", type=Path, default=None)
    ap.add_argument("--live", action="store_true", help="also run the live part on this machine")
    ap.add_argument("--live-only", action="store_true", help="run only the live part")
    ap.add_argument("--live-seconds", type=float, default=30.0, help="load per live setup (default 30)")
    ap.add_argument("--live-qps", type=float, default=40.0, help="requests/s of the live load (default 40)")
    a = ap.parse_args()
    live = run_live(a.live_seconds, a.live_qps) if a.live or a.live_only else None
    if a.live_only:
        if a.json:
            a.json.write_text(json.dumps({"live": live}, indent=1) + "\n")
        return 0
    cs = load_casestudy(a.scenario)
    t0 = time.monotonic()
    names = a.setups.split(",") if a.setups else [n for n, s in cs.setups.items() if s.table]
    unknown = [n for n in names if n not in cs.setups]
    if unknown:
        ap.error(f"--setups: unknown {', '.join(unknown)}; {a.scenario} has {', '.join(cs.setups)}")
    tasks = [(a.scenario, a.seed, a.hours, name) for name in names]
    with ProcessPoolExecutor(max_workers=max(1, a.jobs)) as pool:
        rows = dict(zip(names, pool.map(_one, tasks)))
    data = {"scenario": cs.name, "seed": a.seed, "hours": a.hours or cs.hours, "setups": rows,
            **({"live": live} if live else {})}
    print(f"{cs.name}: {data['hours']:g} simulated hours, seed {a.seed}, {time.monotonic() - t0:.0f} s wall")
    print(render_table(data))
    met = targets_met(rows["crossdock"]) if "crossdock" in rows else {}
    for key, ok in met.items():
        op, bound = TARGETS[key]
        print(f"target {key} {op} {bound:g}: {rows['crossdock'][key]} {'met' if ok else 'NOT met'}")
    if a.json:
        a.json.write_text(json.dumps(data, indent=1) + "\n")
    if a.plot:
        plot_table(data, a.plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
