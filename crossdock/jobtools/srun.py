"""``srun`` inside a job crossdock runs itself: launch a step's tasks on this node and wait.

Reads the job's allocation from the batch step's variables (``SLURM_NTASKS``,
``SLURM_NTASKS_PER_NODE``, ``SLURM_JOB_NUM_NODES``, ``SLURM_JOB_NODELIST``,
``SLURM_CPUS_PER_TASK``, ``SLURM_CPUS_ON_NODE``, ``SLURM_NODEID``), lays out the step
(``-n``, ``-N``, ``--ntasks-per-node``, ``-c``; srun's defaults are the job's) as Slurm's block
distribution does, and starts this node's share of the tasks, each with its ``SLURM_PROCID``,
``SLURM_LOCALID``, ``SLURM_NODEID`` and ``SLURM_STEP_ID``. On Kubernetes every worker pod runs
the batch script, so each worker's srun starts its own node's tasks. Exits with the highest
exit code of the tasks (128 + N for a task killed by signal N); SIGTERM, SIGINT, SIGHUP,
SIGUSR1/2 and SIGCONT are passed to every task. Options that change nothing on one node
(``--mpi``, ``--cpu-bind``, ``--exclusive``...) are accepted and ignored.
"""

from __future__ import annotations

import sys
from pathlib import Path

if __name__ == "__main__" and not __package__:  # run as a file by bin/srun
    sys.path[0] = str(Path(__file__).resolve().parents[2])  # the directory that holds crossdock

import argparse
import fcntl
import os
import signal
import subprocess
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import IO

from crossdock.queue.hostlist import HostlistError, expand_hostlist
from crossdock.queue.slurm_env import first_task, step_environment, task_counts

FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2, signal.SIGCONT)
IGNORED_WITH_VALUE = ("--mpi", "--cpu-bind", "--cpu_bind", "--export", "--mem", "--mem-per-cpu", "--mem-per-gpu",
                      "--gpus-per-task", "--gpus", "--gres", "--distribution", "--gpu-bind", "--hint",
                      "--job-name", "--time", "--wait", "--accel-bind", "--propagate", "--output", "--error",
                      "--input", "--kill-on-bad-exit", "--cpus-per-gpu", "--gpus-per-node", "--signal")
IGNORED_FLAGS = ("--exclusive", "--overlap", "--unbuffered", "--quiet", "--verbose", "--no-kill", "--whole")


class SrunError(Exception):
    """A step that cannot be laid out on the job's allocation; the message is srun's own style."""


@dataclass(frozen=True)
class Step:
    counts: list[int]
    nodes: list[str]
    cpus_per_task: int


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="srun", allow_abbrev=False,
                                description="Run a job step's tasks (crossdock's srun, for jobs crossdock runs).",
                                epilog="Also accepted and ignored here: " + " ".join((*IGNORED_WITH_VALUE, *IGNORED_FLAGS)))
    p.add_argument("-n", "--ntasks", type=int)
    p.add_argument("-N", "--nodes", type=int)
    p.add_argument("--ntasks-per-node", "--tasks-per-node", type=int, dest="ntasks_per_node")
    p.add_argument("-c", "--cpus-per-task", type=int, dest="cpus_per_task")
    p.add_argument("-l", "--label", action="store_true", help="prefix each output line with its task's rank")
    for opt in IGNORED_WITH_VALUE:
        short = {"--job-name": ["-J"], "--time": ["-t"], "--wait": ["-W"], "--distribution": ["-m"],
                 "--output": ["-o"], "--error": ["-e"], "--input": ["-i"]}.get(opt, [])
        p.add_argument(*short, opt, dest=f"ignored{opt}", nargs="?" if opt == "--kill-on-bad-exit" else None,
                      help=argparse.SUPPRESS)
    for opt in IGNORED_FLAGS:
        short = {"--unbuffered": ["-u"], "--quiet": ["-Q"], "--verbose": ["-v"]}.get(opt, [])
        p.add_argument(*short, opt, dest=f"ignored{opt}", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("-K", dest="ignored-K", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("command", nargs=argparse.REMAINDER)
    return p


def _int(env: Mapping[str, str], name: str, default: int) -> int:
    try:
        return int(env.get(name, "") or default)
    except ValueError:
        raise SrunError(f"{name}={env[name]!r} is not a number; run srun inside a crossdock job") from None


def plan(args: argparse.Namespace, env: Mapping[str, str]) -> Step:
    """The step's layout on the job's allocation (srun's defaults are the job's own)."""
    job_nnodes = _int(env, "SLURM_JOB_NUM_NODES", 1)
    try:
        nodes = expand_hostlist(env.get("SLURM_JOB_NODELIST", "")) or [env.get("SLURMD_NODENAME", "localhost")]
    except HostlistError as exc:
        raise SrunError(f"SLURM_JOB_NODELIST: {exc}") from None
    cpus_per_task = args.cpus_per_task or _int(env, "SLURM_CPUS_PER_TASK", 1)
    explicit = args.ntasks is not None or args.nodes is not None or args.ntasks_per_node is not None
    per_node = args.ntasks_per_node or (None if explicit else _int(env, "SLURM_NTASKS_PER_NODE", 0) or None)
    nnodes = args.nodes or (min(job_nnodes, args.ntasks) if args.ntasks else job_nnodes)
    ntasks = args.ntasks or (per_node * nnodes if per_node and explicit else
                             (nnodes if args.nodes else _int(env, "SLURM_NTASKS", 1)))
    for name, value in (("--ntasks", ntasks), ("--nodes", nnodes), ("--cpus-per-task", cpus_per_task)):
        if value < 1:
            raise SrunError(f"{name}={value}: give a number of at least 1")
    if nnodes > job_nnodes:
        raise SrunError(f"Only allocated {job_nnodes} nodes asked for {nnodes}")
    counts = task_counts(ntasks, nnodes, per_node)
    if sum(counts) < ntasks:
        raise SrunError(f"{ntasks} tasks do not fit {nnodes} nodes at --ntasks-per-node={per_node}")
    cpus_on_node = _int(env, "SLURM_CPUS_ON_NODE", cpus_per_task * max(counts))
    if max(counts) * cpus_per_task > cpus_on_node:
        raise SrunError(f"Unable to create step for job {env.get('SLURM_JOB_ID', '?')}: More processors requested"
                        f" than permitted ({max(counts)} tasks x {cpus_per_task} CPUs on a node with {cpus_on_node})")
    return Step(counts, nodes[:nnodes], cpus_per_task)


def steps_file(env: Mapping[str, str], uid: int, session: int) -> str:
    """The step counter of one job attempt run by ``uid`` in ``session`` (the local backend starts
    each job in a session of its own and removes the file when the job ends; a pod has its own /tmp)."""
    name = f"crossdock-steps-{env.get('SLURM_JOB_ID', '0')}-{env.get('CROSSDOCK_ATTEMPT', '0')}-{uid}-{session}"
    return os.path.join(env.get("TMPDIR") or "/tmp", name)


def next_step_id(env: Mapping[str, str]) -> int:
    """0, 1, 2... for the job's successive sruns."""
    fd = os.open(steps_file(env, os.getuid(), os.getsid(0)), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        text = os.read(fd, 32).decode() or "0"
        step = int(text) if text.isdigit() else 0
        os.lseek(fd, 0, os.SEEK_SET)
        os.ftruncate(fd, 0)
        os.write(fd, str(step + 1).encode())
        return step
    finally:
        os.close(fd)


def _relay(stream: IO[bytes], prefix: bytes, out: IO[bytes], lock: threading.Lock) -> None:
    for line in stream:
        with lock:
            out.write(prefix + line)
            out.flush()


def launch(step: Step, command: Sequence[str], env: Mapping[str, str], node_id: int, step_id: int,
           label: bool = False) -> int:
    """Start this node's tasks of the step, wait for all; the highest exit code."""
    if node_id >= len(step.counts):
        return 0  # this worker holds no task of the step
    start = first_task(step.counts, node_id)
    procs: list[subprocess.Popen] = []
    relays: list[threading.Thread] = []
    lock = threading.Lock()

    def forward(signum: int, _frame: object) -> None:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signum)

    previous = {s: signal.signal(s, forward) for s in FORWARDED}
    try:
        for local_id in range(step.counts[node_id]):
            task_env = step_environment(env, step_id=step_id, counts=step.counts, nodes=step.nodes,
                                        node_id=node_id, local_id=local_id, cpus_per_task=step.cpus_per_task)
            pipe = subprocess.PIPE if label else None
            try:
                proc = subprocess.Popen(list(command), env=task_env, stdout=pipe, stderr=pipe)
            except OSError as exc:
                print(f"srun: error: execve(): {command[0]}: {exc.strerror}", file=sys.stderr)
                forward(signal.SIGTERM, None)
                for p in procs:
                    p.wait()
                return 2
            procs.append(proc)
            if label:
                prefix = f"{start + local_id}: ".encode()
                for stream, out in ((proc.stdout, sys.stdout.buffer), (proc.stderr, sys.stderr.buffer)):
                    t = threading.Thread(target=_relay, args=(stream, prefix, out, lock), daemon=True)
                    t.start()
                    relays.append(t)
        codes = [p.wait() for p in procs]
        for t in relays:
            t.join()
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    return max(128 - c if c < 0 else c for c in codes)


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if not args.command:
        print("srun: fatal: No command given to execute.", file=sys.stderr)
        return 1
    env = dict(os.environ)
    try:
        step = plan(args, env)
        node_id = _int(env, "SLURM_NODEID", 0)
    except SrunError as exc:
        print(f"srun: error: {exc}", file=sys.stderr)
        return 1
    return launch(step, args.command, env, node_id, next_step_id(env), label=args.label)


if __name__ == "__main__":
    sys.exit(main())
