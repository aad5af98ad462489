"""The same input gives the same decisions, whatever the Python process.

Python salts the hashes of bytes and strings per process (``PYTHONHASHSEED``). Nothing a cycle
decides may depend on that salt: not the order in which a score call sees its nodes, nor the
last bit of a fragmentation sum, which can flip FGD's truncated sigmoid at Δ = 0.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[3] / "bench"

CYCLE = """
import json, sys
sys.path.insert(0, sys.argv[1])
import scheduler_decisions as d
for seed in map(int, sys.argv[2:]):
    snap, pending, cfg = d.random_scenario(seed, 1.0)
    print(json.dumps(d.decisions(d.run_cycle(snap, pending, cfg, d.NOW)), sort_keys=True))
"""

SCENARIOS = ["15"]
"""``random-15`` of ``bench/scheduler_decisions.py``: GPU shares scored where many nodes' FGD Δ is 0."""
SALTS = ["0", "1", "10"]
"""Salts under which that scenario's score calls used to see their nodes in different orders."""


def decisions_with(salt: str) -> list[str]:
    done = subprocess.run([sys.executable, "-c", CYCLE, str(BENCH), *SCENARIOS], capture_output=True, text=True,
                          env={**os.environ, "PYTHONHASHSEED": salt}, timeout=120, check=True)
    return done.stdout.splitlines()


def test_decisions_do_not_depend_on_the_hash_salt():
    first, *others = (decisions_with(s) for s in SALTS)
    assert len(first) == len(SCENARIOS)
    assert all(other == first for other in others)
