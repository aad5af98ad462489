"""crossdock's squeue and scontrol output against the real commands on the local Slurm cluster:
the same job (held, named, with a time limit) written by both, field by field."""

from __future__ import annotations

import subprocess
from datetime import datetime, timezone

import pytest

from crossdock.cli import slurmfmt
from crossdock.cli.views import scontrol_lines
from crossdock.queue.models import Job, JobSpec
from crossdock.queue.states import JobState

pytestmark = pytest.mark.slurm

# Fields that mean the same thing on both sides (partition, user and memory defaults differ).
# squeue refuses "%-7j" (crossdock reads it as printf does: left, the default), so it is left out.
SAME_FIELDS = "%t|%T|%l|%L|%D|%C|%c|%R|%r|%j|%M|%.5i|%7j|%4T|%e|%K|%y"
FORMATS = [slurmfmt.DEFAULT, slurmfmt.LONG, slurmfmt.START, SAME_FIELDS, "%i %P %u %V %S %Q %N"]  # squeue reads "%%x" as %x; crossdock as a percent sign
LIMIT = 86400 + 2 * 3600 + 3 * 60  # whole minutes: Slurm rounds a limit up to the minute
SCONTROL_KEYS = ("JobName", "JobState", "Reason", "RunTime", "TimeLimit", "EndTime", "NumNodes", "NumCPUs",
                 "NumTasks", "CPUs/Task", "ExitCode", "Requeue", "Restarts", "Dependency")


def run(env, *argv) -> str:
    r = subprocess.run(list(argv), capture_output=True, text=True, timeout=30, env=env)
    assert r.returncode == 0, r.stderr
    return r.stdout


def key_values(lines: list[str]) -> dict[str, str]:
    return dict(w.split("=", 1) for line in lines for w in line.split() if "=" in w)


@pytest.fixture
def held(slurm_cluster, tmp_path):
    out = run(slurm_cluster, "sbatch", "--parsable", "-H", "-J", "oracle-job", "-t", "1-02:03", "-c", "2",
              "-D", str(tmp_path), "--wrap", "true")
    job_id = int(out.strip().split(";")[0])
    yield slurm_cluster, job_id
    run(slurm_cluster, "scancel", str(job_id))


def test_squeue_headers_and_values_match(held):
    env, job_id = held
    spec = JobSpec(name="oracle-job", command=["true"], time_limit_seconds=LIMIT,
                   cpus_per_task=2, workdir="/tmp")
    ours = Job(id=job_id, spec=spec, state=JobState.PENDING, reason="JobHeldUser", queue="cpu",
               submit_time=datetime.now(timezone.utc))
    for fmt in FORMATS:
        theirs = run(env, "squeue", "-j", str(job_id), "-o", fmt).splitlines()
        mine = slurmfmt.render([ours], fmt)
        assert mine[0] == theirs[0].rstrip(), fmt
        if fmt == SAME_FIELDS:
            assert mine[1] == theirs[1].rstrip()


def test_scontrol_show_job_keys_match(held):
    env, job_id = held
    theirs = key_values(run(env, "scontrol", "show", "job", str(job_id)).splitlines())
    spec = JobSpec(name="oracle-job", command=["true"], time_limit_seconds=LIMIT,
                   cpus_per_task=2, workdir="/tmp")
    mine = key_values(scontrol_lines(Job(id=job_id, spec=spec, reason="JobHeldUser", queue="cpu")))
    assert {k: mine[k] for k in SCONTROL_KEYS} == {k: theirs[k] for k in SCONTROL_KEYS}
