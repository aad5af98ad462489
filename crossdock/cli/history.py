"""``crossdock history``: sacct over the hot jobs and the history records finished jobs leave."""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone
from typing import Any, Callable, Iterable, Optional

import typer

from crossdock.cli import slurmfmt
from crossdock.cli.common import fail, gateway, print_json
from crossdock.cli.views import Filter, csv, select
from crossdock.queue.durations import parse_duration
from crossdock.queue.errors import NoSuchJob
from crossdock.queue.models import Attempt, Job, JobSpec
from crossdock.queue.states import JobState

# sacct's named times (src/common/parse_time.c)
_NAMED = {"midnight": 0, "today": 0, "noon": 12, "elevenses": 11, "fika": 15, "teatime": 16}
_FORMS = ("YYYY-MM-DD[THH:MM[:SS]], MMDD[YY][-HH:MM[:SS]], MM/DD[/YY][-HH:MM[:SS]], MM.DD[.YY][-HH:MM[:SS]],"
          " HH:MM[:SS][AM|PM], now[+-N[units]], today, midnight, noon, elevenses, fika, teatime")


def parse_time(text: str, option: str, now: datetime | None = None) -> datetime:
    """A time as sacct's -S/-E read it, in local time; ValueError names the option and the forms."""
    now = (now or datetime.now(timezone.utc)).astimezone()
    t = text.strip().lower()
    m = re.fullmatch(r"now(?:([+-])(\d+[a-z]*))?", t)
    if m:
        if m.group(1) is None:
            return now
        try:
            delta = timedelta(seconds=parse_duration(m.group(2)) or 0)
        except ValueError as exc:
            raise ValueError(f"{option}: {exc}") from None
        return now + delta if m.group(1) == "+" else now - delta
    if t in _NAMED:
        return now.replace(hour=_NAMED[t], minute=0, second=0, microsecond=0)
    m = re.fullmatch(r"(\d{1,2}):(\d{2})(?::(\d{2}))?\s*(am|pm)?", t)
    if m:
        hour = int(m.group(1)) % 12 + (12 if m.group(4) == "pm" else 0) if m.group(4) else int(m.group(1))
        return _checked(option, text, lambda: now.replace(hour=hour, minute=int(m.group(2)),
                                                          second=int(m.group(3) or 0), microsecond=0))
    m = re.fullmatch(r"(\d{4})-(\d{2})-(\d{2})(?:t(\d{2}):(\d{2})(?::(\d{2}))?)?", t)
    if m:
        y, mo, d = int(m.group(1)), int(m.group(2)), int(m.group(3))
        rest = m.groups()[3:]
    else:
        m = (re.fullmatch(r"(\d{2})(\d{2})(\d{2})?(?:-(\d{2}):(\d{2})(?::(\d{2}))?)?", t)
             or re.fullmatch(r"(\d{1,2})([/.])(\d{1,2})(?:\2(\d{2,4}))?(?:-(\d{2}):(\d{2})(?::(\d{2}))?)?", t))
        if not m:
            raise ValueError(f"{option}: invalid time {text!r}; accepted: {_FORMS}")
        g = [x for i, x in enumerate(m.groups()) if not (len(m.groups()) == 7 and i == 1)]
        mo, d = int(g[0]), int(g[1])
        y = now.year if g[2] is None else (int(g[2]) + 2000 if len(g[2]) == 2 else int(g[2]))
        rest = g[3:]
    hh, mm, ss = (int(x) if x else 0 for x in rest)
    return _checked(option, text, lambda: datetime(y, mo, d, hh, mm, ss).astimezone())


def _checked(option: str, text: str, make: Callable[[], datetime]) -> datetime:
    try:
        return make()
    except ValueError as exc:
        raise ValueError(f"{option}: invalid time {text!r} ({exc}); accepted: {_FORMS}") from None


def record_job(rec: dict[str, Any]) -> Job:
    """A history record as a Job (what it keeps; the script and environment are gone)."""
    def when(key: str) -> datetime | None:
        return datetime.fromisoformat(rec[key]) if rec.get(key) else None

    spec = JobSpec.model_construct(name=rec.get("name", ""), user=rec.get("user", ""), workdir=rec.get("workdir"))
    return Job.model_construct(
        id=rec["id"], spec=spec, state=JobState(rec["state"]), reason=rec.get("reason", "None"),
        attempts=rec.get("attempts", 0), array_job_id=rec.get("array_job_id"), array_task_id=rec.get("array_task_id"),
        queue=rec.get("queue", ""), priority_class=rec.get("priority_class", ""), priority=0,
        backend=rec.get("backend"), pool=rec.get("pool"), backend_ref=rec.get("backend_ref"),
        nodes=rec.get("nodes", []), gpu_ids=rec.get("gpu_ids", []), alloc_cpu_milli=rec.get("alloc_cpu_milli", 0),
        alloc_mem_mib=rec.get("alloc_mem_mib", 0), exit_code=rec.get("exit_code"), signal=rec.get("signal"),
        max_rss_kib=rec.get("max_rss_kib"),
        past_attempts=[Attempt.model_validate(a) for a in rec.get("past_attempts", [])],
        submit_time=when("submit_time"), start_time=when("start_time"), end_time=when("end_time"),
        eligible_time=None, explanation="")


def attempt_rows(job: Job) -> list[tuple[int, Job]]:
    """sacct -D's rows of a job: each attempt a requeue ended, then its last, as (attempt, job) with
    that attempt's state, reason, placement, exit and times; the id, spec and count are the job's."""
    past = [(a.attempt, job.model_copy(update={**a.model_dump(exclude={"attempt"}), "past_attempts": []}))
            for a in job.past_attempts]
    return past + [(job.attempts, job)]


def rows(jobs: Iterable[Job], duplicates: bool) -> list[tuple[int, Job]]:
    """The rows of ``history``: one per job (its last attempt), or with ``duplicates`` one per attempt."""
    return [r for j in jobs for r in (attempt_rows(j) if duplicates else [(j.attempts, j)])]


def _cpus(j: Job) -> str:
    return str(j.alloc_cpu_milli // 1000 if j.alloc_cpu_milli else j.spec.cpus_per_task * j.spec.ntasks)


# name -> (width, value); sacct's field names, matched case-insensitively.
SACCT: dict[str, tuple[int, Callable[[Job], str]]] = {
    "JobID": (12, lambda j: j.display_id),
    "JobIDRaw": (12, lambda j: str(j.id)),
    "JobName": (10, lambda j: j.spec.display_name()),
    "Partition": (10, lambda j: j.queue),
    "Account": (10, lambda j: ""),
    "User": (9, lambda j: j.spec.user),
    "QOS": (10, lambda j: j.priority_class),
    "State": (10, lambda j: str(j.state)),  # an attempt's row may be REQUEUED, sacct's, not a JobState
    "Reason": (20, lambda j: j.reason or "None"),
    "ExitCode": (8, slurmfmt.exit_code),
    "Elapsed": (10, lambda j: slurmfmt.clock(slurmfmt.run_seconds(j))),
    "ElapsedRaw": (10, lambda j: str(slurmfmt.run_seconds(j))),
    "Timelimit": (10, lambda j: slurmfmt.duration(j.spec.time_limit_seconds)),
    "Submit": (19, lambda j: slurmfmt.iso(j.submit_time, "Unknown")),
    "Start": (19, lambda j: slurmfmt.iso(j.start_time, "Unknown")),
    "End": (19, lambda j: slurmfmt.iso(j.end_time, "Unknown")),
    "MaxRSS": (10, lambda j: "" if j.max_rss_kib is None else f"{j.max_rss_kib}K"),  # blank where not reported
    "NNodes": (8, lambda j: str(len(j.nodes) if j.nodes else j.spec.nodes)),
    "NCPUS": (10, _cpus),
    "AllocCPUS": (10, _cpus),
    "ReqMem": (10, lambda j: f"{j.alloc_mem_mib}M" if j.alloc_mem_mib else slurmfmt.memory(j)),
    "NodeList": (15, lambda j: slurmfmt.nodelist(j) or "None assigned"),
    "WorkDir": (30, lambda j: j.spec.workdir or ""),
    "Backend": (10, lambda j: j.backend or ""),
    "Pool": (10, lambda j: j.pool or ""),
    "Restarts": (8, lambda j: str(max(0, j.attempts - 1))),
}
_LOWER = {k.lower(): k for k in SACCT}
DEFAULT_FIELDS = "JobID,JobName,Partition,Account,AllocCPUS,State,ExitCode"
LONG_FIELDS = ("JobID,JobIDRaw,JobName,Partition,MaxRSS,AllocCPUS,Elapsed,ElapsedRaw,Timelimit,State,ExitCode,"
               "Reason,NNodes,NCPUS,ReqMem,NodeList,Submit,Start,End,Restarts")
"""``-l/--long``: sacct's long listing, less the fields crossdock does not keep (steps, VM sizes, I/O)."""
NUMBERS = ("JobIDRaw", "ElapsedRaw", "NNodes", "NCPUS", "AllocCPUS", "Restarts")
"""Fields that ``--json`` writes as numbers."""
UNITS = {"K": 0, "M": 1, "G": 2, "T": 3, "P": 4}
_MEMORY_KIB: dict[str, Callable[[Job], int | None]] = {
    "MaxRSS": lambda j: j.max_rss_kib,
    "ReqMem": lambda j: 1024 * (j.alloc_mem_mib or j.spec.mem_per_node_mib or j.spec.mem_per_cpu_mib or 0)}


def in_units(kib: int | None, unit: str) -> str:
    """sacct's ``--units``: a size in KiB in the unit asked for, two decimals (``30.64M``)."""
    return "" if kib is None else f"{kib / 1024 ** UNITS[unit]:.2f}{unit}"


def value(name: str, job: Job, units: str | None = None) -> str:
    """Field ``name`` of ``job`` as sacct prints it; sizes in ``units`` when given."""
    if units is not None and name in _MEMORY_KIB:
        return in_units(_MEMORY_KIB[name](job), units)
    return SACCT[name][1](job)


def json_row(j: Job, attempt: int | None = None) -> dict[str, Any]:
    """One job (or one of its attempts) for ``--json``: sacct's fields by name (counts as numbers),
    plus crossdock's; ``attempt`` is the row's attempt (default the job's last)."""
    row: dict[str, Any] = {n: SACCT[n][1](j) for n in SACCT}
    row.update({n: int(row[n]) for n in NUMBERS})
    return row | {"id": j.id, "attempt": j.attempts if attempt is None else attempt, "backend": j.backend,
                  "exit_status": j.exit_code, "signal": j.signal, "max_rss_kib": j.max_rss_kib}


def parse_fields(text: str) -> list[tuple[str, int]]:
    """``--format`` as sacct reads it: ``Name`` or ``Name%width`` (``%-width`` left), comma separated."""
    out = []
    for part in csv(text):
        name, _, width = part.partition("%")
        key = _LOWER.get(name.lower())
        if key is None:
            raise ValueError(f"--format: unknown field {name!r}; known: {','.join(SACCT)}")
        if width and not re.fullmatch(r"-?\d+", width):
            raise ValueError(f"--format: width {width!r} of {name} is not a number")
        out.append((key, int(width) if width else SACCT[key][0]))
    return out


def table(jobs: Iterable[Job], fields: list[tuple[str, int]], header: bool = True,
          parsable: str | None = None, units: str | None = None) -> list[str]:
    """sacct's lines: fixed columns (JobID left-justified, the rest right; a value too long ends
    in '+'), or with ``parsable`` ('|' or '|+', -p/-P) delimited."""
    def cell(name: str, width: int, value: str, mark: str = "+") -> str:
        w = abs(width)
        if len(value) > w:  # a header is cut, a value cut ends in '+'
            value = value[:w - len(mark)] + mark
        return value.ljust(w) if name == "JobID" or width < 0 else value.rjust(w)

    rows = [[value(n, j, units) for n, _ in fields] for j in jobs]
    lines = []
    if parsable is not None:
        end = "|" if parsable == "|+" else ""
        if header:
            lines.append("|".join(n for n, _ in fields) + end)
        lines += ["|".join(r) + end for r in rows]
        return lines
    if header:
        lines.append(" ".join(cell(n, w, n, "") for n, w in fields))
        lines.append(" ".join("-" * abs(w) for _, w in fields))
    lines += [" ".join(cell(n, w, v) for (n, w), v in zip(fields, r)) for r in rows]
    return lines


def collect(f: Filter, start: datetime | None, end: datetime) -> list[Job]:
    """The jobs sacct's window keeps: those not ended before ``start`` and submitted by ``end``
    (every job with -j), from the hot keys and from the history records, by id."""
    def overlaps(j: Job) -> bool:
        if f.ids is not None:
            return True
        ended_before = j.end_time is not None and start is not None and j.end_time < start
        return not ended_before and (j.submit_time is None or j.submit_time <= end)

    hot = {j.id: j for j in select(Filter(states=f.states, users=f.users, queues=f.queues, names=f.names))
           if overlaps(j)} if f.ids is None else {}
    wanted_ids: set[int] = set()
    if f.ids is not None:
        gw = gateway()
        for ref in f.ids:  # hot jobs resolve; expired ones only by their plain id
            try:
                hot.update({j.id: j for j in gw.jobs(gw.resolve(ref)) if f.keeps(j)})
            except NoSuchJob:  # expired: found in the history below
                pass
            if ref.isascii() and ref.isdigit():
                wanted_ids.add(int(ref))
    for rec in gateway().history(None if start is None or f.ids else start.timestamp()):
        j = record_job(rec)
        if j.id in hot:
            continue
        if f.ids is not None and j.id not in wanted_ids and j.array_job_id not in wanted_ids:
            continue
        if f.keeps(j) and overlaps(j):
            hot[j.id] = j
    return [hot[i] for i in sorted(hot)]


def history(
    starttime: Optional[str] = typer.Option(None, "--starttime", "-S", help="jobs not ended before this"
                                            " (default: midnight today; every job with -j)"),
    endtime: Optional[str] = typer.Option(None, "--endtime", "-E", help="jobs submitted by this (default: now)"),
    states: Optional[str] = typer.Option(None, "--state", "-s", help="comma list of states (CD,F or COMPLETED,...)"),
    jobs: Optional[str] = typer.Option(None, "--jobs", "-j", help="comma list of job ids"),
    user: Optional[str] = typer.Option(None, "--user", "-u", help="comma list of users"),
    me: bool = typer.Option(False, "--me", help="only my jobs (the default unless admin)"),
    allusers: bool = typer.Option(False, "--allusers", "-a", help="every user's jobs"),
    queue_name: Optional[str] = typer.Option(None, "--partition", "-r", help="comma list of queues or pools"),
    name: Optional[str] = typer.Option(None, "--name", help="comma list of job names"),
    fmt: Optional[str] = typer.Option(None, "--format", "-o", help=f"sacct fields (default {DEFAULT_FIELDS})"),
    allocations: bool = typer.Option(False, "--allocations", "-X", help="one row per job (crossdock has no steps)"),
    noheader: bool = typer.Option(False, "--noheader", "-n"),
    parsable: bool = typer.Option(False, "--parsable", "-p", help="'|' after every field"),
    parsable2: bool = typer.Option(False, "--parsable2", "-P", help="'|' between fields"),
    long: bool = typer.Option(False, "--long", "-l", help="sacct -l: the long field list"),
    duplicates: bool = typer.Option(False, "--duplicates", "-D", help="a row per attempt of a requeued job"
                                    " (the same JobID; default: its last attempt)"),
    units: Optional[str] = typer.Option(None, "--units", help="MaxRSS and ReqMem in K, M, G, T or P"),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Finished and current jobs, like sacct: time window, states, exit codes, elapsed time."""
    del allocations  # every row is an allocation: crossdock keeps no job steps
    if units is not None and units.upper() not in UNITS:
        fail(f"--units: unknown unit {units!r}; use K, M, G, T or P")
    try:
        now = datetime.now(timezone.utc)
        start = parse_time(starttime, "--starttime", now) if starttime else (
            None if jobs else parse_time("midnight", "--starttime", now))
        end = parse_time(endtime, "--endtime", now) if endtime else now
        fields = parse_fields(fmt or (LONG_FIELDS if long else DEFAULT_FIELDS))
        wanted = slurmfmt.parse_states(states, "--state") if states else None
    except ValueError as exc:
        fail(str(exc))
    users = set(csv(user)) | ({gateway().who.name} if me else set())
    if not users and not allusers and not gateway().who.admin:
        users = {gateway().who.name}  # sacct shows a user their own jobs unless asked for more
    f = Filter(ids=csv(jobs) or None, states=wanted, users=users or None, queues=set(csv(queue_name)) or None,
               names=set(csv(name)) or None)
    selected = rows(collect(f, start, end), duplicates)
    if as_json:
        print_json([json_row(j, attempt) for attempt, j in selected])
        return
    for line in table((j for _, j in selected), fields, header=not noheader,
                      parsable="|+" if parsable else "|" if parsable2 else None,
                      units=units.upper() if units else None):
        print(line)
