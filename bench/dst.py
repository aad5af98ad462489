"""Deterministic simulation of the control plane (tests/dst): run many seeded schedules, print
schedules per minute and every failing seed with the command that replays it.

    python bench/dst.py --seeds 2000            # seeds 0..1999
    python bench/dst.py --seed 17 --verbose     # replay one: its violations and its history
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.dst.schedule import STEPS, run  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, default=200, help="how many schedules (seeds from --start)")
    parser.add_argument("--start", type=int, default=0)
    parser.add_argument("--seed", type=int, help="replay this one seed")
    parser.add_argument("--steps", type=int, default=STEPS, help="steps of each schedule while faults strike")
    parser.add_argument("--verbose", action="store_true", help="with --seed: print the whole history")
    args = parser.parse_args()
    logging.disable(logging.WARNING)  # the code under test logs every fault it survives
    seeds = [args.seed] if args.seed is not None else range(args.start, args.start + args.seeds)
    failed: dict[int, list] = {}
    rules: Counter[str] = Counter()
    faults: Counter[str] = Counter()
    jobs = 0
    t0 = time.perf_counter()
    for seed in seeds:
        out = run(seed, args.steps)
        jobs += out.jobs
        faults.update(out.faults)
        if not out.ok:
            failed[seed] = out.violations
            rules.update({v.rule for v in out.violations})
        if args.verbose:
            print("\n".join(str(op) for op in out.history.ops))
    took = time.perf_counter() - t0
    n = len(seeds)
    print(f"{n} schedules ({args.steps} steps each, {jobs} jobs, faults {dict(sorted(faults.items()))}) in "
          f"{took:.1f}s: {n / took * 60:.0f} schedules/minute; {len(failed)} failing")
    for rule, count in rules.most_common():
        print(f"  {rule}: {count} seeds")
    for seed, violations in failed.items():
        print(f"seed {seed}: {violations[0]}" + (f" (+{len(violations) - 1} more)" if len(violations) > 1 else ""))
        print(f"  replay: python bench/dst.py --seed {seed} --steps {args.steps} --verbose")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
