"""One #SBATCH script with srun, two tasks on one node and ``%x-%j`` output gives the same lines
on the local backend (crossdock's srun and scontrol) and on the real local Slurm cluster
(Slurm's own): the runtime a script sees is Slurm's on both."""

from __future__ import annotations

from pathlib import Path

import pytest

from crossdock import service
from crossdock.queue.sbatch import build_spec
from crossdock.queue.states import JobState
from tests.integration.test_e2e_slurm import slurm_cluster_env, slurm_crossdock  # noqa: F401 - fixtures

SCRIPT = """#!/bin/sh
#SBATCH --job-name=parity
#SBATCH --ntasks=2
#SBATCH --ntasks-per-node=2
#SBATCH --output=%x-%j.out
srun sh -c 'echo "task $SLURM_PROCID/$SLURM_NTASKS local $SLURM_LOCALID node $SLURM_NODEID step $SLURM_STEP_ID"'
srun -n 1 sh -c 'echo "one $SLURM_PROCID/$SLURM_NTASKS step $SLURM_STEP_ID"'
echo "batch ntasks=$SLURM_NTASKS per-node=$SLURM_NTASKS_PER_NODE nodes=$SLURM_JOB_NUM_NODES" \\
     "tasks-per-node=$SLURM_TASKS_PER_NODE procid=$SLURM_PROCID name=$SLURM_JOB_NAME"
echo "hosts $(scontrol show hostnames "$SLURM_JOB_NODELIST" | wc -l | tr -d ' ')"
"""
EXPECTED = sorted([
    "task 0/2 local 0 node 0 step 0", "task 1/2 local 1 node 0 step 0", "one 0/1 step 1",
    "batch ntasks=2 per-node=2 nodes=1 tasks-per-node=2 procid=0 name=parity", "hosts 1",
])


def _run(c, workdir: Path, backend: str) -> tuple[int, list[str]]:
    sub = build_spec([], script_text=SCRIPT, script_path=str(workdir / "parity.sh"))
    job, = service.submit(c.rt, [sub.spec.model_copy(update={"workdir": str(workdir)})])
    done = c.wait(job.id, timeout=120)
    assert (done.state, done.backend) == (JobState.COMPLETED, backend), done
    out, = workdir.glob(f"parity-{job.id}.out")  # %x-%j: crossdock's id on both
    # srun's own notices on stderr ("srun: Job N step creation temporarily disabled, retrying", when
    # the node is still busy starting the batch step) are Slurm's diagnostics, not the script's output
    return job.id, sorted(line for line in out.read_text().splitlines() if not line.startswith("srun: "))


@pytest.mark.redis
@pytest.mark.celery
def test_local_backend_gives_slurms_output(cluster, tmp_path):
    job_id, lines = _run(cluster, tmp_path, "local")
    assert lines == EXPECTED
    assert not list(Path("/tmp").glob(f"crossdock-steps-{job_id}-*")), "srun's step counter outlived the job"


@pytest.mark.slurm
@pytest.mark.redis
@pytest.mark.celery
def test_slurm_gives_the_same_output(slurm_crossdock, jobs_dir):  # noqa: F811 - the fixture
    workdir = jobs_dir / "parity"
    workdir.mkdir(mode=0o777)
    workdir.chmod(0o777)  # jobs run as the cluster's user
    assert _run(slurm_crossdock, workdir, "slurm")[1] == EXPECTED
