"""Chaos on the embedded default (local backend): SIGKILLs of Celery workers, ``up``, its process
group and Redis at seeded random moments; every job must end exactly once in its true state.

``CROSSDOCK_CHAOS_JOBS`` sizes the run (500 in CI; ``bench/bench_chaos.py`` runs 10,000). A run
costs 0.5-0.6 CPU-seconds per job (a cpuacct cgroup over the whole run: 0.47 for 500 jobs, 0.63
for 2,000 on a shared machine), most of it the local supervisor each job starts as a fresh Python
interpreter (~0.3 CPU-s of imports before it detaches); 2,000 jobs are thus 8-11 minutes of two
cores after the two minutes of faults, over CI's budget for this test, until supervisors start
without a fresh interpreter.
``CROSSDOCK_CHAOS_SEED`` replays one,
``CROSSDOCK_CHAOS_RECOVER_SECONDS`` sets how long after the last fault every job must have ended.
"""

from __future__ import annotations

import os
import random

import pytest

from tests.chaos.harness import ChaosRun, local_config, run_chaos, schedule, seed_from_env

pytestmark = [pytest.mark.chaos, pytest.mark.redis, pytest.mark.celery, pytest.mark.timeout(900)]

KILLS = {"worker": 4, "scheduler": 3, "group": 3}


def test_every_job_ends_exactly_once_in_its_true_state(tmp_path):
    n = int(os.environ.get("CROSSDOCK_CHAOS_JOBS", "500"))
    seed = seed_from_env()
    rng = random.Random(seed)
    # Faults spread over the submission waves and the work they start: short Redis outages and one
    # of 30 s, longer than redis-py's retries and the heartbeats' lifetime.
    window = 40 + n / 40
    outages = [2.0, 2.0, 2.0, 30.0]
    recover = float(os.environ.get("CROSSDOCK_CHAOS_RECOVER_SECONDS", 90 + n / 3))
    run = ChaosRun(tmp_path, local_config(), seed, n, schedule(rng, window, KILLS, outages),
                   waves=5, wave_every=window / 6, recover_timeout=recover)
    verdicts, table = run_chaos(run)
    problems = [v for v in verdicts if v.problem]
    assert not problems, table
