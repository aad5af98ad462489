"""The chaos run at benchmark size: N jobs (10,000 by default) on the embedded default while
Celery workers, ``up``, its process group and Redis (short outages and one of ~30 s) are
SIGKILLed at seeded random moments; prints the table the CI test prints (tests/chaos).

    python bench/bench_chaos.py [--jobs 10000] [--seed S] [--dir /tmp/crossdock-chaos] [--cpus 64]
                                [--workers 8] [--kills worker=8,scheduler=6,group=6] [--outages 2,2,2,2,30]

Exit status 0 when no job was lost, duplicated or wrongly recorded, 1 otherwise. Not run in CI
(it takes tens of minutes on two cores); ``CROSSDOCK_CHAOS_SEED`` replays a run as ``--seed`` does.
"""

from __future__ import annotations

import argparse
import random
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.chaos.harness import ChaosRun, local_config, run_chaos, schedule, seed_from_env  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=10_000)
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--dir", type=Path, default=None, help="kept after the run (default: a temporary one, removed)")
    ap.add_argument("--cpus", type=int, default=64, help="CPUs the local node declares")
    ap.add_argument("--workers", type=int, default=8, help="Celery worker processes of `up`")
    ap.add_argument("--kills", default="worker=8,scheduler=6,group=6")
    ap.add_argument("--outages", default="2,2,2,2,30", help="Redis outages, seconds each")
    args = ap.parse_args()
    seed = args.seed if args.seed is not None else seed_from_env()
    kills = {k: int(v) for k, v in (item.split("=") for item in args.kills.split(",") if item)}
    outages = [float(x) for x in args.outages.split(",") if x]
    rng = random.Random(seed)
    window = 30 + args.jobs / 40
    root = args.dir or Path(tempfile.mkdtemp(prefix="crossdock-chaos-"))
    root.mkdir(parents=True, exist_ok=True)
    run = ChaosRun(root, local_config(args.cpus), seed, args.jobs, schedule(rng, window, kills, outages),
                   waves=10, wave_every=window / 11, recover_timeout=120 + args.jobs / 8, up_workers=args.workers)
    try:
        verdicts, _table = run_chaos(run)
    finally:
        if args.dir is None:
            shutil.rmtree(root, ignore_errors=True)
    return 1 if any(v.problem for v in verdicts) else 0


if __name__ == "__main__":
    sys.exit(main())
