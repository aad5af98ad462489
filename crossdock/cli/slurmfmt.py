"""Slurm's ways of writing jobs down: squeue's short states and ``--format`` specifiers, its
durations and times, and ``-t`` state lists. Pure functions over :class:`Job`; no I/O."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Callable, Iterable, Mapping

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


# --- durations and times --------------------------------------------------------------------

def duration(seconds: int | float | None, unlimited: str = "UNLIMITED") -> str:
    """Slurm's secs2time_str: M:SS, H:MM:SS, D-HH:MM:SS."""
    if seconds is None:
        return unlimited
    secs = max(0, int(seconds))
    d, rem = divmod(secs, 86400)
    h, rem = divmod(rem, 3600)
    m, s = divmod(rem, 60)
    if d:
        return f"{d}-{h:02d}:{m:02d}:{s:02d}"
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


def clock(seconds: int | float) -> str:
    """sacct's Elapsed: HH:MM:SS, D-HH:MM:SS past a day."""
    secs = max(0, int(seconds))
    d, rem = divmod(secs, 86400)
    h, rem = divmod(rem, 3600)
    m, s = divmod(rem, 60)
    return f"{d}-{h:02d}:{m:02d}:{s:02d}" if d else f"{h:02d}:{m:02d}:{s:02d}"


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


def compress(hosts: Iterable[str]) -> str:
    """Slurm's hostlist form: cpu1,cpu2,cpu3,gpu7 -> cpu[1-3],gpu7 (zero padding kept)."""
    groups: dict[tuple[str, int], list[int]] = {}
    plain: list[str] = []
    for h in hosts:
        m = re.fullmatch(r"(.*?)(\d+)", h)
        if m is None:
            plain.append(h)
        else:
            groups.setdefault((m.group(1), len(m.group(2)) if m.group(2).startswith("0") else 0), []).append(int(m.group(2)))
    out = list(dict.fromkeys(plain))
    for (prefix, pad), nums in groups.items():
        nums = sorted(set(nums))
        runs, start = [], nums[0]
        for a, b in zip(nums, nums[1:] + [None]):
            if b != a + 1:
                runs.append(f"{start:0{pad}d}" if start == a else f"{start:0{pad}d}-{a:0{pad}d}")
                start = b
        out.append(f"{prefix}{runs[0]}" if len(runs) == 1 and "-" not in runs[0] else f"{prefix}[{','.join(runs)}]")
    return ",".join(out)


def nodelist(job: Job) -> str:
    return compress(job.nodes) if job.nodes else ""


def where(job: Job) -> str:
    """squeue's NODELIST(REASON): the nodes once placed, else the reason in parentheses."""
    if job.state is JobState.PENDING or not job.nodes:
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
    ``12_[3-10]``, where that array's first such task stands; everything else as it is."""
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
            labels[j.id] = f"{j.array_job_id}_[{format_array(t.array_task_id for t in group)}]"
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
    "E": ("DEPENDENCY", lambda j, c: "(null)" if j.spec.dependency is None else ",".join(
        f"{d.type.value}:{d.job_id}" for d in j.spec.dependency.deps)),
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
    "t": ("ST", lambda j, c: short_state(j.state)),
    "T": ("STATE", lambda j, c: j.state.value),
    "u": ("USER", lambda j, c: j.spec.user),
    "V": ("SUBMIT_TIME", lambda j, c: iso(j.submit_time)),
    "x": ("EXC_NODES", lambda j, c: ",".join(j.spec.exclude)),
    "y": ("NICE", lambda j, c: str(j.spec.nice)),
    "Y": ("SCHEDNODES", lambda j, c: c.nominated.get(j.id, "(null)")),
    "Z": ("WORK_DIR", lambda j, c: j.spec.workdir or ""),
}

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
