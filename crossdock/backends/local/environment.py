"""Slurm-compatible environment and output-file patterns for jobs run on this machine."""

from __future__ import annotations

import os
import socket
import sys
from pathlib import Path

from crossdock.jobtools import BIN_DIR
from crossdock.queue import filenames
from crossdock.queue.environ import exportable
from crossdock.queue.models import Job
from crossdock.queue.slurm_env import batch_environment


def output_paths(job: Job, node: str) -> tuple[Path, Path]:
    """stdout and stderr files, relative to the job's working directory, with Slurm's defaults."""
    out, err = filenames.output_files(job, node, os.getcwd())
    return Path(out), Path(err)


DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"


def job_environment(job: Job, node: str | None = None, service_env: dict[str, str] | None = None,
                    home: str | None = None, uid: int | None = None) -> dict[str, str]:
    """What the job sees: the environment its submitter exported (stored at submit, as sbatch
    does; never the service's own, nor crossdock's secrets), plus Slurm's variables."""
    spec = job.spec
    node = node or socket.gethostname()
    env = exportable(spec.env, os.environ if service_env is None else service_env)
    env.setdefault("PATH", DEFAULT_PATH)
    if spec.user and not spec.user.isdigit():
        env.setdefault("USER", spec.user)
        env.setdefault("LOGNAME", spec.user)
    if home:
        env.setdefault("HOME", home)
    env.update(batch_environment(
        job, nodes=job.nodes or [node], node=node, submit_dir=spec.workdir or os.getcwd(),
        submit_host=spec.env.get("SLURM_SUBMIT_HOST") or node, uid=uid,
        gpu_indexes=[g.rsplit(":", 1)[-1] for g in job.gpu_ids]))
    env.update({"CROSSDOCK_JOB_ID": str(job.id), "CROSSDOCK_ATTEMPT": str(job.attempts),
                "CROSSDOCK_PYTHON": sys.executable})
    env["PATH"] = f"{BIN_DIR}{os.pathsep}{env['PATH']}"  # srun and scontrol first, as on a Slurm node
    return env
