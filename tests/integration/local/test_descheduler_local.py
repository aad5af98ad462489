"""The descheduler on this machine: real Redis, a real Celery worker, the scheduling loop and the
local backend with two declared 4-GPU nodes. A 2-GPU job that cannot preempt waits while one GPU
is idle on each node; the descheduler moves one training job (its new place reserved first) and
the job starts — the moved job runs again on the other node, never back on its own."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest
import yaml

from crossdock import service
from crossdock.queue.models import GpuRequest, JobSpec
from crossdock.queue.states import JobState
from crossdock.runtime import Runtime

from tests.conftest import Cluster

pytestmark = [pytest.mark.redis, pytest.mark.celery, pytest.mark.descheduler]

NODE = {"cpus": 16, "memory_mib": 16384, "gpus": 4, "gpu_model": "A100"}
CONFIG = {
    "priority_classes": {"training": {"value": 100, "preemptible": True, "grace_seconds": 1},
                         "urgent": {"value": 1000, "preemption_policy": "Never"}},
    "pools": {"local": {"backend": "local", "nodes": [{"name": "gpu-a", **NODE}, {"name": "gpu-b", **NODE}]}},
    "queues": {"training": {"priority_class": "training", "pools": ["local"]},
               "urgent": {"priority_class": "urgent", "pools": ["local"]}},
    "default_queue": "training",
    "scheduler": {"interval_seconds": 0.2, "kill_wait_seconds": 1, "lease_seconds": 2},
    "descheduler": {"enabled": True, "interval_seconds": 0.5},
}


@pytest.fixture
def ds_cluster(crossdock_env, tmp_path, monkeypatch, request):
    """The cluster; ``@pytest.mark.parametrize("ds_cluster", [{...}], indirect=True)`` overrides
    keys of the ``descheduler`` block."""
    cfg = tmp_path / "descheduler.yaml"
    block = {**CONFIG["descheduler"], **getattr(request, "param", {})}
    cfg.write_text(yaml.safe_dump({**CONFIG, "descheduler": block}))
    monkeypatch.setenv("CROSSDOCK_CONFIG", str(cfg))
    c = Cluster(Runtime.from_env(), tmp_path)
    yield c
    c.close()


def fragment(c: Cluster, tmp_path) -> list[int]:
    """Eight 1-GPU sleepers on the two 4-GPU nodes, then one gone from each: one idle GPU per node.
    Returns the ids of the six that stay."""
    rt = c.rt
    ids = [j.id for j in service.submit(rt, [JobSpec(command=["sleep", "300"], gpus=GpuRequest(count=1),
                                                     workdir=str(tmp_path)) for _ in range(8)])]
    for i in ids:
        c.wait(i, {JobState.RUNNING})
    running = rt.store.get_many(ids)
    gone = [next(j for j in running if j.nodes == [node]) for node in ("gpu-a", "gpu-b")]
    service.cancel(rt, [str(j.id) for j in gone], c.send)
    for j in gone:
        c.wait(j.id)
    return [i for i in ids if i not in {j.id for j in gone}]


def urgent_job(rt, tmp_path) -> int:
    job, = service.submit(rt, [JobSpec(command=["sleep", "300"], gpus=GpuRequest(count=2), queue="urgent",
                                       workdir=str(tmp_path))])
    return job.id


def stop_all(c: Cluster, ids: list[int]) -> None:
    service.cancel(c.rt, [str(i) for i in ids], c.send)
    c.wait_all(ids, timeout=60)


def _until(what, check, timeout: float = 60):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        time.sleep(0.1)
    raise AssertionError(f"{what}: not reached after {timeout}s")


def test_a_blocked_two_gpu_job_starts_after_one_migration(ds_cluster, tmp_path):
    rt = ds_cluster.rt
    staying = fragment(ds_cluster, tmp_path)
    before = {j.id: j.nodes for j in rt.store.get_many(staying)}
    urgent = urgent_job(rt, tmp_path)
    started = ds_cluster.wait(urgent, {JobState.RUNNING}, timeout=90)

    moves = [e for e in rt.store.events() if e.get("event") == "migrated"]
    assert len(moves) == 1, moves  # the minimal number
    move = moves[0]
    moved = int(move["job"])
    assert move["reason"] == "Migrated" and move["from"] != move["to"] and f"job {urgent}" in move["why"]
    assert started.nodes == [move["from"]]
    again = _until("the moved job runs again", lambda: (j := rt.store.get(moved)).state is JobState.RUNNING
                   and j.attempts == 2 and j)
    assert again.nodes == [move["to"]] and again.nodes != before[moved]
    went = [(e.get("to"), e.get("reason")) for e in rt.store.events(moved) if e.get("to")]
    assert ("PENDING", "Migrated") in went, went  # requeued as Migrated, not Preempted
    # nothing else moved or stopped
    for j in rt.store.get_many([i for i in staying if i != moved]):
        assert (j.state, j.attempts, j.nodes) == (JobState.RUNNING, 1, before[j.id])
    assert service.deschedule(rt)["evicted"] in ([moved], [])  # the last pass may have found nothing to do
    stop_all(ds_cluster, [*staying, urgent])


@pytest.mark.parametrize("ds_cluster", [{"dry_run": True}], indirect=True)
def test_the_dry_run_lists_the_move_and_why_and_moves_nothing(ds_cluster, tmp_path, crossdock_env):
    rt = ds_cluster.rt
    staying = fragment(ds_cluster, tmp_path)
    urgent = urgent_job(rt, tmp_path)
    planned = _until("a planned move", lambda: [e for e in rt.store.events() if e.get("event") == "migration_planned"])
    assert f"makes room for job {urgent}" in planned[0]["why"]
    env = {**os.environ, **crossdock_env, "CROSSDOCK_CONFIG": os.environ["CROSSDOCK_CONFIG"]}
    out = subprocess.run([sys.executable, "-m", "crossdock", "deschedule", "--dry-run", "--json"], env=env,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert len(report["migrations"]) == 1 and report["unblocked"] == [urgent]
    assert report["migrations"][0]["strategy"] == "Defragmentation"
    # nothing was evicted: every sleeper still runs its first attempt, the urgent job waits
    assert all((j.state, j.attempts) == (JobState.RUNNING, 1) for j in rt.store.get_many(staying))
    assert rt.store.get(urgent).state is JobState.PENDING
    assert not [e for e in rt.store.events() if e.get("event") == "migrated"]
    stop_all(ds_cluster, [*staying, urgent])
