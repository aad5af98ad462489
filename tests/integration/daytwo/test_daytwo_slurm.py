"""Day two on the real local Slurm cluster: a job is found under crossdock's id, never Slurm's.

Without ``-o`` Slurm would write ``slurm-<Slurm's id>.out`` and ``%j`` would be Slurm's id; a
user who submitted job 16 must find ``slurm-16.out`` (or ``name-16.out``), read it with
``crossdock logs 16`` and see its path in ``crossdock show 16``. The job itself sees both ids:
``CROSSDOCK_JOB_ID`` (crossdock's) and ``SLURM_JOB_ID`` (Slurm's, for Slurm's own tools)."""

from __future__ import annotations

import uuid

import pytest

from crossdock.queue.states import JobState
from tests.integration.local.test_cli import cli
from tests.integration.test_e2e_slurm import slurm_cluster_env, slurm_crossdock  # noqa: F401 - fixtures

pytestmark = [pytest.mark.daytwo, pytest.mark.slurm, pytest.mark.redis, pytest.mark.celery]

SCRIPT = 'echo "crossdock=$CROSSDOCK_JOB_ID slurm=$SLURM_JOB_ID"'


def submit(env, *args, cwd) -> int:
    r = cli(env, "submit", "--parsable", *args, cwd=cwd)
    assert r.returncode == 0, r.stderr
    return int(r.stdout)


@pytest.fixture(params=["cli", "rest"])
def slurm_driver(request, slurm_cluster_env, monkeypatch):  # noqa: F811
    """Each Slurm driver in turn (sbatch, slurmrestd), set before crossdock starts."""
    monkeypatch.setenv("CROSSDOCK_SLURM_DRIVER", request.param)
    slurm_cluster_env["CROSSDOCK_SLURM_DRIVER"] = request.param
    return request.param


def test_output_files_logs_and_show_speak_crossdocks_id(slurm_driver, slurm_cluster_env, slurm_crossdock,  # noqa: F811
                                                         jobs_dir):
    env = slurm_cluster_env
    workdir = jobs_dir / f"daytwo-{uuid.uuid4().hex[:8]}"
    workdir.mkdir()
    workdir.chmod(0o777)  # jobs run as the cluster's user
    store = slurm_crossdock.rt.store
    store.r.set(store.k.job_counter, 900_000)  # a site whose ids never met Slurm's (both start at 1)
    plain = submit(env, "-J", "plain", "--wrap", SCRIPT, cwd=workdir)
    named = submit(env, "-J", "named", "--output=%x-%j.out", "--wrap", SCRIPT, cwd=workdir)
    expected = {plain: f"slurm-{plain}.out", named: f"named-{named}.out"}
    for job_id, name in expected.items():
        done = slurm_crossdock.wait(job_id, timeout=120)
        assert (done.state, done.backend) == (JobState.COMPLETED, "slurm"), (done, slurm_crossdock.rt.store.events(job_id))
        slurm_id = done.backend_ref
        assert slurm_id and slurm_id != str(job_id), f"Slurm's id {slurm_id} is crossdock's: the test would prove nothing"
        path = workdir / name
        text = path.read_text()
        assert text == f"crossdock={job_id} slurm={slurm_id}\n"
        logs = cli(env, "logs", str(job_id))
        assert (logs.returncode, logs.stdout) == (0, text), logs.stderr
        show = cli(env, "show", str(job_id))
        assert show.returncode == 0, show.stderr
        assert f"   StdOut={path}\n" in show.stdout and f"   StdErr={path}\n" in show.stdout, show.stdout
    assert sorted(p.name for p in workdir.iterdir()) == sorted(expected.values())  # nothing under Slurm's ids
