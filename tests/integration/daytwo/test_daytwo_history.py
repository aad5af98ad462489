"""Day two: ``crossdock history -D`` shows every attempt of a requeued job, as ``sacct -D`` does.

- on the store: a requeue keeps the attempt it ends (state, reason, nodes, exit, times) in the
  job, in the same step, at most ``ATTEMPTS_KEPT``, and the history record carries them;
- a run the backend requeues itself (Slurm's own preemption: RUNNING, then PENDING in Slurm) is
  kept as a REQUEUED row of the same attempt;
- a preempt task that arrives once its attempt ended and the job was placed again (``crossdock
  requeue``'s stop landed first) leaves the next attempt alone;
- on ``crossdock up`` (local backend, real Redis and Celery): a running job requeued with
  ``crossdock requeue`` shows two rows with ``-D`` (PREEMPTED, then COMPLETED) and one without,
  in the table, with ``-o``, ``-l``, ``--units`` and ``--json``, before and after it expires.
"""

from __future__ import annotations

import json

import pytest

from crossdock.backends.redis_store import store as store_module
from crossdock.cli.history import rows
from crossdock.queue.models import REQUEUED, Job, JobSpec
from crossdock.queue.ports import BackendStatus
from crossdock.queue.states import TERMINAL, JobState
from crossdock.workers.leader import Scheduler
from tests.integration.daytwo.test_daytwo_live import cli, start_up, submit, wait_until  # noqa: F401 (a fixture)
from tests.integration.local.test_follow import placed, scripted  # noqa: F401 (a fixture)

pytestmark = [pytest.mark.daytwo, pytest.mark.redis]


def run_attempt(store, job_id: int, node: str, ended: JobState, exit_code: int) -> None:
    attempt = store.get(job_id).attempts + 1
    store.transition(job_id, JobState.SCHEDULED, bump_attempt=True, fields={"backend": "local", "pool": "local"})
    store.transition(job_id, JobState.RUNNING, attempt=attempt,
                     fields={"nodes": [node], "start_time": store_module.utcnow()})
    store.transition(job_id, ended, attempt=attempt, reason="Preempted" if ended is JobState.PREEMPTED else "",
                     fields={"exit_code": exit_code, "end_time": store_module.utcnow()})


def test_a_requeue_keeps_the_attempt_it_ends_and_the_history_record_carries_it(store, monkeypatch):
    job, = store.submit([Job(id=0, spec=JobSpec(command=["true"]), queue="q")])
    run_attempt(store, job.id, "n1", JobState.PREEMPTED, 143)
    assert store.requeue(job.id, reason="Preempted", attempt=1, only_from=(JobState.PREEMPTED,))
    first, = store.get(job.id).past_attempts
    assert (first.attempt, first.state, first.reason, first.nodes, first.exit_code, first.backend) == \
        (1, JobState.PREEMPTED, "Preempted", ["n1"], 143, "local")
    assert first.start_time is not None and first.end_time >= first.start_time
    assert not store.requeue(job.id, attempt=1)  # a replayed requeue moves nothing and keeps nothing
    assert len(store.get(job.id).past_attempts) == 1

    monkeypatch.setattr(store_module, "ATTEMPTS_KEPT", 2)
    run_attempt(store, job.id, "n2", JobState.FAILED, 1)
    assert store.requeue(job.id, reason="Requeued")  # a finished job requeued: its attempt ended FAILED
    run_attempt(store, job.id, "n3", JobState.COMPLETED, 0)
    assert store.requeue(job.id, reason="Requeued")
    run_attempt(store, job.id, "n4", JobState.COMPLETED, 0)
    now = store.get(job.id)
    assert [(a.attempt, a.state, a.nodes) for a in now.past_attempts] == [(2, JobState.FAILED, ["n2"]),
                                                                         (3, JobState.COMPLETED, ["n3"])]
    assert (now.attempts, now.nodes) == (4, ["n4"])
    assert store.expire_finished(0, 86400) == 1
    record, = store.history()
    assert [a["attempt"] for a in record["past_attempts"]] == [2, 3]


def test_a_run_the_backend_requeues_itself_is_a_requeued_row_of_the_same_attempt(runtime, scripted):
    sched = Scheduler(runtime, lambda *a: None)
    job = placed(runtime.store)
    for state, node in [(JobState.RUNNING, "cpu1"), (JobState.PENDING, "cpu1"), (JobState.RUNNING, "cpu2"),
                        (JobState.COMPLETED, "cpu2")]:
        scripted.report = BackendStatus("77", state, exit_code=0 if state is JobState.COMPLETED else None,
                                        nodes=(node,))
        sched.reconcile()
    done = runtime.store.get(job.id)
    assert [(n, str(r.state), r.reason, r.nodes) for n, r in rows([done], True)] == [
        (1, REQUEUED, "Requeued", ["cpu1"]), (1, "COMPLETED", "None", ["cpu2"])]
    run, = done.past_attempts
    assert run.start_time is not None and run.end_time <= done.start_time


def test_a_late_preempt_task_leaves_the_next_attempt_alone(runtime, monkeypatch):
    from crossdock.workers import tasks as worker_tasks

    monkeypatch.setattr(worker_tasks, "runtime", lambda: runtime)
    store = runtime.store
    job, = store.submit([Job(id=0, spec=JobSpec(command=["true"]), queue="q")])
    run_attempt(store, job.id, "n1", JobState.PREEMPTED, 143)
    assert store.requeue(job.id, reason="Preempted")
    store.transition(job.id, JobState.SCHEDULED, bump_attempt=True, fields={"backend": "local", "pool": "local"})
    assert worker_tasks.preempt(job.id, 0, 1) == "attempt 1 ended"
    assert not store.get(job.id).preempt_requested
    assert worker_tasks.preempt(job.id, 0, 2) == "requested" and store.get(job.id).preempt_requested


@pytest.mark.celery
def test_history_duplicates_shows_each_attempt_of_a_requeued_job(start_up, crossdock_env, tmp_path):
    proc, rt = start_up(crossdock_env, workers=1)
    # the first attempt waits to be requeued; the second (SLURM_RESTART_COUNT=1) ends at once
    job_id = submit(crossdock_env, "-J", "twice", "-D", str(tmp_path),
                    "--wrap", 'if [ "$SLURM_RESTART_COUNT" = 0 ]; then sleep 300; fi')
    wait_until(f"job {job_id} to run", lambda: rt.store.get(job_id).state is JobState.RUNNING, 60)
    r = cli(crossdock_env, "requeue", str(job_id))
    assert r.returncode == 0, r.stderr
    done = wait_until(f"job {job_id} to end", lambda: (j := rt.store.get(job_id)).state in TERMINAL and j, 90)
    assert (done.state, done.attempts) == (JobState.COMPLETED, 2), rt.store.events(job_id)

    fields = ["-j", str(job_id), "-P", "-n", "-o", "JobID,JobName,State,ExitCode,NodeList,Restarts"]
    once = cli(crossdock_env, "history", *fields)
    assert once.returncode == 0, once.stderr
    assert once.stdout.splitlines() == [f"{job_id}|twice|COMPLETED|0:0|localhost|1"]
    each = cli(crossdock_env, "history", "-D", *fields)
    assert each.returncode == 0, each.stderr
    assert each.stdout.splitlines() == [f"{job_id}|twice|PREEMPTED|0:15|localhost|1",
                                        f"{job_id}|twice|COMPLETED|0:0|localhost|1"]

    rows = json.loads(cli(crossdock_env, "history", "-D", "-j", str(job_id), "--json").stdout)
    assert [(r["JobID"], r["attempt"], r["State"], r["Restarts"]) for r in rows] == \
        [(str(job_id), 1, "PREEMPTED", 1), (str(job_id), 2, "COMPLETED", 1)]
    first, second = rows
    assert first["Start"] <= first["End"] <= second["Start"] <= second["End"]
    long = cli(crossdock_env, "history", "-D", "-l", "--units", "M", "-j", str(job_id), "-P", "-n")
    assert long.returncode == 0 and len(long.stdout.splitlines()) == 2, long.stderr

    assert rt.store.expire_finished(0, 86400) == 1 and rt.store.get_many([job_id]) == []
    assert cli(crossdock_env, "history", "-D", *fields).stdout == each.stdout  # the same rows from the record
    assert cli(crossdock_env, "history", *fields).stdout == once.stdout
    assert proc.poll() is None
