"""Queue-length autoscaling end to end on the embedded default: ``crossdock up`` (its own Redis, its
Celery worker, the scheduler with the autoscaler) and a local fleet on the elastic preprocessing
queue. A burst of short jobs raises the fleet to ceil(backlog / per_replica), bounded by max; once
the backlog is gone it returns to min after the (shortened) cooldown and stabilization; every job
ends COMPLETED exactly once (no task was killed by a scale-in)."""

from __future__ import annotations

import copy
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from crossdock import service
from crossdock.queue.models import JobSpec
from crossdock.queue.states import JobState
from tests.conftest import TEST_CONFIG
from tests.integration.local.test_up import Up, client_runtime, up_env, workers_of  # noqa: F401
from tests.waiting import eventually

pytestmark = [pytest.mark.redis, pytest.mark.celery, pytest.mark.autoscale]

PER_REPLICA, MAX, JOBS = 10, 4, 60


@pytest.fixture
def elastic_env(up_env, tmp_path):
    state, env = up_env
    cfg = copy.deepcopy(TEST_CONFIG)
    cfg["queues"]["preprocessing"]["elastic"] = {
        "metric": "queue_length", "per_replica": PER_REPLICA, "min": 0, "max": MAX, "cooldown_seconds": 2,
        "behavior": {"scaleDown": {"stabilizationWindowSeconds": 1,
                                   "policies": [{"type": "Percent", "value": 100, "periodSeconds": 1}]}},
        "fleet": {"backend": "local"}}
    cfg["autoscaler"] = {"interval_seconds": 0.5}
    (tmp_path / "crossdock.yaml").write_text(yaml.safe_dump(cfg))
    return state, env


def fleet_events(rt) -> list[dict]:
    return [e for e in rt.store.events(count=100_000) if e.get("event") == "fleet_scaled"]


def fleet_processes(state) -> list[int]:
    """Live processes (a replica's main process or pool child) of this state's fleets."""
    cmdlines = {pid: Path(f"/proc/{pid}/cmdline") for pid in workers_of(state)}
    out = []
    for pid, path in cmdlines.items():
        try:
            if b"fleet-preprocessing-" in path.read_bytes():
                out.append(pid)
        except OSError:
            pass
    return out


def all_ended(rt, ids: list[int]) -> list | None:
    jobs = rt.store.get_many(ids)
    return jobs if all(j.state.terminal for j in jobs) else None


def test_a_burst_scales_the_local_fleet_out_and_back_without_killing_work(elastic_env, tmp_path, monkeypatch):
    state, env = elastic_env
    up = Up(state, env, tmp_path / "up.log")
    try:
        rt = client_runtime(state, env, monkeypatch)
        jobs = service.submit(rt, [JobSpec(command=["sleep", "0.5"], workdir=str(tmp_path), queue="preprocessing")
                                   for _ in range(JOBS)])
        peak = min(math.ceil(JOBS / PER_REPLICA), MAX)
        eventually(f"the fleet at {peak}", lambda: any(int(e["to"]) == peak for e in fleet_events(rt)), 60)
        sample = subprocess.run([sys.executable, "-m", "crossdock", "autoscale", "--json"], env=env,
                                capture_output=True, text=True, timeout=60)
        (row,) = json.loads(sample.stdout)["fleets"]
        assert (row["queue"], row["backend"], row["fleet"]) == ("preprocessing", "local", "preprocessing")
        ended = eventually("every job ended", lambda: all_ended(rt, [j.id for j in jobs]), 180)
        assert {j.state for j in ended} == {JobState.COMPLETED}
        assert {j.attempts for j in ended} == {1}
        for j in ended:  # exactly once: one start and one end in each job's own events
            tos = [e.get("to") for e in rt.store.events(j.id)]
            assert tos.count("RUNNING") == 1 and tos.count("COMPLETED") == 1, (j.id, tos)
        eventually("the fleet back at min", lambda: (ev := fleet_events(rt)) and int(ev[-1]["to"]) == 0, 60)
        events = fleet_events(rt)
        assert all(0 <= int(e["to"]) <= MAX for e in events)
        assert max(int(e["to"]) for e in events) == peak
        assert int(events[0]["from"]) == 0 and int(events[0]["to"]) > 0
        for e in events:  # KEDA's queue-length target: ceil(backlog / per_replica), then min/max
            assert int(e["recommended"]) == math.ceil(int(e["backlog"]) / PER_REPLICA), e
            if int(e["to"]) > int(e["from"]):
                assert int(e["desired"]) <= min(int(e["recommended"]), MAX), e
        # the stopped replicas are gone (a warm shutdown of idle workers), the base worker stays
        eventually("the fleet's processes gone", lambda: not fleet_processes(state), 30)
        assert workers_of(state)
        log = (tmp_path / "up.log").read_text()
        assert "exited (status" not in log, log[-3000:]
    finally:
        up.stop()
