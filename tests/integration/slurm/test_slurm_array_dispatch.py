"""Arrays through crossdock to the real local Slurm cluster: one cycle admits the tasks, ONE
Celery task submits them as ONE Slurm array with the throttle, follow maps every Slurm task
back to its crossdock task, and a replayed dispatch submits nothing new."""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path

import pytest
import yaml

from crossdock import service
from crossdock.backends.slurm.cli import parse_scontrol_job
from crossdock.queue.models import ArraySpec, JobSpec
from crossdock.queue.states import JobState

pytestmark = [pytest.mark.slurm, pytest.mark.redis, pytest.mark.celery]


def config(backend_queue: int) -> dict:
    return {
        "priority_classes": {"batch": {"value": 500}},
        "pools": {"hpc-cpu": {"backend": "slurm", "partition": "cpu", "backend_queue": backend_queue}},
        "queues": {"batch": {"priority_class": "batch", "pools": ["hpc-cpu"]}},
        "default_queue": "batch",
        "scheduler": {"interval_seconds": 0.3, "lease_seconds": 2},
    }


def crossdock_on_slurm(tmp_path: Path, redis_url: str, monkeypatch, backend_queue: int):
    from crossdock.dev import slurm as dev
    from crossdock.runtime import Runtime
    from tests.conftest import Cluster

    state = dev.up(os.environ.get("CROSSDOCK_SLURM_DIR"))
    cfg = tmp_path / "crossdock.yaml"
    cfg.write_text(yaml.safe_dump(config(backend_queue)))
    env = {"CROSSDOCK_REDIS_URL": redis_url, "CROSSDOCK_STATE_DIR": str(tmp_path / "state"),
           "CROSSDOCK_CONFIG": str(cfg), "CROSSDOCK_PREFIX": f"a{uuid.uuid4().hex[:10]}",
           "CROSSDOCK_SLURM_ENV": str(state if state.is_file() else state / "env")}
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    return Cluster(Runtime.from_env(), tmp_path)


@pytest.fixture
def queued(tmp_path, redis_url, monkeypatch):
    """crossdock whose Slurm pool may queue 100 jobs in Slurm beyond what fits."""
    c = crossdock_on_slurm(tmp_path, redis_url, monkeypatch, backend_queue=100)
    yield c
    c.close()


@pytest.fixture
def fitting(tmp_path, redis_url, monkeypatch):
    """crossdock that hands Slurm only what fits now (no backend queue)."""
    c = crossdock_on_slurm(tmp_path, redis_url, monkeypatch, backend_queue=0)
    yield c
    c.close()


def slurm_records(rt, array_job_id: int):
    """Slurm's records (``scontrol show job -o``) of this crossdock array, any attempt or group."""
    slurm = rt.backends("slurm")
    return [j for j in slurm.driver.jobs() if (slurm.tags.parse(j.comment) or (None,))[0] == array_job_id]


def stamps(tmp_path: Path, array_job_id: int, task: int) -> tuple[float, float]:
    start, end = (float(x) for x in (tmp_path / f"t{array_job_id}-{task}.times").read_text().split())
    return start, end


SCRIPT = ('date +%s.%N > {d}/t$CROSSDOCK_ARRAY_JOB_ID-$SLURM_ARRAY_TASK_ID.start; sleep 1.5; '
          'echo $(cat {d}/t$CROSSDOCK_ARRAY_JOB_ID-$SLURM_ARRAY_TASK_ID.start) $(date +%s.%N) '
          '> {d}/t$CROSSDOCK_ARRAY_JOB_ID-$SLURM_ARRAY_TASK_ID.times; exit $((SLURM_ARRAY_TASK_ID == 5 ? 5 : 0))')


def test_array_becomes_one_slurm_array_with_its_throttle(queued, tmp_path):
    rt = queued.rt
    tasks = service.submit(rt, [JobSpec(command=["bash", "-c", SCRIPT.format(d=tmp_path)], workdir=str(tmp_path),
                                        stdout=str(tmp_path / "arr-%A_%a.out"),
                                        array=ArraySpec(task_ids=list(range(6)), max_running=2))])
    array_id = tasks[0].array_job_id
    done = {j.array_task_id: j for j in queued.wait_all([t.id for t in tasks])}
    # Every task reached its own end state with its own exit code.
    assert {t: (j.state, j.exit_code) for t, j in done.items()} == {
        **{t: (JobState.COMPLETED, 0) for t in range(5)}, 5: (JobState.FAILED, 5)}
    # One Slurm array: every task's reference is a task of the same Slurm job id, and Slurm
    # holds exactly one crossdock-tagged array for this crossdock array.
    slurm_ids = {j.backend_ref.split("_")[0] for j in done.values()}
    assert len(slurm_ids) == 1, slurm_ids
    records = slurm_records(rt, array_id)
    assert {str(r.array_job_id) for r in records} == slurm_ids
    assert sorted(r.array_task_id for r in records) == list(range(6))
    assert all(j.nodes and j.nodes[0] in ("cpu1", "cpu2") for j in done.values())
    # The throttle held: never more than 2 tasks at once (from each task's own start and end times).
    spans = [stamps(tmp_path, array_id, t) for t in range(6)]
    overlap = max(sum(1 for s, e in spans if s <= t < e) for t, _ in spans)
    assert overlap == 2, spans
    assert sorted(p.name for p in tmp_path.glob(f"arr-{array_id}_*.out")) == [f"arr-{array_id}_{t}.out" for t in range(6)]


def test_throttle_reaches_slurm_as_array_task_throttle(queued, tmp_path):
    rt = queued.rt
    tasks = service.submit(rt, [JobSpec(command=["sleep", "30"], workdir=str(tmp_path), stdout="/dev/null",
                                        array=ArraySpec(task_ids=list(range(5)), max_running=2))])
    array_id = tasks[0].array_job_id
    deadline = time.monotonic() + 60
    while not all(j.backend_ref for j in rt.store.get_many(t.id for t in tasks)):
        assert time.monotonic() < deadline, "tasks never dispatched"
        time.sleep(0.2)
    lines = rt.backends("slurm").driver._run(["scontrol", "show", "job", "-o"]).splitlines()
    tags = rt.backends("slurm").tags
    mine = [ln for ln in lines if ln.startswith("JobId=") and (tags.parse(parse_scontrol_job(ln).comment) or (0,))[0]
            == array_id]
    assert mine and all("ArrayTaskThrottle=2" in ln for ln in mine)
    assert len({parse_scontrol_job(ln).array_job_id for ln in mine}) == 1
    service.cancel(rt, [str(array_id)], queued.send)
    assert {j.state for j in queued.wait_all([t.id for t in tasks])} == {JobState.CANCELLED}


def test_replayed_grouped_dispatch_submits_nothing_new(fitting, tmp_path):
    from crossdock.workers import tasks as worker_tasks

    rt = fitting.rt
    tasks = service.submit(rt, [JobSpec(command=["true"], workdir=str(tmp_path), stdout="/dev/null",
                                        array=ArraySpec(task_ids=[0, 1, 2, 3]))])
    ids = [t.id for t in tasks]
    done = fitting.wait_all(ids)
    assert {j.state for j in done} == {JobState.COMPLETED}
    array_id = tasks[0].array_job_id
    before = slurm_records(rt, array_id)
    assert len({r.array_job_id for r in before}) == 1  # all four fit: one cycle, one group, one array
    refs = {j.id: j.backend_ref for j in done}
    # 1. The same dispatch sent again (a resend, a duplicate message): every claim is taken.
    resent = fitting.send_tracked("crossdock.dispatch_array", [array_id, 1, ids, None], "slurm")
    # 2. The same task delivered again after its worker died (same Celery id): it owns the claims and
    #    submits again, which finds the array by its tag.
    holder = rt.store.r.get(rt.store.k.dispatch_claim(ids[0], 1))
    task_id = holder.split(":", 1)[1]
    for job_id in ids:  # back to SCHEDULED as it was when the worker died
        rt.store.r.hset(rt.store.k.job(job_id), mapping={"state": JobState.SCHEDULED.value, "backend_ref": ""})
    worker_tasks.runtime.cache_clear()
    out = worker_tasks.dispatch_array.apply(args=[array_id, 1, ids, None], task_id=task_id).get()
    assert out.startswith("4 tasks")
    assert {j.id: j.backend_ref for j in rt.store.get_many(ids)} == refs
    # The duplicate message of step 1 has run too: every claim taken, or its tasks moved on.
    assert fitting.wait_task("crossdock.dispatch_array", resent) in ("'duplicate'", "'stale'")
    after = slurm_records(rt, array_id)
    assert sorted((r.array_job_id, r.array_task_id) for r in after) == sorted(
        (r.array_job_id, r.array_task_id) for r in before)
    for job_id in ids:
        rt.store.r.hset(rt.store.k.job(job_id), mapping={"state": JobState.COMPLETED.value})


def test_more_tasks_than_fit_go_to_slurm_in_one_submission(queued, tmp_path):
    """40 one-CPU tasks on 16 CPU slots: the backend queue lets Slurm hold the rest."""
    rt = queued.rt
    tasks = service.submit(rt, [JobSpec(command=["sleep", "1"], workdir=str(tmp_path), stdout="/dev/null",
                                        array=ArraySpec(task_ids=list(range(40))))])
    done = queued.wait_all([t.id for t in tasks], timeout=180)
    assert {j.state for j in done} == {JobState.COMPLETED}
    assert len({j.backend_ref.split("_")[0] for j in done}) == 1
    assert len({r.array_job_id for r in slurm_records(rt, tasks[0].array_job_id)}) == 1


def test_separate_jobs_of_one_cycle_are_submitted_by_one_batch_dispatch(fitting, tmp_path):
    rt = fitting.rt
    jobs = service.submit(rt, [JobSpec(command=["sh", "-c", f"exit {i}"], workdir=str(tmp_path), stdout="/dev/null")
                               for i in range(5)])
    done = fitting.wait_all([j.id for j in jobs])
    assert [(j.state, j.exit_code) for j in done] == [(JobState.COMPLETED, 0)] + [(JobState.FAILED, i)
                                                                                  for i in range(1, 5)]
    assert len({j.backend_ref for j in done}) == 5 and all("_" not in j.backend_ref for j in done)
    claims = {rt.store.r.get(rt.store.k.dispatch_claim(j.id, 1)) for j in done}
    assert len(claims) == 1, claims  # one Celery task claimed and submitted all five
