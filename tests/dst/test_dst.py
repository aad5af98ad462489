"""The control plane's deterministic simulation (tests/dst/schedule.py) in CI: a bounded number
of seeds hold every invariant, and a seed replays to the same history."""

from __future__ import annotations

import hashlib
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

from crossdock.backends.registry import BackendContext, Backends
from crossdock.queue.config import parse_config
from crossdock.queue.models import Job, JobSpec
from crossdock.queue.states import JobState, Reason
from crossdock.workers.follow import Follower
from tests.dst.schedule import CONFIG, POOL, run
from tests.dst.world import SimBackend, SimClock, SimStore

OPEN: set[str] = set()
"""Rules a known, open finding breaks (reported by ``bench/dst.py``, left out here). Empty: the
one found, a leader paused past its lease committing its cycle while the next one held it, is
fenced now (the commit and the follower's writes check the lease in their own transaction)."""


@pytest.fixture(autouse=True)
def _quiet():
    logging.disable(logging.WARNING)
    yield
    logging.disable(logging.NOTSET)


@pytest.mark.parametrize("seed", range(50))
def test_schedule_holds_the_invariants(seed):
    out = run(seed)
    found = [str(v) for v in out.violations if v.rule not in OPEN]
    assert not found, f"seed {seed} (replay: python bench/dst.py --seed {seed} --verbose): {found}"
    assert out.steps and out.history.ops


def test_a_seed_replays_to_the_same_history():
    first, again = run(7), run(7)
    assert [str(op) for op in first.history.ops] == [str(op) for op in again.history.ops]
    assert first.faults == again.faults and len(first.history.ops) > 50


def _digest(ops) -> str:
    return hashlib.sha256("\n".join(str(op) for op in ops).encode()).hexdigest()


DIGEST = ("import hashlib, logging; logging.disable(logging.WARNING); from tests.dst.schedule import run; "
          "print(hashlib.sha256(chr(10).join(str(op) for op in run(7).history.ops).encode()).hexdigest())")


def test_a_seed_replays_the_same_in_another_process():
    """Nothing depends on the process: not its string hashing (sets of names), not its clock."""
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONHASHSEED": "12345", "PYTHONPATH": str(root)}
    there = subprocess.run([sys.executable, "-c", DIGEST], cwd=root, env=env, capture_output=True, text=True,
                           check=True, timeout=120).stdout.strip()
    assert there == _digest(run(7).history.ops)


def test_a_lost_job_with_a_cancel_standing_ends_cancelled_and_is_not_requeued():
    """Found by the simulation: a job whose dispatch was lost after the user's cancel was marked
    NODE_FAIL and requeued (its spec allows requeue), so it ran again and the cancel was lost."""
    clock = SimClock()
    store = SimStore(clock)
    config = parse_config(CONFIG)
    backends = Backends(BackendContext(config, store, None, {}, {}))
    backends.use("fake", SimBackend(config, store, clock, None))
    spec = JobSpec(name="k0", user="sim", command=["true"], requeue=True)
    (job,) = store.submit([Job(id=0, spec=spec, queue="low", priority_class="low", priority=100, pools=[POOL])])
    store.transition(job.id, JobState.SCHEDULED, bump_attempt=True, fields={"backend": "fake", "pool": POOL})
    store.transition(job.id, JobState.RUNNING)  # its backend then forgets it: not reported, so lost
    store.update_if(job.id, (JobState.RUNNING,), {"cancel_requested": True})
    Follower(store, backends, lambda *sent: None, "leader", lambda: {"fake"}, clock=clock).reconcile()
    ended = store.get(job.id)
    assert (ended.state, ended.reason, ended.attempts) == (JobState.CANCELLED, Reason.CANCELLED_BY_USER, 1)
