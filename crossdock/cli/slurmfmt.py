"""Slurm's ways of writing jobs down: squeue's short states and ``--format`` specifiers, its
durations and times, and ``-t`` state lists. Pure functions over :class:`Job`; no I/O."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Callable, Iterable, Mapping

from crossdock.queue.durations import clock, duration
from crossdock.queue.hostlist import compress_hostlist
from crossdock.queue.models import Job
from crossdock.queue.states import JobState

# squeue's compact codes (src/common/slurm_protocol_defs.c job_state_string_compact). SCHEDULED
# (placed, dispatch in flight) is Slurm's CONFIGURING: resources allocated, not yet running.
SHORT = {JobState.PENDING: "PD", JobState.SCHEDULED: "CF", JobState.RUNNING: "R", JobState.COMPLETED: "CD",
         JobState.FAILED: "F", JobState.CANCELLED: "CA", JobState.TIMEOUT: "TO", JobState.OUT_OF_MEMORY: "OOM",
         JobState.NODE_FAIL: "NF", JobState.PREEMPTED: "PR"}
# Slurm states crossdock never reaches: accepted in -t (they match nothing), so scripts run unchanged.
SLURM_ONLY = {"BF": "BOOT_FAIL", "CG": "COMPLETING", "DL": "DEADLINE", "RD": "RESV_DEL_HOLD", "RF": "REQUEUE_FED",
              "RH": "REQUEUE_HOLD", "RQ": "REQUEUED", "RS": "RESIZING", "RV": "REVOKED", "SI": "SIGNALING",
              "SE": "SPECIAL_EXIT", "SO": "STAGE_OUT", "ST": "STOPPED", "S": "SUSPENDED"}
_BY_NAME: dict[str, JobState | None] = {**{s.value: s for s in JobState}, **{c: s for s, c in SHORT.items()},
                                        "CONFIGURING": JobState.SCHEDULED,
                                        **{c: None for c in SLURM_ONLY}, **{n: None for n in SLURM_ONLY.values()}}


def short_state(state: JobState) -> str:
    return SHORT[state]


def in_backend_queue(job: Job) -> bool:
    """Handed to its backend and waiting in the backend's own queue (a task of a 1,000-task
    Slurm array that Slurm has not started): SCHEDULED with the backend's pending reason
    (``Priority``, ``Resources``…), where a job whose dispatch is in flight has none."""
    return job.state is JobState.SCHEDULED and job.reason not in ("", "None")


def job_state(job: Job) -> JobState:
    """The state squeue would show: PENDING for a job waiting in its backend's own queue."""
    return JobState.PENDING if in_backend_queue(job) else job.state


def parse_states(text: str, option: str = "--states") -> set[JobState] | None:
    """``-t`` as squeue reads it: a comma list of long or short names, any case; ``all`` gives None
    (every state). Raises ValueError naming the first unknown name."""
    wanted: set[JobState] = set()
    for raw in text.split(","):
        name = raw.strip().upper()
        if name == "ALL":
            return None
        if name not in _BY_NAME:
            raise ValueError(f"{option}: unknown state {raw.strip()!r}; accepted: "
                             f"{', '.join(f'{s.value} ({SHORT[s]})' for s in JobState)}, all")
        if _BY_NAME[name] is not None:
            wanted.add(_BY_NAME[name])  # type: ignore[arg-type]
    return wanted


# --- durations and times (durations: crossdock.queue.durations) -------------------------------

def iso(t: datetime | None, missing: str = "N/A") -> str:
    """Slurm's time format: local time, 2026-12-01T12:00:00."""
    return missing if t is None else t.astimezone().strftime("%Y-%m-%dT%H:%M:%S")


def run_seconds(job: Job, now: datetime | None = None) -> int:
    if job.start_time is None:
        return 0
    end = job.end_time or now or datetime.now(timezone.utc)
    return max(0, int((end - job.start_time).total_seconds()))


def exit_code(job: Job) -> str:
    """sacct's ExitCode: the exit status and the signal that ended it, ``code:signal``."""
    return f"{job.exit_code or 0}:{job.signal or 0}"


def memory(job: Job) -> str:
    """squeue's MIN_MEMORY: per node (M) or, with --mem-per-cpu, per CPU (shown as Slurm does, M)."""
    spec = job.spec
    mib = spec.mem_per_node_mib if spec.mem_per_node_mib is not None else spec.mem_per_cpu_mib
    return "0" if mib is None else (f"{mib // 1024}G" if mib and mib % 1024 == 0 else f"{mib}M")


def tres_per_node(job: Job) -> str:
    spec = job.spec
    parts = [f"gres/{g.name}" + (f":{g.type}" if g.type else "") + f":{g.count}" for g in spec.gres]
    if spec.gpus is not None:
        parts.append("gres/gpu" + (f":{spec.gpus.type}" if spec.gpus.type else "") + f":{spec.gpus.count}")
    return ",".join(parts) or "N/A"


def nodelist(job: Job) -> str:
    """The job's nodes in Slurm's hostlist form (``n[01-02,10]``): :mod:`crossdock.queue.hostlist`
    is crossdock's one hostlist implementation, expanding and compressing, checked against
    ``scontrol show hostnames``/``hostlist`` (``tests/integration/slurm/test_hostlist_oracle.py``)."""
    return compress_hostlist(job.nodes) if job.nodes else ""


_WAITING_DEPENDENCY = {"Dependency": "(unfulfilled)", "DependencyNeverSatisfied": "(failed)"}


def dependency(job: Job) -> str:
    """scontrol's and squeue's Dependency: the dependencies still to be met, as Slurm shows them
    (``afterok:12(unfulfilled)``, ``afterok:12(failed)``); ``(null)`` once they are met (the job
    left PENDING, or waits for something else). A held job's are shown as given."""
    dep = job.spec.dependency
    if dep is None or job.state is not JobState.PENDING:
        return "(null)"
    suffix = _WAITING_DEPENDENCY.get(job.reason)
    if suffix is None and job.reason not in ("JobHeldUser", "JobHeldAdmin"):
        return "(null)"
    parts = []
    for d in dep.deps:
        if d.job_id is None:
            parts.append(d.type.value)
            continue
        target = f"{d.job_id}_{d.array_task}" if d.array_task is not None else str(d.job_id)
        parts.append(f"{d.type.value}:{target}" + (f"+{d.delay_minutes}" if d.delay_minutes else "") + (suffix or ""))
    return ("?" if dep.combine == "OR" else ",").join(parts)


def where(job: Job) -> str:
    """squeue's NODELIST(REASON): the nodes once placed, else the reason in parentheses."""
    if job_state(job) is JobState.PENDING or not job.nodes:
        return f"({job.reason or 'None'})"
    return nodelist(job)


# --- squeue --format -------------------------------------------------------------------------

@dataclass
class Context:
    """What some fields need beyond the job: the time now, expected starts, nominated nodes."""

    now: datetime = field(default_factory=lambda: datetime.now(timezone.utc))
    expected_start: Mapping[int, datetime] = field(default_factory=dict)
    nominated: Mapping[int, str] = field(default_factory=dict)
    labels: Mapping[int, str] = field(default_factory=dict)
    """A row's JOBID when it stands for several array tasks (12_[3-10])."""


def collapse_arrays(jobs: Iterable[Job]) -> tuple[list[Job], dict[int, str]]:
    """squeue's and sacct's default: an array's pending tasks with the same reason as one row,
    ``12_[3-10]`` (``12_[3-10%2]`` for an array throttled to 2 running), where that array's
    first such task stands; everything else as it is."""
    from crossdock.queue.sbatch_formats import format_array

    jobs = list(jobs)
    groups: dict[tuple[int, str], list[Job]] = {}
    for j in jobs:
        if j.array_job_id is not None and j.array_task_id is not None and j.state is JobState.PENDING:
            groups.setdefault((j.array_job_id, j.reason), []).append(j)
    out, labels, skip = [], {}, set()
    for j in jobs:
        if j.id in skip:
            continue
        group = groups.get((j.array_job_id, j.reason)) if j.state is JobState.PENDING else None
        if group and len(group) > 1:
            skip.update(t.id for t in group)
            throttle = j.spec.array.max_running if j.spec.array is not None else None
            labels[j.id] = f"{j.array_job_id}_[{format_array((t.array_task_id for t in group), throttle)}]"
        out.append(j)
    return out, labels


def _start(job: Job, ctx: Context) -> str:
    return iso(job.start_time or ctx.expected_start.get(job.id))


def _time_left(job: Job, ctx: Context) -> str:
    limit = job.spec.time_limit_seconds
    if limit is None:
        return "UNLIMITED"
    return duration(limit - run_seconds(job, ctx.now)) if not job.state.terminal else "0:00"


def _array_job(job: Job) -> str:
    return str(job.array_job_id if job.array_job_id is not None else job.id)


Field = Callable[[Job, Context], str]
SQUEUE: dict[str, tuple[str, Field]] = {
    "a": ("ACCOUNT", lambda j, c: "(null)"),
    "A": ("JOBID", lambda j, c: str(j.id)),
    "b": ("TRES_PER_NODE", lambda j, c: tres_per_node(j)),
    "C": ("CPUS", lambda j, c: str(j.spec.cpus_per_task * j.spec.ntasks)),
    "c": ("MIN_CPUS", lambda j, c: str(j.spec.cpus_per_task)),
    "D": ("NODES", lambda j, c: str(len(j.nodes) if j.nodes else j.spec.nodes)),
    "e": ("END_TIME", lambda j, c: iso(j.end_time)),
    "E": ("DEPENDENCY", lambda j, c: dependency(j)),
    "F": ("ARRAY_JOB_ID", lambda j, c: _array_job(j)),
    "i": ("JOBID", lambda j, c: c.labels.get(j.id, j.display_id)),
    "j": ("NAME", lambda j, c: j.spec.display_name()),
    "K": ("ARRAY_TASK_ID", lambda j, c: "N/A" if j.array_task_id is None else str(j.array_task_id)),
    "l": ("TIME_LIMIT", lambda j, c: duration(j.spec.time_limit_seconds)),
    "L": ("TIME_LEFT", _time_left),
    "m": ("MIN_MEMORY", lambda j, c: memory(j)),
    "M": ("TIME", lambda j, c: duration(run_seconds(j, c.now))),
    "n": ("REQ_NODES", lambda j, c: ",".join(j.spec.nodelist)),
    "N": ("NODELIST", lambda j, c: nodelist(j)),
    "o": ("COMMAND", lambda j, c: j.spec.script_path or " ".join(j.spec.command or []) or "(null)"),
    "P": ("PARTITION", lambda j, c: j.queue),
    "q": ("QOS", lambda j, c: j.priority_class or "normal"),
    "Q": ("PRIORITY", lambda j, c: str(j.priority)),
    "r": ("REASON", lambda j, c: j.reason or "None"),
    "R": ("NODELIST(REASON)", lambda j, c: where(j)),
    "S": ("START_TIME", _start),
    "t": ("ST", lambda j, c: short_state(job_state(j))),
    "T": ("STATE", lambda j, c: job_state(j).value),
    "u": ("USER", lambda j, c: j.spec.user),
    "V": ("SUBMIT_TIME", lambda j, c: iso(j.submit_time)),
    "x": ("EXC_NODES", lambda j, c: ",".join(j.spec.exclude)),
    "y": ("NICE", lambda j, c: str(j.spec.nice)),
    "Y": ("SCHEDNODES", lambda j, c: c.nominated.get(j.id, "(null)")),
    "Z": ("WORK_DIR", lambda j, c: j.spec.workdir or ""),
}

FIELD_NAMES = {
    "account": "a", "arrayjobid": "F", "arraytaskid": "K", "command": "o", "cpus-per-task": "c",
    "cpuspertask": "c", "dependency": "E", "endtime": "e", "exclnodes": "x", "jobarrayid": "i", "jobid": "A",
    "mincpus": "c", "minmemory": "m", "name": "j", "nice": "y", "nodelist": "N", "numcpus": "C", "numnodes": "D",
    "partition": "P", "priority": "Q", "qos": "q", "reason": "r", "reasonlist": "R", "reqnodes": "n",
    "schednodes": "Y", "starttime": "S", "state": "T", "statecompact": "t", "submittime": "V", "timeleft": "L",
    "timelimit": "l", "timeused": "M", "tres-per-node": "b", "username": "u", "workdir": "Z",
}
"""squeue's ``-O/--Format`` names (``squeue --helpformat2``) of the ``-o`` letters crossdock has."""
_FIELD = re.compile(r"([A-Za-z-]+)(?::(\.?)(\d*)(.*))?")


def format_from_names(text: str) -> str:
    """``-O`` as squeue reads it (``jobid:.10,name:20,state``: a field, then ``:[.][size][suffix]``;
    20 columns, left-justified by default) as the ``-o`` string it stands for. ValueError names
    an unknown field."""
    out = []
    for item in text.split(","):
        m = _FIELD.fullmatch(item.strip())
        letter = FIELD_NAMES.get(m[1].lower()) if m else None
        if letter is None:
            raise ValueError(f"--Format: unknown field {item.strip()!r}; known: {', '.join(sorted(FIELD_NAMES))}")
        out.append(f"%{m[2] or ''}{m[3] or 20}{letter}" + (m[4] or "").replace("%", "%%"))
    return "".join(out)


DEFAULT = "%.18i %.9P %.8j %.8u %.2t %.10M %.6D %R"
LONG = "%.18i %.9P %.8j %.8u %.8T %.10M %.9l %.6D %R"
START = "%.18i %.9P %.8j %.8u %.2t %.19S %.6D %20Y %R"
_TOKEN = re.compile(r"%(%|([.-]?)(\d*)([A-Za-z]))")


@dataclass(frozen=True)
class Column:
    letter: str = ""  # "" for literal text
    width: int = 0
    right: bool = False
    text: str = ""


def parse_format(fmt: str) -> list[Column]:
    """squeue's ``-o`` string: ``%[.][width]letter`` (``.`` right-justifies; a width pads and
    truncates; ``-`` is accepted as printf's explicit left), other text as it is, ``%%`` a percent.
    Raises ValueError naming an unknown specifier."""
    cols: list[Column] = []
    pos = 0
    for m in _TOKEN.finditer(fmt):
        if m.start() > pos:
            cols.append(Column(text=fmt[pos:m.start()]))
        pos = m.end()
        if m.group(1) == "%":
            cols.append(Column(text="%"))
            continue
        letter = m.group(4)
        if letter not in SQUEUE:
            raise ValueError(f"--format: unknown field %{letter} in {fmt!r}; known: "
                             + " ".join(f"%{k}" for k in sorted(SQUEUE, key=str.lower)))
        cols.append(Column(letter, int(m.group(3) or 0), m.group(2) == "."))
    rest = fmt[pos:]
    if "%" in rest:
        raise ValueError(f"--format: a lone '%' in {fmt!r}; write %% for a percent sign")
    if rest:
        cols.append(Column(text=rest))
    return cols


def _fit(value: str, col: Column) -> str:
    if not col.width:
        return value
    value = value[:col.width]
    return value.rjust(col.width) if col.right else value.ljust(col.width)


def render(jobs: Iterable[Job], fmt: str, header: bool = True, ctx: Context | None = None) -> list[str]:
    """Lines as squeue prints them for ``fmt``: a header (unless ``header`` is False), then one per job."""
    cols = parse_format(fmt)
    ctx = ctx or Context()
    lines = []

    def line(values: Callable[[Column], str]) -> str:
        return "".join(c.text if not c.letter else _fit(values(c), c) for c in cols).rstrip()

    if header:
        lines.append(line(lambda c: SQUEUE[c.letter][0]))
    for j in jobs:
        lines.append(line(lambda c: SQUEUE[c.letter][1](j, ctx)))
    return lines
