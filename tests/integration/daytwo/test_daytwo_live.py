"""Day two on a running crossdock: ``crossdock up`` as a subprocess over a real Redis, real Celery
workers and, for Slurm, the local Slurm cluster.

- an admin applies a config adding a Slurm pool while ``up`` runs: the worker takes the Slurm
  queue and a job submitted there reaches COMPLETED;
- ``crossdock health`` names a SCHEDULED job whose queue no worker consumes;
- an edit of the file ``up`` watches (a comment) does not silently undo ``config apply``: it is
  refused and said so; an edit that carries the applied change goes;
- the example of docs/services.md runs as written (the replica finds ``python`` on the
  deployer's PATH), and the update that fixes a crash-looping service lifts the hold at once.
"""

from __future__ import annotations

import copy
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import yaml

from crossdock.queue.serving import ServiceState
from crossdock.queue.states import TERMINAL, JobState
from crossdock.runtime import Runtime
from tests.conftest import TEST_CONFIG
from tests.waiting import eventually as wait_until

pytestmark = [pytest.mark.daytwo, pytest.mark.redis, pytest.mark.celery]


def cli(env, *args, timeout=60):
    return subprocess.run([sys.executable, "-m", "crossdock.cli.main", *args], env={**os.environ, **env},
                          capture_output=True, text=True, timeout=timeout)


def submit(env, *args) -> int:
    r = cli(env, "submit", "--parsable", *args)
    assert r.returncode == 0, r.stderr
    return int(r.stdout.strip())


def health(env) -> dict:
    r = cli(env, "health", "--json")
    assert r.returncode in (0, 1), r.stderr
    return json.loads(r.stdout)


def part(report, name) -> dict:
    return next(p for p in report["parts"] if p["name"] == name or p["name"].startswith(f"{name} "))


@pytest.fixture
def start_up(tmp_path):
    """Start ``crossdock up -w N`` with an environment; each is stopped at the end."""
    started = []

    def start(env, workers=1):
        log = tmp_path / f"up-{len(started)}.log"
        with open(log, "ab") as out:
            proc = subprocess.Popen([sys.executable, "-m", "crossdock", "up", "-w", str(workers)],
                                    env={**os.environ, **env}, stdout=out, stderr=subprocess.STDOUT)
        started.append(proc)
        rt = Runtime.from_env()
        wait_until("the leader to take the configured file",
                   lambda: rt.store.live_config.in_force_version() >= 1 or proc.poll() is not None, 60)
        assert proc.poll() is None, log.read_text()[-3000:]
        return proc, rt

    yield start
    for proc in started:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)


# --- 1. a pool added while crossdock runs is served ---------------------------------------------
@pytest.mark.slurm
def test_a_slurm_pool_applied_while_up_runs_is_served(start_up, crossdock_env, slurm_cluster, jobs_dir, tmp_path):
    env = {**crossdock_env, "CROSSDOCK_SLURM_ENV": slurm_cluster["CROSSDOCK_SLURM_ENV"]}
    proc, rt = start_up(env, workers=1)
    worker = wait_until("up's report", lambda: (h := health(env))["up"] and part(h, "worker"))
    assert "crossdock.slurm" not in worker["detail"]

    grown = copy.deepcopy(TEST_CONFIG)
    grown["pools"]["hpc"] = {"backend": "slurm", "partition": "cpu"}
    grown["queues"]["hpc"] = {"priority_class": "preprocessing", "pools": ["hpc"]}
    (tmp_path / "grown.yaml").write_text(yaml.safe_dump(grown))
    r = cli(env, "config", "apply", str(tmp_path / "grown.yaml"))
    assert r.returncode == 0, r.stderr
    assert "pools.hpc: added (backend slurm, partition cpu)" in r.stdout and "version 2 in force" in r.stdout

    out = jobs_dir / f"daytwo-slurm-{os.getpid()}-{time.time_ns()}.out"
    job_id = submit(env, "-p", "hpc", "-D", str(jobs_dir), "-o", str(out), "--wrap", "echo served by slurm")
    done = wait_until(f"job {job_id} to end", lambda: (j := rt.store.get(job_id)).state in TERMINAL and j, 180)
    assert (done.state, done.backend, done.pool) == (JobState.COMPLETED, "slurm", "hpc"), rt.store.events(job_id)
    assert "served by slurm" in out.read_text()

    report = wait_until("health to show the Slurm queue consumed",
                        lambda: (h := health(env)) and "crossdock.slurm" in part(h, "worker")["detail"] and h)
    assert "not yet" not in part(report, "worker")["detail"] and part(report, "dispatch")["ok"]
    assert "crossdock.slurm (1 worker)" in part(report, "dispatch")["detail"]
    assert proc.poll() is None


# --- 1. health names a SCHEDULED job that no worker can dispatch -------------------------------
def test_health_names_a_scheduled_job_whose_queue_no_worker_consumes(start_up, crossdock_env):
    proc, rt = start_up(crossdock_env, workers=0)  # the scheduler alone: nobody consumes crossdock.local
    job_id = submit(crossdock_env, "--wrap", "true")
    wait_until(f"job {job_id} to be scheduled", lambda: rt.store.get(job_id).state is JobState.SCHEDULED)
    report = wait_until("health to flag it", lambda: (h := health(crossdock_env)) and not part(h, "dispatch")["ok"] and h)
    detail = part(report, "dispatch")["detail"]
    assert f"1 SCHEDULED job ({job_id}) wait on crossdock.local, which no worker consumes" in detail, detail
    assert report["status"] == "degraded"
    assert rt.store.get(job_id).state is JobState.SCHEDULED


# --- 6. config apply is not silently undone by an edit of up's file ----------------------------
def test_an_edit_of_ups_file_does_not_silently_undo_config_apply(start_up, crossdock_env, tmp_path):
    proc, rt = start_up(crossdock_env, workers=1)
    live, watched = rt.store.live_config, Path(crossdock_env["CROSSDOCK_CONFIG"])
    heavier = copy.deepcopy(TEST_CONFIG)
    heavier["queues"]["training"]["weight"] = 3
    (tmp_path / "heavier.yaml").write_text(yaml.safe_dump(heavier))
    r = cli(crossdock_env, "config", "apply", str(tmp_path / "heavier.yaml"))
    assert r.returncode == 0 and "version 2 in force" in r.stdout, r.stderr
    assert f"refuses an edit of {watched} that takes this back" in r.stderr

    # a comment added to the watched file: its text changed, and it would put weight back to 1
    watched.write_text("# day two: a comment\n" + watched.read_text())
    refused = wait_until("the edit to be refused", lambda: [e for e in live.events() if e["event"] == "config_refused"])
    assert "would take back version 2" in refused[-1]["errors"] and "queues.training: weight 1 → 3" in refused[-1]["errors"]
    assert (live.desired_version(), live.in_force_version()) == (2, 2)
    assert yaml.safe_load(cli(crossdock_env, "config", "show").stdout)["queues"]["training"]["weight"] == 3
    said = wait_until("health to say so", lambda: (h := health(crossdock_env)) and not part(h, "config-file")["ok"] and h)
    assert "not reloaded" in part(said, "config-file")["detail"] and "config apply" in part(said, "config-file")["detail"]

    # an edit that carries the applied change (and adds a pool) is taken
    carried = copy.deepcopy(heavier)
    carried["pools"]["extra"] = {"backend": "local", "nodes": [{"name": "extra-node", "cpus": 2, "memory_mib": 1024}]}
    watched.write_text("# day two: carries weight 3\n" + yaml.safe_dump(carried))
    wait_until("version 3 in force", lambda: live.in_force_version() == 3)
    assert live.events()[-1]["diff"] == "pools.extra: added (backend local)"
    wait_until("health to show the file taken", lambda: part(health(crossdock_env), "config-file")["ok"])
    assert proc.poll() is None


# --- 5. the services example as written; an update lifts a crash-loop hold ---------------------
@pytest.mark.services
def test_the_services_example_runs_as_written_and_an_update_lifts_a_crash_loop(start_up, crossdock_env, request):
    cfg = copy.deepcopy(TEST_CONFIG)
    cfg["services"] = {"interval_seconds": 0.5, "router": {"probe_seconds": 0.2}}
    Path(crossdock_env["CROSSDOCK_CONFIG"]).write_text(yaml.safe_dump(cfg))
    # the deployer's shell, where `python` is the one crossdock is installed in (an activated venv)
    env = {**crossdock_env, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    proc, rt = start_up(env, workers=1)
    services = rt.store.services

    def delete_services() -> None:
        """Replicas are local jobs, which outlive ``crossdock up`` as jobs outlive a restart: the
        services are deleted while up still runs (before it is stopped), so none lingers."""
        for name in services.names():
            assert cli(env, "services", "delete", name).returncode == 0
        wait_until("the services gone and their replicas ended",
                   lambda: not services.names() and not rt.store.active_ids(), 90)

    request.addfinalizer(delete_services)

    # docs/services.md, "Trying it", word for word
    r = cli(env, "serve", "demo", "--command", "python -m crossdock.jobtools.demo_server --service-ms 20",
            "--ready-path", "/healthz", "--replicas", "1:4", "--target-qps", "50")
    assert r.returncode == 0, r.stderr
    rec = wait_until("demo to be available", lambda: (s := services.get("demo")).status.state is ServiceState.AVAILABLE
                     and s.address and s, 90)
    with urllib.request.urlopen(f"http://{rec.address}/", timeout=10) as answer:
        assert answer.status == 200

    # a service whose server crashes at start: three failures hold new replicas (a crash loop)
    r = cli(env, "serve", "flaky", "--command", "python -m crossdock.jobtools.no_such_server", "--ready-path", "/healthz")
    assert r.returncode == 0, r.stderr
    wait_until("the crash loop", lambda: "crash loop" in services.get("flaky").status.message, 90)
    # the fix, while the failures are fresh: the hold is lifted by the update itself
    r = cli(env, "services", "update", "flaky", "--command", "python -m crossdock.jobtools.demo_server")
    assert r.returncode == 0 and "rolling update to generation 2" in r.stdout, r.stderr
    wait_until("flaky to be available", lambda: services.get("flaky").status.state is ServiceState.AVAILABLE, 90)
    # the hold went with the generation that crashed: none of its failures counts against the fix
    status = services.get("flaky").status
    assert status.failures_generation == 2 and status.failures == [] and "crash loop" not in status.message
    assert proc.poll() is None
