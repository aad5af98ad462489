"""The ``SLURM_*`` variables a job sees, computed once for every backend that is not Slurm.

sbatch documents what a batch script finds in its environment ("OUTPUT ENVIRONMENT
VARIABLES" in ``man sbatch``) and srun what each task of a step finds ("OUTPUT ENVIRONMENT
VARIABLES" in ``man srun``). The local backend and the Kubernetes manifests both build them
here, from the job record and the few facts only the backend knows (where the job runs, who
submitted it from where), so a script behaves alike on each; the Slurm backend gets them from
Slurm itself. Pure: no I/O.

Tasks are laid out as Slurm's default block distribution lays them: ``--ntasks-per-node``
tasks on each node (the last one gets what is left), else ``ntasks`` shared evenly with the
first nodes taking one more.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from crossdock.queue.hostlist import compress_hostlist

if TYPE_CHECKING:  # srun imports this module and should not pay for pydantic
    from crossdock.queue.models import Job

NO_ARRAY_TASK = 4294967294
"""What Slurm's ``%a`` gives outside an array (NO_VAL - 1)."""


def task_counts(ntasks: int, nnodes: int, ntasks_per_node: int | None = None) -> list[int]:
    """Tasks per node of a step of ``ntasks`` over ``nnodes`` nodes (block distribution)."""
    if ntasks_per_node:
        counts, left = [], ntasks
        for _ in range(nnodes):
            counts.append(max(min(ntasks_per_node, left), 0))
            left -= counts[-1]
        return counts
    base, extra = divmod(ntasks, nnodes)
    return [base + (1 if i < extra else 0) for i in range(nnodes)]


def counts_text(counts: Sequence[int]) -> str:
    """Slurm's repeated-count form: ``[2, 2, 2, 1]`` -> ``2(x3),1``."""
    parts: list[str] = []
    i = 0
    while i < len(counts):
        j = i
        while j + 1 < len(counts) and counts[j + 1] == counts[i]:
            j += 1
        parts.append(str(counts[i]) if j == i else f"{counts[i]}(x{j - i + 1})")
        i = j + 1
    return ",".join(parts)


def first_task(counts: Sequence[int], node_id: int) -> int:
    """The global rank (SLURM_PROCID) of the first task on node ``node_id``."""
    return sum(counts[:node_id])


def batch_environment(job: Job, *, nodes: Sequence[str], node: str, submit_dir: str, submit_host: str,
                      node_id: int | str = 0, cluster: str = "crossdock", uid: int | None = None,
                      gpu_indexes: Sequence[str] = ()) -> dict[str, str]:
    """What sbatch sets for the batch step of ``job`` running on ``node`` (one of ``nodes``).

    ``node`` and ``node_id`` may be placeholders the backend fills in later (Kubernetes'
    ``$(VAR)`` references); everything else is plain text."""
    spec = job.spec
    nodelist = compress_hostlist(list(nodes) or [node])
    nnodes = spec.nodes
    counts = task_counts(spec.ntasks, nnodes, spec.ntasks_per_node)
    env: dict[str, object] = {
        "SLURM_JOB_ID": job.id, "SLURM_JOBID": job.id, "SLURM_JOB_NAME": spec.display_name(),
        "SLURM_JOB_USER": spec.user or "nobody", "SLURM_CLUSTER_NAME": cluster,
        "SLURM_JOB_PARTITION": job.pool or job.queue or "crossdock", "SLURM_JOB_QOS": job.priority_class or "normal",
        "SLURM_SUBMIT_DIR": submit_dir, "SLURM_SUBMIT_HOST": submit_host,
        "SLURM_NTASKS": spec.ntasks, "SLURM_NPROCS": spec.ntasks,
        "SLURM_TASKS_PER_NODE": counts_text(counts),
        "SLURM_CPUS_PER_TASK": spec.cpus_per_task, "SLURM_CPUS_ON_NODE": spec.cpus_per_node(),
        "SLURM_JOB_CPUS_PER_NODE": counts_text([spec.cpus_per_node()] * nnodes),
        "SLURM_NNODES": nnodes, "SLURM_JOB_NUM_NODES": nnodes,
        "SLURM_NODELIST": nodelist, "SLURM_JOB_NODELIST": nodelist, "SLURMD_NODENAME": node,
        "SLURM_TOPOLOGY_ADDR": node, "SLURM_TOPOLOGY_ADDR_PATTERN": "node",
        # the batch step is task 0 of node 0 (on Kubernetes every worker runs it: its own node)
        "SLURM_PROCID": 0, "SLURM_LOCALID": 0, "SLURM_NODEID": node_id, "SLURM_GTIDS": 0,
        "SLURM_PRIO_PROCESS": 0, "SLURM_RESTART_COUNT": max(job.attempts - 1, 0),
        "SLURM_EXPORT_ENV": spec.export,
    }
    if spec.ntasks_per_node is not None:  # as sbatch: only when asked for
        env["SLURM_NTASKS_PER_NODE"] = spec.ntasks_per_node
    if uid is not None:
        env["SLURM_JOB_UID"] = uid
    if spec.mem_per_node_mib is not None:
        env["SLURM_MEM_PER_NODE"] = spec.mem_per_node_mib
    if spec.mem_per_cpu_mib is not None:
        env["SLURM_MEM_PER_CPU"] = spec.mem_per_cpu_mib
    if spec.time_limit_seconds is not None:
        env["SLURM_TIME_LIMIT"] = -(-spec.time_limit_seconds // 60)  # Slurm's minutes, rounded up
    if job.start_time is not None:
        env["SLURM_JOB_START_TIME"] = int(job.start_time.timestamp())
        if spec.time_limit_seconds is not None:
            env["SLURM_JOB_END_TIME"] = int(job.start_time.timestamp()) + spec.time_limit_seconds
    env.update(_array(job))
    env.update(_gpus(job, gpu_indexes))
    return {k: str(v) for k, v in env.items()}


def _array(job: Job) -> dict[str, object]:
    array = job.spec.array
    if job.array_job_id is None or job.array_task_id is None or array is None:
        return {}
    ids = array.task_ids
    steps = {b - a for a, b in zip(ids, ids[1:])}
    return {"SLURM_ARRAY_JOB_ID": job.array_job_id, "SLURM_ARRAY_TASK_ID": job.array_task_id,
            "SLURM_ARRAY_TASK_COUNT": len(ids), "SLURM_ARRAY_TASK_MIN": min(ids),
            "SLURM_ARRAY_TASK_MAX": max(ids), "SLURM_ARRAY_TASK_STEP": steps.pop() if len(steps) == 1 else 1}


def _gpus(job: Job, gpu_indexes: Sequence[str]) -> dict[str, object]:
    spec = job.spec
    req = spec.gpu_request()
    env: dict[str, object] = {}
    if req is not None:
        env["SLURM_GPUS_ON_NODE"] = spec.gpus_per_node()
        name = {"task": "SLURM_GPUS_PER_TASK", "node": "SLURM_GPUS_PER_NODE", "job": "SLURM_GPUS"}[req.per]
        count = f"{req.type}:{req.count}" if req.type else req.count
        env[name] = count
    if gpu_indexes:
        indexes = ",".join(gpu_indexes)
        env.update({"CUDA_VISIBLE_DEVICES": indexes, "SLURM_JOB_GPUS": indexes, "GPU_DEVICE_ORDINAL": indexes})
    elif req is None:
        env["CUDA_VISIBLE_DEVICES"] = ""
    return env


def step_environment(env: Mapping[str, str], *, step_id: int, counts: Sequence[int], nodes: Sequence[str],
                     node_id: int, local_id: int, cpus_per_task: int) -> dict[str, str]:
    """What srun sets for task ``local_id`` on node ``node_id`` of step ``step_id`` (laid out as
    ``counts`` over ``nodes``), on top of the batch step's ``env``."""
    ntasks = sum(counts)
    start = first_task(counts, node_id)
    nodelist = compress_hostlist(list(nodes))
    out = dict(env)
    out.update({k: str(v) for k, v in {
        "SLURM_STEP_ID": step_id, "SLURM_STEPID": step_id,
        "SLURM_PROCID": start + local_id, "SLURM_LOCALID": local_id, "SLURM_NODEID": node_id,
        "SLURM_GTIDS": ",".join(str(start + i) for i in range(counts[node_id])),
        "SLURM_NTASKS": ntasks, "SLURM_NPROCS": ntasks, "SLURM_STEP_NUM_TASKS": ntasks,
        "SLURM_STEP_NUM_NODES": len(counts), "SLURM_STEP_NODELIST": nodelist,
        "SLURM_STEP_TASKS_PER_NODE": counts_text(counts), "SLURM_TASKS_PER_NODE": counts_text(counts),
        "SLURM_CPUS_PER_TASK": cpus_per_task, "SLURMD_NODENAME": nodes[node_id],
    }.items()})
    return out
