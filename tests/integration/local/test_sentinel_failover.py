"""Redis high availability: ``crossdock up`` (scheduler, Celery worker, local jobs' supervisors)
on a Sentinel URL; the master is killed while jobs run; the replica is promoted and crossdock goes
on: every job submitted before and after ends COMPLETED, each ran exactly once, and the history of
submissions, transitions and runs passes the chaos checker (no acknowledged write lost in the
failover)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from collections import Counter

import pytest
import yaml

from crossdock import service
from crossdock.queue.errors import StoreUnavailable
from crossdock.queue.models import JobSpec
from crossdock.queue.states import JobState, TERMINAL
from crossdock.runtime import Runtime
from tests.chaos.checker import check
from tests.chaos.history import History, mark, observe_runs, observe_store, parse_marks
from tests.chaos.history import submit as record_submit
from tests.conftest import TEST_CONFIG
from tests.integration.local.redis_ha import ha  # noqa: F401 (a fixture)
from tests.waiting import eventually

pytestmark = [pytest.mark.operate, pytest.mark.redis, pytest.mark.celery]

BEFORE, AFTER = 16, 8


# Each run appends "JOB start ATTEMPT PID TIME" and "JOB end ATTEMPT PID" to the runs file.
BODY = (f'{mark("start", "$CROSSDOCK_JOB_ID ")} >> "$1"; sleep 1; '
        'echo "$CROSSDOCK_JOB_ID end $CROSSDOCK_ATTEMPT $$" >> "$1"')


def submit(rt, history, runs, n, tag):
    """``n`` jobs, each marking its run in ``runs``; retried with one idempotency token while the
    store fails over (a retry never stores the batch twice), each try an op of ``history``."""
    specs = [JobSpec(command=["sh", "-c", BODY, "run", str(runs)], workdir=str(runs.parent),
                     cpus_per_task=1, name=f"{tag}-{i}") for i in range(n)]
    token = uuid.uuid4().hex

    def attempt():
        try:
            return record_submit(history, [s.name for s in specs], lambda: service.submit(rt, specs, token=token),
                                 key_of, StoreUnavailable)
        except StoreUnavailable:
            return None

    return [j.id for j in eventually(f"the {tag} jobs to be stored", attempt, 30)]


def key_of(job):
    return job.spec.name


def runs_by_job(runs):
    """Each job's marks, in the order written."""
    lines: dict[int, list[str]] = {}
    for line in runs.read_text().splitlines():
        job, _, mark = line.partition(" ")
        lines.setdefault(int(job), []).append(mark)
    return {job: parse_marks("\n".join(marks)) for job, marks in lines.items()}


def states(rt, ids):
    try:
        return Counter(j.state for j in rt.store.get_many(ids))
    except StoreUnavailable:
        return Counter()


def test_master_killed_mid_run_no_job_lost_or_run_twice(ha, tmp_path, monkeypatch):
    cfg = tmp_path / "crossdock.yaml"
    cfg.write_text(yaml.safe_dump(TEST_CONFIG))
    env = {"CROSSDOCK_REDIS_URL": ha.url, "CROSSDOCK_STATE_DIR": str(tmp_path / "state"),
           "CROSSDOCK_CONFIG": str(cfg), "CROSSDOCK_PREFIX": f"ha{uuid.uuid4().hex[:8]}"}
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    log = tmp_path / "up.log"
    with open(log, "ab") as out:
        # passwordless test servers on loopback: root's up runs on them only when told
        up = subprocess.Popen([sys.executable, "-m", "crossdock", "up", "-w", "2", "--insecure-shared-redis"],
                              env={**os.environ, **env},
                              stdout=out, stderr=subprocess.STDOUT)
    try:
        rt = Runtime.from_env()
        first_master = ha.master_port()
        runs = tmp_path / "runs.log"
        history = History()
        before = submit(rt, history, runs, BEFORE, "before")
        eventually("some jobs done and others running", lambda: (s := states(rt, before))[JobState.COMPLETED] >= 2
                   and s[JobState.RUNNING] >= 1, 60)
        history.fault("kill the master")
        ha.kill_master()
        eventually("the sentinels to promote the replica", lambda: ha.master_port() != first_master, 30)
        after = submit(rt, history, runs, AFTER, "after")
        ids = before + after
        eventually("every job to end", lambda: sum(n for s, n in states(rt, ids).items() if s in TERMINAL)
                   == len(ids), 120)
        assert states(rt, ids) == Counter({JobState.COMPLETED: len(ids)}), log.read_text()[-3000:]
        marks = runs_by_job(runs)
        ran = Counter({job: sum(1 for m in ms if m[0] == "start") for job, ms in marks.items()})
        assert ran == Counter({i: 1 for i in ids})  # none lost, none run twice
        for job in observe_store(history, rt.store, key_of):
            observe_runs(history, job.id, marks.get(job.id, []))
        verdict = check(history)
        print(verdict.summary())
        assert verdict.ok, verdict.report()
        assert ha.client("replica").info("replication")["role"] == "master"
        assert up.poll() is None, log.read_text()[-3000:]
    finally:
        up.send_signal(signal.SIGTERM)
        try:
            up.wait(30)
        except subprocess.TimeoutExpired:
            up.kill()
