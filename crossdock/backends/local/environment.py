"""Slurm-compatible environment and output-file patterns for jobs run on this machine."""

from __future__ import annotations

import os
import re
import socket
from pathlib import Path

from crossdock.queue.models import Job
from crossdock.queue.environ import exportable

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
            "a": job.array_task_id if job.array_task_id is not None else 4294967294,
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
                    home: str | None = None) -> dict[str, str]:
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
    nodes = ",".join(job.nodes) or node
    slurm = {
        "SLURM_JOB_ID": job.id, "SLURM_JOBID": job.id, "SLURM_JOB_NAME": spec.display_name(),
        "SLURM_JOB_USER": spec.user, "SLURM_CPUS_PER_TASK": spec.cpus_per_task, "SLURM_NTASKS": spec.ntasks,
        "SLURM_NPROCS": spec.ntasks, "SLURM_NNODES": spec.nodes, "SLURM_JOB_NUM_NODES": spec.nodes,
        "SLURM_NODELIST": nodes, "SLURM_JOB_NODELIST": nodes, "SLURMD_NODENAME": node,
        "SLURM_JOB_PARTITION": job.pool or job.queue, "SLURM_JOB_QOS": job.priority_class,
        "SLURM_SUBMIT_DIR": spec.workdir or os.getcwd(), "SLURM_RESTART_COUNT": max(job.attempts - 1, 0),
        "SLURM_CLUSTER_NAME": "crossdock", "SLURM_CPUS_ON_NODE": spec.cpus_per_node(),
        "CROSSDOCK_JOB_ID": job.id, "CROSSDOCK_ATTEMPT": job.attempts,
    }
    if spec.mem_per_node_mib is not None:
        slurm["SLURM_MEM_PER_NODE"] = spec.mem_per_node_mib
    if spec.mem_per_cpu_mib is not None:
        slurm["SLURM_MEM_PER_CPU"] = spec.mem_per_cpu_mib
    if spec.time_limit_seconds is not None:
        slurm["SLURM_TIME_LIMIT"] = -(-spec.time_limit_seconds // 60)  # Slurm's minutes, rounded up
    if job.array_job_id is not None and job.array_task_id is not None and spec.array is not None:
        ids = spec.array.task_ids
        slurm.update({"SLURM_ARRAY_JOB_ID": job.array_job_id, "SLURM_ARRAY_TASK_ID": job.array_task_id,
                      "SLURM_ARRAY_TASK_COUNT": len(ids), "SLURM_ARRAY_TASK_MIN": min(ids),
                      "SLURM_ARRAY_TASK_MAX": max(ids)})
    env.update({k: str(v) for k, v in slurm.items()})
    if job.gpu_ids:
        indexes = ",".join(g.rsplit(":", 1)[-1] for g in job.gpu_ids)
        env.update({"CUDA_VISIBLE_DEVICES": indexes, "SLURM_JOB_GPUS": indexes, "GPU_DEVICE_ORDINAL": indexes})
    elif spec.gpu_request() is None:
        env["CUDA_VISIBLE_DEVICES"] = ""
    return env
