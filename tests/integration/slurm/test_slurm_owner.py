"""A Slurm job runs as its owner through the REST driver's per-user JWTs (``scontrol token``)."""

from __future__ import annotations

import pwd
import subprocess

import pytest
from slurm_helpers import wait_file, wait_terminal

from crossdock.backends.slurm import SlurmBackend
from crossdock.queue.states import JobState

SECOND = "crossdock-t2"


def second_uid() -> int:
    try:
        return pwd.getpwnam(SECOND).pw_uid
    except KeyError:
        subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", SECOND],
                       check=False, capture_output=True)
        return pwd.getpwnam(SECOND).pw_uid


def test_a_job_of_another_user_runs_under_that_users_uid(slurm_cluster, make_job, jobs_dir):
    uid = second_uid()
    backend = SlurmBackend.from_env(slurm_cluster, driver="rest")
    job = make_job(command=["id", "-u"], user=SECOND, partition="cpu")
    ref = backend.submit(job)
    assert wait_terminal(backend, ref, timeout=60).state is JobState.COMPLETED
    out = jobs_dir / f"{job.id}.out"
    assert wait_file(out, "\n").strip() == str(uid)
    assert out.stat().st_uid == uid


def test_an_owner_slurm_cannot_issue_a_token_for_is_refused_with_its_name(slurm_cluster, make_job):
    from crossdock.queue.ports import SubmitFailed

    backend = SlurmBackend.from_env(slurm_cluster, driver="rest")
    with pytest.raises(SubmitFailed, match="no-such-user-x"):
        backend.submit(make_job(command=["true"], user="no-such-user-x", partition="cpu"))
