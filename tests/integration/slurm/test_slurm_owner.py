"""A Slurm job runs as its owner: through the REST driver's per-user JWTs (``scontrol token``),
the ``rest-unix`` driver's slurmrestd run as the owner (local auth on pipes the owner owns), and
the CLI driver's ``sbatch --uid/--gid`` when the service runs as root."""

from __future__ import annotations

import os
import subprocess

import pytest
from slurm_helpers import wait_file, wait_terminal

from crossdock.backends.slurm import SlurmBackend
from crossdock.queue.states import JobState
from tests.integration.local.test_users import SECOND, second_user


@pytest.mark.parametrize("driver", ["rest", "rest-unix", "cli"])
def test_a_job_of_another_user_runs_under_that_users_uid(slurm_cluster, make_job, jobs_dir, driver):
    assert os.geteuid() == 0, "the service submits for others as root (sbatch --uid, scontrol token)"
    t2 = second_user()
    uid, gid = t2.pw_uid, t2.pw_gid
    backend = SlurmBackend.from_env(slurm_cluster, driver=driver)
    job = make_job(command=["sh", "-c", "id -u; id -g"], user=SECOND, partition="cpu")
    ref = backend.submit(job)
    assert wait_terminal(backend, ref, timeout=60).state is JobState.COMPLETED
    out = jobs_dir / f"{job.id}.out"
    assert wait_file(out, "\n").split() == [str(uid), str(gid)]
    assert out.stat().st_uid == uid
    recorded = [j for j in backend.driver.jobs() if str(j.job_id) == str(ref)]
    assert [j.user for j in recorded] == [SECOND], recorded  # slurmctld's record names the owner
    shown = subprocess.run(["scontrol", "show", "job", str(ref)], env=slurm_cluster, capture_output=True,
                           text=True, check=True).stdout
    assert f"UserId={SECOND}({uid})" in shown, shown


@pytest.mark.parametrize("driver", ["rest", "rest-unix", "cli"])
def test_an_owner_with_no_passwd_entry_is_refused_with_its_name(slurm_cluster, make_job, driver):
    from crossdock.queue.ports import SubmitFailed

    backend = SlurmBackend.from_env(slurm_cluster, driver=driver)
    with pytest.raises(SubmitFailed, match="no-such-user-x"):
        backend.submit(make_job(command=["true"], user="no-such-user-x", partition="cpu"))
