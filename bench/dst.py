"""Deterministic simulation of the control plane (tests/dst): run many seeded schedules, print
schedules per minute and every failing seed with the command that replays it.

    python bench/dst.py --seeds 2000            # seeds 0..1999
    python bench/dst.py --seed 17 --verbose     # replay one: its violations and its history
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from collections import Counter
from multiprocessing import Pool
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.dst.schedule import STEPS, run  # noqa: E402


def _run(job: tuple[int, int, bool]) -> tuple[int, dict[str, int], list[str], list[str], list[str]]:
    """One schedule: its jobs, faults, violations' rules and texts, and (``verbose``) its history."""
    logging.disable(logging.WARNING)  # the code under test logs every fault it survives
    seed, steps, verbose = job
    out = run(seed, steps)
    return (out.jobs, out.faults, [v.rule for v in out.violations], [str(v) for v in out.violations],
            [str(op) for op in out.history.ops] if verbose else [])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, default=200, help="how many schedules (seeds from --start)")
    parser.add_argument("--start", type=int, default=0)
    parser.add_argument("--seed", type=int, help="replay this one seed")
    parser.add_argument("--steps", type=int, default=STEPS, help="steps of each schedule while faults strike")
    parser.add_argument("--verbose", action="store_true", help="with --seed: print the whole history")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1,
                        help="processes running schedules side by side (each schedule runs in one)")
    args = parser.parse_args()
    seeds = [args.seed] if args.seed is not None else range(args.start, args.start + args.seeds)
    failed: dict[int, list[str]] = {}
    rules: Counter[str] = Counter()
    faults: Counter[str] = Counter()
    jobs = 0
    t0 = time.perf_counter()
    work = [(seed, args.steps, args.verbose) for seed in seeds]
    if args.jobs > 1 and len(work) > 1:
        with Pool(args.jobs) as pool:
            outcomes = pool.map(_run, work, chunksize=8)
    else:
        outcomes = [_run(w) for w in work]
    for seed, (n_jobs, n_faults, broken, violations, history) in zip(seeds, outcomes):
        jobs += n_jobs
        faults.update(n_faults)
        if violations:
            failed[seed] = violations
            rules.update(set(broken))
        if history:
            print("\n".join(history))
    took = time.perf_counter() - t0
    n = len(seeds)
    print(f"{n} schedules on {args.jobs} processes ({args.steps} steps each, {jobs} jobs, faults {dict(sorted(faults.items()))}) in "
          f"{took:.1f}s: {n / took * 60:.0f} schedules/minute; {len(failed)} failing")
    for rule, count in rules.most_common():
        print(f"  {rule}: {count} seeds")
    for seed, violations in failed.items():
        firsts = {v.split(":", 1)[0]: v for v in reversed(violations)}  # the first of each rule
        print(f"seed {seed}: {len(violations)} violations; " + "; ".join(reversed(firsts.values())))
        print(f"  replay: python bench/dst.py --seed {seed} --steps {args.steps} --verbose")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
