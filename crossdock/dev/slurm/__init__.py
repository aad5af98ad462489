"""A real multi-node Slurm 22.05 cluster on this machine, for tests, CI and benchmarks.

``up(dir)`` installs Debian's Slurm packages when they are missing, writes ``slurm.conf`` and
``gres.conf`` into ``dir``, creates fake GPU device files and starts munged, slurmctld, one
slurmd per node and two slurmrestd instances (unix socket with local auth, TCP with JWT). It
returns once every node is idle and writes ``dir/env`` with what a client needs::

    SLURM_CONF=...            SLURMRESTD_SOCKET=...   (local auth; requests run as user slurm)
    SLURMRESTD_URL=http://127.0.0.1:16820           SLURM_LOCAL_JWT=...  (token for user root)

The token is deliberately not called ``SLURM_JWT``: with that set, srun switches to auth/jwt
and fails. ``down(dir)`` cancels every job and stops each daemon by the PID in its pidfile.

Cluster: nodes cpu1, cpu2 (8 CPUs, 16 GB), gpu-a100-1 (16 CPUs, 8 fake A100), gpu-l4-1
(8 CPUs, 4 fake L4); partitions cpu (default), gpu-a100, gpu-l4 and high (those four nodes,
higher priority tier, preempts the others by requeue). No cgroups: a "GPU" job only gets
CUDA_VISIBLE_DEVICES.

Power saving: partition elastic, nodes elastic[1-3] (4 CPUs, 8 GB, ``State=CLOUD``), start
powered down. slurmctld's ResumeProgram (``etc/resume.sh``) starts a node's slurmd with ``-b``;
its SuspendProgram (``etc/suspend.sh``) stops it by its pidfile after ``SuspendTime`` (15 s) idle.
Nodes named in ``etc/resume-fail`` are left off by the ResumeProgram (a failed resume: DOWN after
``ResumeTimeout``, 30 s). Every other node and partition is excluded from power saving.

Modules: ``layout`` (nodes, partitions, every path and port), ``config`` (slurm.conf and
gres.conf text, the state directory), ``packages`` (apt), ``daemons`` (start, watch, stop),
``cluster`` (up, down, status), ``cli`` (the command line).
"""

from crossdock.dev.slurm.cli import app, main
from crossdock.dev.slurm.cluster import clear_jobs, down, issue_token, read_env, status, up
from crossdock.dev.slurm.config import CRED_EXPIRE_S, prepare, render_gres_conf, render_slurm_conf
from crossdock.dev.slurm.daemons import (
    OPENAPI_PLUGIN,
    READY_NODE_STATES,
    READY_TIMEOUT_S,
    node_states,
    start_controller,
    start_munged,
    start_restd,
    start_slurmd,
    stop_controller,
    wait_nodes_ready,
)
from crossdock.dev.slurm.layout import (
    NODES,
    PARTITIONS,
    RESTD_USER,
    ClusterError,
    Layout,
    NodeSpec,
    PartitionSpec,
    default_dir,
    default_port_base,
)
from crossdock.dev.slurm.packages import PACKAGES, ensure_packages, missing_packages

__all__ = [
    "CRED_EXPIRE_S", "NODES", "OPENAPI_PLUGIN", "PACKAGES", "PARTITIONS", "READY_NODE_STATES", "READY_TIMEOUT_S",
    "RESTD_USER", "ClusterError", "Layout", "NodeSpec", "PartitionSpec", "app", "default_dir", "default_port_base",
    "clear_jobs", "down", "ensure_packages", "issue_token", "main", "missing_packages", "node_states", "prepare",
    "read_env", "render_gres_conf", "render_slurm_conf", "start_controller", "start_munged", "start_restd",
    "start_slurmd", "status", "stop_controller", "up", "wait_nodes_ready",
]
