"""The descheduler on this machine: real Redis, a real Celery worker, the scheduling loop and the
local backend with two declared 4-GPU nodes. A 2-GPU job that cannot preempt waits while one GPU
is idle on each node; the descheduler moves one training job (its new place reserved first) and
the job starts — the moved job runs again on the other node, never back on its own."""

from __future__ import annotations

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
def ds_cluster(crossdock_env, tmp_path, monkeypatch):
    cfg = tmp_path / "descheduler.yaml"
    cfg.write_text(yaml.safe_dump(CONFIG))
    monkeypatch.setenv("CROSSDOCK_CONFIG", str(cfg))
    c = Cluster(Runtime.from_env(), tmp_path)
    yield c
    c.close()


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
    sleepers = service.submit(rt, [JobSpec(command=["sleep", "300"], gpus=GpuRequest(count=1), workdir=str(tmp_path))
                                   for _ in range(8)])
    ids = [j.id for j in sleepers]
    for i in ids:
        ds_cluster.wait(i, {JobState.RUNNING})
    running = rt.store.get_many(ids)
    # one idle GPU on each node: 2 idle in all, never 2 on one node
    gone = [next(j for j in running if j.nodes == [node]) for node in ("gpu-a", "gpu-b")]
    service.cancel(rt, [str(j.id) for j in gone], ds_cluster.send)
    for j in gone:
        ds_cluster.wait(j.id)
    staying = [i for i in ids if i not in {j.id for j in gone}]
    before = {j.id: j.nodes for j in rt.store.get_many(staying)}

    urgent, = service.submit(rt, [JobSpec(command=["sleep", "300"], gpus=GpuRequest(count=2), queue="urgent",
                                          workdir=str(tmp_path))])
    started = ds_cluster.wait(urgent.id, {JobState.RUNNING}, timeout=90)

    moves = [e for e in rt.store.events() if e.get("event") == "migrated"]
    assert len(moves) == 1, moves  # the minimal number
    move = moves[0]
    moved = int(move["job"])
    assert move["reason"] == "Migrated" and move["from"] != move["to"] and f"job {urgent.id}" in move["why"]
    assert started.nodes == [move["from"]]
    again = _until("the moved job runs again", lambda: (j := rt.store.get(moved)).state is JobState.RUNNING
                   and j.attempts == 2 and j)
    assert again.nodes == [move["to"]] and again.nodes != before[moved]
    # nothing else moved or stopped
    for j in rt.store.get_many([i for i in staying if i != moved]):
        assert (j.state, j.attempts, j.nodes) == (JobState.RUNNING, 1, before[j.id])
    assert service.deschedule(rt)["evicted"] in ([moved], [])  # the last pass may have found nothing to do
    service.cancel(rt, [str(i) for i in [*staying, urgent.id]], ds_cluster.send)
    ds_cluster.wait_all([*staying, urgent.id], timeout=60)
