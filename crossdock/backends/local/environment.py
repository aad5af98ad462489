"""Slurm-compatible environment and output-file patterns for jobs run on this machine."""

from __future__ import annotations

import os
import re
import socket
import sys
from pathlib import Path

from crossdock.queue.models import Job
from crossdock.jobtools import BIN_DIR
from crossdock.queue.environ import exportable
from crossdock.queue.slurm_env import NO_ARRAY_TASK, batch_environment

_PATTERN = re.compile(r"%(\d*)([%jJAaxuNnts])")


def expand(pattern: str, job: Job, node: str) -> str:
    """Expand sbatch filename patterns: %j %J %A %a %x %u %N %n %t %s and %%; ``%3a`` zero-pads."""

    def sub(m: re.Match[str]) -> str:
        width, code = m.group(1), m.group(2)
        if code == "%":
            return "%"
        value = {
            "j": job.id, "J": job.id, "x": job.spec.display_name(), "u": job.spec.user or "nobody",
            "N": node.split(".")[0], "n": 0, "t": 0, "s": "batch",
            "A": job.array_job_id if job.array_job_id is not None else job.id,
            "a": job.array_task_id if job.array_task_id is not None else NO_ARRAY_TASK,
        }[code]
        text = str(value)
        return text.zfill(int(width)) if width and text.isdigit() else text

    return _PATTERN.sub(sub, pattern)


def output_paths(job: Job, node: str) -> tuple[Path, Path]:
    """stdout and stderr files, relative to the job's working directory, with Slurm's defaults."""
    workdir = Path(job.spec.workdir or os.getcwd())
    default = "slurm-%A_%a.out" if job.array_task_id is not None else "slurm-%j.out"
    out = workdir / expand(job.spec.stdout or default, job, node)
    err = workdir / expand(job.spec.stderr, job, node) if job.spec.stderr else out
    return out, err


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
