"""A live config change under a running ``crossdock up``: a queue's weight through ``config apply``,
a new pool and queue through an edit of the configured file and SIGHUP, a bad edit refused whole
(on file change and through ``config apply``); jobs admitted before keep what they were admitted
under; each applied change is an event carrying its diff; ``config show`` prints the one in force."""

from __future__ import annotations

import copy
import json
import os
import signal
import subprocess
import sys

import pytest
import yaml

from crossdock.queue.states import JobState, TERMINAL
from crossdock.runtime import Runtime
from tests.conftest import TEST_CONFIG
from tests.waiting import eventually

pytestmark = [pytest.mark.operate, pytest.mark.redis, pytest.mark.celery]


def cli(env, *args):
    return subprocess.run([sys.executable, "-m", "crossdock.cli.main", *args], env={**os.environ, **env},
                          capture_output=True, text=True, timeout=60)


def config_events(rt):
    return rt.store.live_config.events()


def submit(env, *args) -> int:
    r = cli(env, "submit", "--parsable", *args)
    assert r.returncode == 0, r.stderr
    return int(r.stdout.strip())


def finished(rt, job_id):
    job = rt.store.get(job_id)
    return job if job.state in TERMINAL else None


@pytest.fixture
def up(crossdock_env, tmp_path):
    env = {**os.environ, **crossdock_env}
    log = tmp_path / "up.log"
    with open(log, "ab") as out:
        proc = subprocess.Popen([sys.executable, "-m", "crossdock", "up", "-w", "1"], env=env, stdout=out,
                                stderr=subprocess.STDOUT)
    rt = Runtime.from_env()
    try:
        eventually("the leader to take the configured file", lambda: rt.store.live_config.in_force_version() == 1
                   or proc.poll() is not None, 60)
        assert proc.poll() is None, log.read_text()[-3000:]
        yield proc, rt
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)


def test_live_changes_under_a_running_scheduler(up, crossdock_env, tmp_path):
    proc, rt = up
    path = crossdock_env["CROSSDOCK_CONFIG"]
    live = rt.store.live_config
    [first] = config_events(rt)
    assert first["event"] == "config_applied" and first["version"] == "1"

    # 1. a queue's weight, through `config apply`: the diff printed, the leader switched, the event
    heavier = copy.deepcopy(TEST_CONFIG)
    heavier["queues"]["training"]["weight"] = 3
    (tmp_path / "heavier.yaml").write_text(yaml.safe_dump(heavier))
    r = cli(crossdock_env, "config", "apply", str(tmp_path / "heavier.yaml"))
    assert r.returncode == 0, r.stderr
    assert "queues.training: weight 1 → 3" in r.stdout.splitlines()
    assert "version 2 in force" in r.stdout
    event = config_events(rt)[-1]
    assert event["event"] == "config_applied" and event["version"] == "2"
    assert json.loads(event["changes"]) == [{"path": "queues.training", "kind": "changed", "summary": "",
                                             "fields": [{"field": "weight", "old": 1.0, "new": 3.0}]}]
    shown = cli(crossdock_env, "config", "show")
    assert shown.returncode == 0 and "version 2" in shown.stderr
    assert yaml.safe_load(shown.stdout)["queues"]["training"]["weight"] == 3

    # a job admitted under version 2 (queue inference: class inference, not preemptible) runs on
    held = submit(crossdock_env, "-p", "inference", "--wrap", "sleep 3")
    eventually("the inference job to run", lambda: rt.store.get(held).state is JobState.RUNNING)

    # 2. a new pool and queue, and inference moved to the preemptible class: the file edited, SIGHUP
    grown = copy.deepcopy(heavier)
    grown["pools"]["extra"] = {"backend": "local", "nodes": [{"name": "extra-node", "cpus": 2, "memory_mib": 1024}]}
    grown["queues"]["extra"] = {"priority_class": "preprocessing", "pools": ["extra"]}
    grown["queues"]["inference"]["priority_class"] = "training"
    with open(path, "w") as f:
        f.write(yaml.safe_dump(grown))
    proc.send_signal(signal.SIGHUP)
    eventually("version 3 in force", lambda: live.in_force_version() == 3)
    diff = config_events(rt)[-1]["diff"].splitlines()
    assert diff == ["pools.extra: added (backend local)", "queues.inference: priority_class inference → training",
                    "queues.extra: added (class preprocessing, pools extra)"]
    new_job = submit(crossdock_env, "-p", "extra", "--wrap", "true")
    placed = eventually("the job in the new pool to end", lambda: finished(rt, new_job), 60)
    assert (placed.state, placed.pool, placed.nodes) == (JobState.COMPLETED, "extra", ["extra-node"])
    after = submit(crossdock_env, "-p", "inference", "-H", "--wrap", "true")
    assert (rt.store.get(after).priority_class, rt.store.get(after).preemptible) == ("training", True)
    kept = eventually("the job admitted before to end", lambda: finished(rt, held), 30)
    assert (kept.state, kept.priority_class, kept.priority, kept.preemptible) == (
        JobState.COMPLETED, "inference", 1000, False)

    # 3. a bad edit of the file (no SIGHUP: the change is seen) is refused whole; the running one stays
    bad = copy.deepcopy(grown)
    bad["queues"]["extra"]["pools"] = ["nowhere"]
    bad["queues"]["training"]["weight"] = 5
    with open(path, "w") as f:
        f.write(yaml.safe_dump(bad))
    refusal = eventually("the refusal event", lambda: [e for e in config_events(rt) if e["event"] == "config_refused"])
    assert "queues.extra.pools.0: unknown pool 'nowhere'" in refusal[-1]["errors"]
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump(bad))
    r = cli(crossdock_env, "config", "apply", str(tmp_path / "bad.yaml"))
    assert r.returncode == 2 and "queues.extra.pools.0: unknown pool 'nowhere'" in r.stderr and "refused" in r.stderr
    assert (live.desired_version(), live.in_force_version()) == (3, 3)
    shown = yaml.safe_load(cli(crossdock_env, "config", "show").stdout)
    assert shown["queues"]["training"]["weight"] == 3 and "extra" in shown["pools"]
    assert proc.poll() is None
