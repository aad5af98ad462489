"""The descheduler end to end on the local Slurm cluster, through Slurm's requeue: crossdock (scheduler
leader with its descheduler step, a Celery worker, the Slurm backend) over the two GPU partitions,
``gpu-a100`` (gpu-a100-1, 8 GPUs) and ``gpu-l4`` (gpu-l4-1, 4 GPUs).

Every GPU is filled with one-GPU training jobs, then all but two on the A100 node and one on the L4
node are cancelled: 9 GPUs idle, at most 6 on one node. An 8-GPU job of a higher class that may
not preempt is blocked by fragmentation only; the fewest moves are the A100 node's two jobs to the
L4 node's three idle GPUs. They are evicted (``scontrol requeue``), crossdock cancels the Slurm jobs
Slurm requeued and places their new attempts on the L4 node it reserved; the 8-GPU job starts on
the A100 node; the L4 job is never touched."""

from __future__ import annotations

import os
import uuid

import pytest
import yaml

from crossdock import service
from crossdock.dev.k8s import fragmented as frag
from crossdock.queue.models import GpuRequest, JobSpec
from crossdock.queue.states import JobState

pytestmark = [pytest.mark.slurm, pytest.mark.descheduler, pytest.mark.redis, pytest.mark.celery]

A100, L4 = "gpu-a100-1", "gpu-l4-1"
CONFIG = {
    "priority_classes": {
        "urgent": {"value": frag.HIGH, "preemptible": False, "preemption_policy": "Never", "grace_seconds": 0},
        "training": {"value": frag.LOW, "preemptible": True, "grace_seconds": 0},
    },
    "pools": {"a100": {"backend": "slurm", "partition": "gpu-a100"},
              "l4": {"backend": "slurm", "partition": "gpu-l4"}},
    "queues": {name: {"priority_class": name, "pools": ["a100", "l4"], "placement": "binpack"}
               for name in ("training", "urgent")},
    "default_queue": "training",
    "scheduler": {"interval_seconds": 0.3, "lease_seconds": 2},
    "descheduler": {"enabled": True, "interval_seconds": 0.5},
}


@pytest.fixture
def crossdock_on_slurm(tmp_path, redis_url, monkeypatch):
    from crossdock.dev import slurm as dev
    from crossdock.runtime import Runtime
    from tests.conftest import Cluster

    state = dev.up(os.environ.get("CROSSDOCK_SLURM_DIR"))
    cfg = tmp_path / "crossdock.yaml"
    cfg.write_text(yaml.safe_dump(CONFIG))
    env = {"CROSSDOCK_REDIS_URL": redis_url, "CROSSDOCK_STATE_DIR": str(tmp_path / "state"),
           "CROSSDOCK_CONFIG": str(cfg), "CROSSDOCK_PREFIX": f"s{uuid.uuid4().hex[:10]}",
           "CROSSDOCK_SLURM_ENV": str(state if state.is_file() else state / "env")}
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    c = Cluster(Runtime.from_env(), tmp_path)
    try:
        yield c
    finally:
        # the cluster is shared: nothing of this test may go on holding its GPUs
        rt = c.rt
        ids = [*rt.store.active_ids(), *rt.store.pending_ids()]
        service.cancel(rt, [str(i) for i in ids], c.send)
        frag.wait_until("this test's Slurm jobs ended", lambda: all(j.state.terminal for j in rt.store.get_many(ids)),
                        120)
        c.close()


def test_blocked_8_gpu_job_starts_after_two_requeues(crossdock_on_slurm, tmp_path):
    cluster = crossdock_on_slurm
    rt = cluster.rt
    cancel = lambda ids: service.cancel(rt, [str(i) for i in ids], cluster.send)  # noqa: E731
    kept = frag.fragment_crossdock(rt, cancel, [A100, L4], [2, 1], gpus=[8, 4], exact=False)
    assert all(len(j.nodes) == 1 for j in rt.store.get_many(kept[A100] + kept[L4]))
    (big,) = service.submit(rt, [JobSpec(command=["sleep", "3600"], queue="urgent", gpus=GpuRequest(count=8))])
    done = cluster.wait(big.id, states={JobState.RUNNING}, timeout=180)
    assert done.nodes == [A100]
    moved = frag.wait_until("the moved jobs running on the L4 node", lambda: (js := rt.store.get_many(kept[A100]))
                            and all(j.state is JobState.RUNNING for j in js) and js, 120)
    assert [(j.attempts, j.nodes) for j in moved] == [(2, [L4]), (2, [L4])]
    for j in moved:
        events = rt.store.events(j.id)
        (ev,) = [e for e in events if e.get("event") == "migrated"]
        assert (ev["from"], ev["to"]) == (A100, L4), ev
        states = [e["to"] for e in events if e.get("event") in (None, "submitted")]
        assert states[-5:] == ["RUNNING", "PREEMPTED", "PENDING", "SCHEDULED", "RUNNING"], states
    (stay,) = rt.store.get_many(kept[L4])
    assert (stay.state, stay.attempts, stay.nodes) == (JobState.RUNNING, 1, [L4])
