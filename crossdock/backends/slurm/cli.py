"""Drive Slurm through its command-line tools (sbatch, scontrol, sinfo --json, scancel, sacct).

Every call is one process with an argument list (never a shell). Job listings dump every job
slurmctld holds (``squeue --json`` ignores its filters in 22.05 anyway), so filtering
happens in the caller, once per cycle.
"""

from __future__ import annotations

import json
import os
import pwd
import re
import signal
import subprocess
import tempfile
from collections.abc import Mapping, Sequence

from crossdock.backends.slurm.driver import (
    UNAVAILABLE_PATTERNS,
    SlurmError,
    SlurmJob,
    SlurmNode,
    SlurmPartition,
    SlurmUnavailable,
    SubmitRejected,
    SubmitRequest,
    WillRun,
    parse_gpu_gres,
    parse_node,
    tres_memory_mib,
)
from crossdock.backends.slurm.states import expand_array_tasks, node_names, parse_exit_code
from crossdock.queue.environ import exportable

DEFAULT_TIMEOUT_S = 30.0


def signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def sbatch_options(req: SubmitRequest) -> list[str]:
    """The sbatch long options for ``req`` (the script itself goes on stdin or as a file)."""
    opts = [
        f"--job-name={req.name}",
        f"--comment={req.comment}",
        f"--chdir={req.workdir}",
        f"--nodes={req.nodes}" + (f"-{req.nodes_max}" if req.nodes_max else ""),
        f"--ntasks={req.ntasks}",
        f"--cpus-per-task={req.cpus_per_task}",
        "--open-mode=append",  # a requeued job keeps every run's output
        "--requeue" if req.requeue else "--no-requeue",
        f"--export={export_value(req.export, req.env)}",
    ]
    optional = {
        "--partition": req.partition,
        "--nodelist": ",".join(req.nodelist),
        "--exclude": ",".join(req.exclude),
        "--ntasks-per-node": req.ntasks_per_node,
        "--mem": f"{req.mem_per_node_mib}M" if req.mem_per_node_mib is not None else None,
        "--mem-per-cpu": f"{req.mem_per_cpu_mib}M" if req.mem_per_cpu_mib is not None else None,
        "--gres": ",".join(req.gres),
        "--gpus": req.gpus,
        "--gpus-per-task": req.gpus_per_task,
        "--time": req.time_limit_minutes,
        "--array": req.array,
        "--dependency": req.dependency,
        "--output": req.stdout,
        "--error": req.stderr,
        "--nice": req.nice or None,
        "--constraint": req.constraint,
        "--signal": req.signal,
        "--time-min": req.time_min_minutes,
        "--begin": req.begin,
        "--deadline": req.deadline,
        "--reservation": req.reservation,
        "--licenses": req.licenses,
    }
    opts += [f"{flag}={value}" for flag, value in optional.items() if value not in (None, "")]
    if req.hold:
        opts.append("--hold")
    if req.exclusive:
        opts.append("--exclusive")
    return opts + list(req.native)


def export_value(export: str, env: Mapping[str, str]) -> str:
    """sbatch's ``--export``: values travel in sbatch's own environment, names on the line.

    Passing names rather than ``NAME=value`` keeps values with commas intact.
    """
    if export.upper() == "ALL" or not env:
        return export
    names = ",".join(sorted(env))
    return names if export.upper() == "NONE" else f"{export},{names}"


_CONFIG_LINE = re.compile(r"^(\w+)\s+= (\d+) sec\b", re.M)
"""A line of ``scontrol show config`` that gives seconds (``MessageTimeout          = 10 sec``)."""


class CliDriver:
    name = "cli"

    def __init__(self, env: Mapping[str, str] | None = None, timeout_s: float = DEFAULT_TIMEOUT_S):
        # sbatch's environment is the job's with --export=ALL: no secrets (and no SLURM_JWT: with
        # it set, srun inside jobs switches to auth/jwt and fails)
        self.env = exportable(dict(os.environ if env is None else env))
        self.timeout_s = timeout_s
        try:
            self.user = pwd.getpwuid(os.geteuid()).pw_name
        except KeyError:
            self.user = str(os.geteuid())

    # --- plumbing ---------------------------------------------------------------------------

    def _run(self, argv: list[str], *, stdin: str | None = None, env: Mapping[str, str] | None = None,
             stderr: bool = False) -> str:
        """Run one tool; its stdout (``stderr=True``: its stderr, where ``sbatch --test-only`` answers)."""
        try:
            done = subprocess.run(
                argv,
                input=stdin,
                env=dict(env or self.env),
                capture_output=True,
                text=True,
                timeout=self.timeout_s,
            )
        except subprocess.TimeoutExpired:
            raise SlurmUnavailable(f"{argv[0]} timed out after {self.timeout_s:.0f}s") from None
        except FileNotFoundError:
            raise SlurmUnavailable(f"{argv[0]} is not installed (crossdock dev slurm up installs it)") from None
        if done.returncode < 0:
            # Killed by a signal, not an answer: sbatch dies of SIGPIPE when munged goes away
            # mid-request. Whether slurmctld took the job is unknown, so this is "unavailable":
            # a retry looks for the job's tag before it submits again.
            raise SlurmUnavailable(f"{argv[0]} was killed by {signal_name(-done.returncode)}"
                                   f"{': ' + done.stderr.strip() if done.stderr.strip() else ''}")
        if done.returncode != 0:
            message = (done.stderr or done.stdout).strip()
            if UNAVAILABLE_PATTERNS.search(message):
                raise SlurmUnavailable(f"{argv[0]}: {message}")
            raise SlurmError(f"{' '.join(argv[:2])} failed ({done.returncode}): {message}")
        return done.stderr if stderr else done.stdout

    # --- SlurmDriver ------------------------------------------------------------------------

    def owner_options(self, user: str) -> list[str]:
        """``--uid``/``--gid`` of the job's owner when this process is root (sbatch allows them to
        root and SlurmUser alone): slurmctld records the job as the owner's and slurmd runs it
        under the owner's uid, as the REST driver does with the owner's JWT. Not root, or the
        owner is this process's user: nothing (the job is this user's)."""
        if os.geteuid() != 0 or not user or user == self.user:
            return []
        try:
            entry = pwd.getpwnam(user)
        except KeyError:
            raise SubmitRejected(f"the job's owner {user!r} has no passwd entry; Slurm runs jobs as their owner") from None
        return [f"--uid={entry.pw_uid}", f"--gid={entry.pw_gid}"]

    def submit(self, request: SubmitRequest) -> int:
        argv = ["sbatch", "--parsable", *self.owner_options(request.user), *sbatch_options(request)]
        env = {**self.env, **request.env} if request.env else self.env
        try:
            if request.args:
                with tempfile.NamedTemporaryFile("w", prefix="crossdock-", suffix=".sh") as f:
                    f.write(request.script)
                    f.flush()
                    out = self._run([*argv, f.name, *request.args], env=env)
            else:
                out = self._run(argv, stdin=request.script, env=env)
        except SlurmUnavailable:
            raise
        except SlurmError as exc:
            hint = ("; this sbatch has no --uid (newer Slurm): run jobs as their owners with the REST driver's"
                    " per-user tokens (CROSSDOCK_SLURM_DRIVER=rest)" if "--uid" in str(exc) and "unrecognized" in str(exc)
                    else "")
            raise SubmitRejected(f"{exc}{hint}") from None
        # --parsable prints "jobid" or "jobid;cluster"
        return int(out.strip().splitlines()[-1].split(";")[0])

    def jobs(self) -> list[SlurmJob]:
        # `scontrol show job -o` rather than `squeue --json`: the same jobs (both ignore
        # filters), text exit codes, and about a seventh of the time and bytes.
        out = self._run(["scontrol", "show", "job", "-o"])
        return [parse_scontrol_job(line) for line in out.splitlines() if line.startswith("JobId=")]

    def own_jobs(self, comment_prefix: str) -> list[SlurmJob]:
        """The jobs whose comment starts with ``comment_prefix``: the same listing, but only those
        lines are parsed (after a large run slurmctld holds thousands of finished jobs)."""
        out = self._run(["scontrol", "show", "job", "-o"])
        needle = f" Comment={comment_prefix}"
        return [parse_scontrol_job(line) for line in out.splitlines() if needle in line and line.startswith("JobId=")]

    def nodes(self) -> list[SlurmNode]:
        data = json.loads(self._run(["sinfo", "--json"]))
        return [parse_node(n) for n in data.get("nodes", [])]

    def partitions(self) -> list[SlurmPartition]:
        out = self._run(["scontrol", "show", "partition", "-o"])
        parts = []
        for line in out.splitlines():
            fields = _key_values(line)
            if "PartitionName" not in fields:
                continue
            parts.append(
                SlurmPartition(
                    name=fields["PartitionName"],
                    nodes=tuple(node_names(fields.get("Nodes"))),
                    priority_tier=int(fields.get("PriorityTier", "1")),
                    default=fields.get("Default") == "YES",
                    state=fields.get("State", "UP"),
                )
            )
        return parts

    def signal(self, job_id: str, signal: str) -> None:
        self._run(["scancel", "--full", f"--signal={signal}", job_id])

    def cancel(self, job_id: str) -> None:
        self._run(["scancel", job_id])

    def requeue(self, job_id: str) -> None:
        self._run(["scontrol", "requeue", job_id])

    def hold(self, job_id: str) -> None:
        self._run(["scontrol", "hold", job_id])

    def release(self, job_id: str) -> None:
        self._run(["scontrol", "release", job_id])

    def update_nodes(self, names: Sequence[str], state: str) -> None:
        self._run(["scontrol", "update", f"nodename={','.join(names)}", f"state={state}"])

    def batch_launched(self, job_id: str) -> bool | None:
        # sstat exits 0 whatever happens: a step it found is printed, anything else goes to stderr
        # (the node unreachable, the job gone); a node that has no such step prints nothing at all.
        try:
            done = subprocess.run(["sstat", "--noheader", "--parsable2", "--format=JobID", f"--jobs={job_id}.batch"],
                                  env=dict(self.env), capture_output=True, text=True, timeout=self.timeout_s)
        except (subprocess.TimeoutExpired, FileNotFoundError):
            return None
        if done.stdout.strip():
            return True
        return False if done.returncode == 0 and not done.stderr.strip() else None

    def launch_timeout_s(self) -> float:
        conf = dict(_CONFIG_LINE.findall(self._run(["scontrol", "show", "config"])))
        try:
            return float(conf["BatchStartTimeout"]) + float(conf["MessageTimeout"])
        except KeyError as exc:
            raise SlurmError(f"scontrol show config: no {exc.args[0]}") from None

    def will_run(self, request: SubmitRequest) -> WillRun:
        argv = ["sbatch", "--test-only", *sbatch_options(request)]
        out = self._run(argv, stdin=request.script, env={**self.env, **request.env}, stderr=True)
        m = _WILL_RUN.search(out)
        if m is None:
            raise SlurmError(f"sbatch --test-only: no start time in {out.strip()!r}")
        return WillRun(m["start"], tuple(node_names(m["nodes"])), m["partition"])

    # --- accounting (only with slurmdbd) ----------------------------------------------------

    def accounting_enabled(self) -> bool:
        for line in self._run(["scontrol", "show", "config"]).splitlines():
            key, _, value = line.partition("=")
            if key.strip() == "AccountingStorageType":
                return value.strip() != "accounting_storage/none"
        return False

    def history(self, job_ids: list[str]) -> list[SlurmJob]:
        """Finished jobs slurmctld has forgotten, from ``sacct -P`` (its text exit codes are right
        on 22.05, where ``sacct --json`` reports SUCCESS for a job that exited 7)."""
        if not job_ids:
            return []
        out = self._run(
            ["sacct", "-P", "-n", "-X", "-j", ",".join(job_ids), "-o", SACCT_FIELDS]
        )
        return parse_sacct(out)


_WILL_RUN = re.compile(r"to start at (?P<start>\S+) using \d+ processors on nodes (?P<nodes>\S+) in partition (?P<partition>\S+)")
"""``sbatch: Job 7 to start at 2026-12-01T11:50:42 using 8 processors on nodes cpu1 in partition cpu``"""

SACCT_FIELDS = "JobID,JobName,State,ExitCode,Reason,Partition,NodeList,User"


def parse_sacct(text: str) -> list[SlurmJob]:
    """Records of ``sacct -P -n -X -o`` :data:`SACCT_FIELDS`."""
    jobs = []
    for line in text.splitlines():
        cols = line.split("|")
        if len(cols) != 8:
            continue
        job_id, name, state, exit_code, reason, partition, nodelist, user = cols
        code, signal = parse_exit_code(exit_code or "0:0")
        base, _, task = job_id.partition("_")
        jobs.append(
            SlurmJob(
                job_id=int(base),
                state=state.split()[0],
                reason=reason or "None",
                exit_code=code,
                signal=signal,
                name=name,
                user=user,
                partition=partition,
                nodes=tuple(node_names(nodelist)),
                array_job_id=int(base) if task.isdigit() else None,
                array_task_id=int(task) if task.isdigit() else None,
            )
        )
    return jobs


_FIELD = re.compile(r"\s+(?=[A-Za-z][A-Za-z0-9_:/]*=)")


def _key_values(line: str) -> dict[str, str]:
    """``scontrol show … -o`` output → dict. A value may hold spaces (``Comment=not ours``);
    a new field starts where a space is followed by ``Key=``."""
    out = {}
    for item in _FIELD.split(line.strip()):
        key, sep, value = item.partition("=")
        if sep:
            out[key] = value.strip()
    return out


def _null(value: str | None) -> str:
    return "" if value in (None, "(null)", "None assigned") else value


def parse_scontrol_job(line: str) -> SlurmJob:
    """One line of ``scontrol show job -o``."""
    f = _key_values(line)
    exit_code, signal = parse_exit_code(f.get("ExitCode", "0:0"))
    array_job_id = int(f["ArrayJobId"]) if f.get("ArrayJobId", "").isdigit() else None
    task_text = f.get("ArrayTaskId", "")
    task_id = int(task_text) if task_text.isdigit() else None
    pending = tuple(expand_array_tasks(task_text)) if array_job_id is not None and task_id is None else ()
    nodes = node_names(f.get("NodeList"))
    gpus: dict[str, int] = {}
    # Requested GPUs: what a running job holds (per node × nodes, plus per job).
    for key, times in (("TresPerNode", max(len(nodes), 1)), ("TresPerJob", 1)):
        for kind, count in parse_gpu_gres(_null(f.get(key)).replace("gres:", "")).items():
            gpus[kind] = gpus.get(kind, 0) + count * times
    return SlurmJob(
        job_id=int(f["JobId"]),
        state=f.get("JobState", ""),
        reason=f.get("Reason", "None"),
        exit_code=exit_code,
        signal=signal,
        name=f.get("JobName", ""),
        comment=_null(f.get("Comment")),
        user=f.get("UserId", "").split("(", 1)[0],
        partition=_null(f.get("Partition")),
        nodes=tuple(nodes),
        cpus=int(f.get("NumCPUs", "0").split("-")[0] or 0),
        # TRES holds the allocation once the job runs (the request before).
        memory_mib=tres_memory_mib(f.get("TRES", "")) if nodes else 0,
        gpus=gpus,
        restarts=int(f.get("Restarts", "0") or 0),
        array_job_id=array_job_id,
        array_task_id=task_id,
        array_pending_tasks=pending,
    )
