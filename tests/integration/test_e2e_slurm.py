"""End to end through crossdock to the real local Slurm cluster: submit -> schedule on Slurm
nodes -> Celery dispatch (sbatch) -> follow (scontrol) -> done, with exit codes and files."""

from __future__ import annotations

import os
import uuid

import pytest
import yaml

from crossdock import service
from crossdock.queue.models import GpuRequest, JobSpec
from crossdock.queue.states import JobState

pytestmark = [pytest.mark.slurm, pytest.mark.redis, pytest.mark.celery]

CONFIG = {
    "priority_classes": {"batch": {"value": 500}},
    "pools": {"hpc-cpu": {"backend": "slurm", "partition": "cpu"},
              "hpc-gpu": {"backend": "slurm", "partition": "gpu-a100", "gpu": {"model": "a100"}}},
    "queues": {"batch": {"priority_class": "batch", "pools": ["hpc-cpu", "hpc-gpu"]},
               "gpu": {"priority_class": "batch", "pools": ["hpc-gpu"]}},
    "default_queue": "batch",
    "scheduler": {"interval_seconds": 0.3, "lease_seconds": 2},
}


@pytest.fixture
def slurm_cluster_env(request, tmp_path, redis_url, monkeypatch):
    """The environment of a crossdock over the local Slurm cluster; the config is ``CONFIG`` or
    the test's indirect parameter."""
    from crossdock.dev import slurm as dev

    state = dev.up(os.environ.get("CROSSDOCK_SLURM_DIR"))
    cfg = tmp_path / "crossdock.yaml"
    cfg.write_text(yaml.safe_dump(getattr(request, "param", CONFIG)))
    env = {"CROSSDOCK_REDIS_URL": redis_url, "CROSSDOCK_STATE_DIR": str(tmp_path / "state"),
           "CROSSDOCK_CONFIG": str(cfg), "CROSSDOCK_PREFIX": f"s{uuid.uuid4().hex[:10]}",
           "CROSSDOCK_SLURM_ENV": str(state if state.is_file() else state / "env")}
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    return env


@pytest.fixture
def slurm_crossdock(slurm_cluster_env, tmp_path):
    from tests.conftest import Cluster
    from crossdock.runtime import Runtime

    c = Cluster(Runtime.from_env(), tmp_path)
    yield c
    c.close()


def test_job_runs_on_slurm_with_output_and_exit_code(slurm_crossdock, tmp_path):
    rt = slurm_crossdock.rt
    ok, = service.submit(rt, [JobSpec(command=["sh", "-c", "echo hello $SLURM_JOB_NAME"], name="cd-e2e",
                                      workdir=str(tmp_path), stdout=str(tmp_path / "ok.out"))])
    bad, = service.submit(rt, [JobSpec(command=["sh", "-c", "exit 4"], workdir=str(tmp_path),
                                       stdout=str(tmp_path / "bad.out"))])
    done = slurm_crossdock.wait(ok.id, timeout=120)
    assert (done.state, done.exit_code, done.backend, done.pool) == (JobState.COMPLETED, 0, "slurm", "hpc-cpu")
    assert done.nodes and done.nodes[0] in ("cpu1", "cpu2")
    assert "hello" in (tmp_path / "ok.out").read_text()
    failed = slurm_crossdock.wait(bad.id, timeout=120)
    assert (failed.state, failed.exit_code) == (JobState.FAILED, 4)
    assert failed.backend_ref and failed.backend_ref != done.backend_ref


def test_gpu_job_lands_on_the_a100_node_with_its_devices(slurm_crossdock, tmp_path):
    rt = slurm_crossdock.rt
    job, = service.submit(rt, [JobSpec(command=["sh", "-c", "echo $CUDA_VISIBLE_DEVICES"], queue="gpu",
                                       gpus=GpuRequest(count=2, type="a100"), workdir=str(tmp_path),
                                       stdout=str(tmp_path / "gpu.out"))])
    done = slurm_crossdock.wait(job.id, timeout=120)
    assert done.state is JobState.COMPLETED and done.nodes == ["gpu-a100-1"], (done, slurm_crossdock.rt.store.events(job.id))
    assert len((tmp_path / "gpu.out").read_text().strip().split(",")) == 2


def test_cancel_reaches_slurm(slurm_crossdock, tmp_path):
    rt = slurm_crossdock.rt
    job, = service.submit(rt, [JobSpec(command=["sleep", "300"], workdir=str(tmp_path),
                                       stdout=str(tmp_path / "c.out"))])
    slurm_crossdock.wait(job.id, {JobState.RUNNING}, timeout=120)
    service.cancel(rt, [str(job.id)], slurm_crossdock.send)
    assert slurm_crossdock.wait(job.id, timeout=120).state is JobState.CANCELLED


PREEMPT_CONFIG = {
    "priority_classes": {"training": {"value": 100, "preemptible": True, "grace_seconds": 10},
                         "inference": {"value": 1000}},
    "pools": {"hpc-gpu": {"backend": "slurm", "partition": "gpu-a100"}},
    "queues": {"training": {"priority_class": "training", "pools": ["hpc-gpu"]},
               "inference": {"priority_class": "inference", "pools": ["hpc-gpu"]}},
    "default_queue": "training",
    "scheduler": {"interval_seconds": 0.3, "lease_seconds": 2},
}

VICTIM = """#!/bin/sh
trap 'echo got TERM' TERM
echo "attempt $CROSSDOCK_ATTEMPT"
while :; do sleep 0.2; done
"""


@pytest.mark.parametrize("slurm_cluster_env", [PREEMPT_CONFIG], indirect=True, ids=["preempt-config"])
def test_eight_victims_are_preempted_without_holding_a_worker(slurm_crossdock, tmp_path):
    """Eight 1-GPU victims that ignore SIGTERM, each asked for as ``--gres=gpu:A100:1`` (the model
    name crossdock shows; the node says ``a100``), make room for an 8-GPU job. Two workers run
    the eight preempt tasks, which return before any victim is killed (the grace period is the
    follower's to watch), and every victim is back in the queue as a new attempt."""
    import re
    import time

    from crossdock.queue.models import Gres

    rt = slurm_crossdock.rt
    victims = service.submit(rt, [JobSpec(script=VICTIM, gres=[Gres(name="gpu", type="A100", count=1)],
                                          workdir=str(tmp_path), stdout=str(tmp_path / f"v{i}.out"))
                                  for i in range(8)])
    try:
        _preempt_eight(slurm_crossdock, victims, tmp_path)
    finally:  # the victims run until killed: never leave them holding the shared node
        service.cancel(rt, [str(v.id) for v in victims], slurm_crossdock.send)
        for v in victims:
            slurm_crossdock.wait(v.id, timeout=60)


def _preempt_eight(slurm_crossdock, victims, tmp_path) -> None:
    import re
    import time

    rt = slurm_crossdock.rt
    for v in victims:
        assert slurm_crossdock.wait(v.id, {JobState.RUNNING}, timeout=120).nodes == ["gpu-a100-1"]
    big, = service.submit(rt, [JobSpec(command=["true"], queue="inference", gpus=GpuRequest(count=8, type="A100"),
                                       workdir=str(tmp_path), stdout=str(tmp_path / "big.out"))])
    log = tmp_path / "worker.log"
    deadline = time.monotonic() + 60
    while len(done := re.findall(r"crossdock\.preempt\[[^]]+\] succeeded in ([0-9.]+)s", log.read_text())) < 8:
        assert time.monotonic() < deadline, log.read_text()[-3000:]
        time.sleep(0.1)
    # Every preempt task has returned; every victim still runs (SIGTERM ignored, 10 s of grace).
    refs = [rt.store.get(v.id).backend_ref for v in victims]
    assert {s.state for s in rt.backends("slurm").status_refs(refs).values()} == {JobState.RUNNING}
    print(f"8 preempt tasks on 2 workers: longest {max(map(float, done)):.3f} s, sum {sum(map(float, done)):.3f} s")
    finished = slurm_crossdock.wait(big.id, timeout=120)
    assert (finished.state, finished.nodes) == (JobState.COMPLETED, ["gpu-a100-1"])
    for i, v in enumerate(victims):
        went = [e["to"] for e in rt.store.events(v.id) if "to" in e]  # transitions; notes such as the preemptor aside
        assert went[:5] == ["PENDING", "SCHEDULED", "RUNNING", "PREEMPTED", "PENDING"], went
        assert "got TERM" in (tmp_path / f"v{i}.out").read_text()
