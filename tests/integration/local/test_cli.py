"""The CLI as users run it: a subprocess, real Redis, exit codes and one-line errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from crossdock.queue.states import JobState

pytestmark = pytest.mark.redis
ROOT = Path(__file__).resolve().parents[3]


def cli(env, *args, stdin=None, cwd=None):
    return subprocess.run([sys.executable, "-m", "crossdock.cli.main", *args], env={**os.environ, **env},
                          capture_output=True, text=True, input=stdin, cwd=cwd, timeout=60)


@pytest.mark.parametrize("args,needle", [
    (["-c", "0", "--wrap", "true"], "-c: invalid value '0'"),
    (["--bogus", "--wrap", "true"], "--bogus: unknown option"),
    (["-t", "1:99:99:99", "--wrap", "true"], "-t"),
    (["-p", "nope", "--wrap", "true"], "--partition: unknown queue, pool or Slurm partition 'nope'"),
    (["--priority-class", "gold", "--wrap", "true"], "unknown priority class 'gold'"),
    (["-G", "9", "--wrap", "true"], "--gpus: 9 GPUs per node, but the largest node"),
    (["--mem", "1T", "--wrap", "true"], "--mem"),
], ids=["zero-cpus", "unknown-option", "bad-time", "unknown-queue", "unknown-class", "too-many-gpus", "too-much-mem"])
def test_bad_input_exits_2_with_one_line_and_stores_nothing(crossdock_env, store, args, needle):
    before = store.r.get(store.k.job_counter)
    r = cli(crossdock_env, "submit", *args)
    assert r.returncode == 2, r
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0], r.stderr
    assert store.r.get(store.k.job_counter) == before
    assert store.pending_ids() == []


def test_malformed_sbatch_line_names_the_line(crossdock_env, store, tmp_path):
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/sh\n#SBATCH --time=soon\necho hi\n")
    r = cli(crossdock_env, "submit", str(script))
    assert r.returncode == 2 and "line 2" in r.stderr and "--time" in r.stderr, r.stderr
    assert store.pending_ids() == []


def test_submit_script_with_directives_then_queue_show_hold_release(crossdock_env, store, tmp_path):
    script = tmp_path / "train.sh"
    script.write_text("#!/bin/sh\n#SBATCH -J from-script\n#SBATCH -c 2 -t 10\n#SBATCH --hold\necho $1\n")
    r = cli(crossdock_env, "submit", "--parsable", "-c", "3", str(script), "arg1", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    job_id = int(r.stdout.strip())
    job = store.get(job_id)
    assert (job.spec.name, job.spec.cpus_per_task, job.spec.time_limit_seconds, job.spec.args) == \
        ("from-script", 3, 10 * 60, ["arg1"])
    rows = json.loads(cli(crossdock_env, "queue", "--json").stdout)
    assert [(r["id"], r["state"], r["reason"]) for r in rows] == [(job_id, "PENDING", "JobHeldUser")]
    assert cli(crossdock_env, "release", str(job_id)).returncode == 0
    assert store.get(job_id).spec.hold is False
    shown = json.loads(cli(crossdock_env, "show", str(job_id), "--json").stdout)
    assert shown["name"] == "from-script" and shown["events"][0]["to"] == "PENDING"
    assert cli(crossdock_env, "cancel", str(job_id)).returncode == 0
    assert store.get(job_id).state is JobState.CANCELLED
    assert cli(crossdock_env, "show", "99999").returncode == 2


def test_queue_filters_by_state_user_and_queue(crossdock_env, store):
    for q in ("training", "inference"):
        assert cli(crossdock_env, "submit", "-p", q, "-H", "--wrap", "true").returncode == 0
    rows = json.loads(cli(crossdock_env, "queue", "--json", "-p", "inference").stdout)
    assert [r["queue"] for r in rows] == ["inference"]
    rows = json.loads(cli(crossdock_env, "queue", "--json", "-t", "RUNNING").stdout)
    assert rows == []
    rows = json.loads(cli(crossdock_env, "queue", "--json", "-u", "nobody-else").stdout)
    assert rows == []
    assert cli(crossdock_env, "queue", "-t", "BOGUS").returncode == 2


def test_wait_exit_status_is_the_jobs(cluster, crossdock_env, tmp_path):
    ok = cli(crossdock_env, "submit", "--parsable", "--wrap", "true", cwd=tmp_path).stdout.strip()
    bad = cli(crossdock_env, "submit", "--parsable", "--wrap", "exit 5", cwd=tmp_path).stdout.strip()
    assert cli(crossdock_env, "wait", ok, "--timeout", "60", "-q").returncode == 0
    assert cli(crossdock_env, "wait", bad, "--timeout", "60", "-q").returncode == 5
    out = cli(crossdock_env, "logs", ok)
    assert out.returncode == 0


def test_config_check_reports_every_error_with_its_path(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("priority_classes: {t: {value: 1}}\npools: {p: {backend: slurm}}\n"
                   "queues: {training: {priority_class: t, pools: [p, x], per_job: {gpu: -1}}}\n")
    r = subprocess.run([sys.executable, "-m", "crossdock.cli.main", "config", "check", str(bad)],
                       capture_output=True, text=True)
    assert r.returncode == 2
    assert "queues.training.per_job.gpu: must be ≥ 0" in r.stderr
    assert "queues.training.pools.1: unknown pool 'x'" in r.stderr
    assert "pools.p: a slurm pool needs partition" in r.stderr
    good = subprocess.run([sys.executable, "-m", "crossdock.cli.main", "config", "check",
                           str(ROOT / "crossdock" / "configs" / "crossdock.yaml")], capture_output=True, text=True)
    assert good.returncode == 0 and "OK" in good.stdout


def test_info_lists_the_local_node(crossdock_env):
    rows = json.loads(cli(crossdock_env, "info", "--json").stdout)
    assert rows[0]["node"] == "localhost" and rows[0]["cpus"] == 4
    assert rows[0]["gpus"] == {"A100": {"total": 2, "free": 2}}


def test_submit_with_no_scheduler_warns_once_and_queues(crossdock_env, store):
    r = cli(crossdock_env, "submit", "--array", "0-4", "--wrap", "true")
    assert r.returncode == 0, r
    job_id = int(r.stdout.split()[-1])
    assert r.stderr.splitlines() == [f"crossdock: warning: no scheduler is running; job {job_id} will wait PENDING"
                                     " until one starts: run `crossdock up`"]
    assert len(store.pending_ids()) == 5  # queued all the same: a scheduler started later runs them
    assert store.acquire_lease("scheduler-under-test", 30)
    r = cli(crossdock_env, "submit", "--wrap", "true")
    assert (r.returncode, r.stderr) == (0, ""), r


@pytest.mark.parametrize("text", ["pools: [\n", "pools: 3\n", "\xff"], ids=["yaml", "schema", "not-utf8"])
def test_submit_with_a_broken_config_is_one_line(crossdock_env, tmp_path, text):
    bad = tmp_path / "bad.yaml"
    bad.write_bytes(text.encode("latin-1"))
    r = cli({**crossdock_env, "CROSSDOCK_CONFIG": str(bad)}, "submit", "--wrap", "true")
    assert r.returncode == 2, r
    assert len(r.stderr.splitlines()) == 1 and r.stderr.startswith(f"crossdock: error: config {bad}"), r.stderr


def test_a_real_submit_loads_no_heavy_module(crossdock_env, store):
    heavy = ("typer", "click", "rich", "celery", "kombu", "numpy", "crossdock.queue.scheduler", "crossdock.workers",
             "crossdock.dev", "crossdock.cli.app")
    code = ("import atexit, sys\n"
            f"heavy = {heavy!r}\n"
            "atexit.register(lambda: print('loaded', sorted(m for m in sys.modules"
            " if any(m == h or m.startswith(h + '.') for h in heavy)), file=sys.stderr))\n"
            "sys.argv = ['crossdock', 'submit', '--wrap', 'true']\n"
            "from crossdock.cli.main import main\nmain()\n")
    r = subprocess.run([sys.executable, "-c", code], env={**os.environ, **crossdock_env}, capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.startswith("Submitted batch job"), r
    assert r.stderr.splitlines()[-1] == "loaded []", r.stderr
