"""squeue, scontrol show job and sprio: which jobs a listing selects and how each is written."""

from __future__ import annotations

import posixpath
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Iterable, Iterator, List, Optional

import typer

from crossdock.cli import slurmfmt
from crossdock.cli.common import fail, gateway, print_json
from crossdock.cli.render import describe, job_row, typed
from crossdock.queue.errors import NoSuchJob
from crossdock.queue.hostlist import compress_hostlist
from crossdock.queue.models import Job
from crossdock.queue.states import JobState

DEFAULT_STATES = frozenset({JobState.PENDING, JobState.SCHEDULED, JobState.RUNNING})
_HOT = {JobState.PENDING, *(s for s in JobState if s.active)}


def csv(text: Optional[str]) -> list[str]:
    return [p.strip() for p in (text or "").split(",") if p.strip()]


@dataclass
class Filter:
    """squeue's and scancel's selection: every given criterion must hold (None: any)."""

    ids: Optional[list[str]] = None
    states: Optional[set[JobState]] = None  # None: every state
    users: Optional[set[str]] = None
    queues: Optional[set[str]] = None
    names: Optional[set[str]] = None

    def keeps(self, job: Job) -> bool:
        return ((self.states is None or job.state in self.states or slurmfmt.job_state(job) in self.states)
                and (self.users is None or job.spec.user in self.users)
                and (self.queues is None or job.queue in self.queues or job.pool in self.queues)
                and (self.names is None or job.spec.display_name() in self.names))


def make_filter(*, jobs: Optional[str], states: Optional[str], default_states: Optional[frozenset],
                users: Optional[str], me: bool, queues: Optional[str], names: Optional[str] = None) -> Filter:
    """The filter the options name; a bad state is one line naming it (exit 2)."""
    try:
        wanted = slurmfmt.parse_states(states) if states else (set(default_states) if default_states else None)
    except ValueError as exc:
        fail(str(exc))
    who = set(csv(users)) | ({gateway().who.name} if me else set())
    return Filter(ids=csv(jobs) or None, states=wanted, users=who or None, queues=set(csv(queues)) or None,
                  names=set(csv(names)) or None)


def select(f: Filter, batch: int = 5000) -> Iterator[Job]:
    """The stored jobs ``f`` keeps, read a page at a time: pending and running ones from their
    indexes when only those states are asked for, else every job in the store (no cap)."""
    gw = gateway()
    if f.ids is not None:
        ids: list[int] = []
        try:
            for ref in f.ids:
                ids.extend(gw.resolve(ref))
        except NoSuchJob as exc:
            fail(f"{exc}; give a job id such as 12, an array task 12_3, or an array 12")
        pages: Iterable[list[int]] = [list(dict.fromkeys(ids))]
    elif f.states is not None and f.states <= _HOT:
        hot = gw.ids("queued")
        pages = (hot[i:i + batch] for i in range(0, len(hot), batch))
    else:
        pages = _every_id(gw, batch)
    for page in pages:
        yield from (j for j in gw.jobs(page) if f.keeps(j))


def _every_id(gw, batch: int) -> Iterator[list[int]]:
    after = 0
    while page := gw.ids_after(after, batch):
        yield page
        after = page[-1]


def known_queues(names: list[str], option: str = "--partition") -> None:
    """squeue -p refuses a partition that does not exist; so does crossdock, for a name that is
    neither a queue nor a pool of the config (one line naming them, exit status 2)."""
    limits = gateway().limits()
    known = {*limits.get("queues", ()), *limits.get("pools", ())}
    unknown = [n for n in names if n not in known]
    if unknown and known:
        fail(f"{option}: unknown queue or pool {unknown[0]!r}; queues: {', '.join(limits['queues'])};"
             f" pools: {', '.join(limits['pools'])}")


def queue(
    user: Optional[str] = typer.Option(None, "--user", "-u", help="only these users' jobs (comma list)"),
    me: bool = typer.Option(False, "--me", help="only my jobs"),
    queue_name: Optional[str] = typer.Option(None, "--partition", "-p", "--queue",
                                             help="only these queues or pools (comma list)"),
    states: Optional[str] = typer.Option(None, "--states", "-t", help="comma list of states, long or short"
                                         " (PD,R or PENDING,RUNNING), or all"),
    jobs: Optional[str] = typer.Option(None, "--jobs", "-j", help="comma list of job ids"),
    name: Optional[str] = typer.Option(None, "--name", "-n", help="only jobs with these names (comma list)"),
    fmt: Optional[str] = typer.Option(None, "--format", "-o", help="squeue's field specifiers, e.g. '%.18i %.9P %j'"),
    names: Optional[str] = typer.Option(None, "--Format", "-O", help="squeue's field names, e.g. 'jobid:.10,name,state'"),
    long: bool = typer.Option(False, "--long", "-l", help="squeue -l: STATE in words and TIME_LIMIT"),
    start: bool = typer.Option(False, "--start", help="pending jobs with their expected start (N/A when unknown)"),
    noheader: bool = typer.Option(False, "--noheader", "-h", help="no header line"),
    priority: bool = typer.Option(False, "--priority", help="sprio: each pending job's priority factors"),
    array: bool = typer.Option(False, "--array", "-r", help="one row per array task (pending tasks are"
                               " otherwise one row, 12_[3-10])"),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """List jobs, like squeue (pending and running by default; -t all for every job)."""
    if priority:
        return priority_view(jobs=jobs, user=user, me=me, noheader=noheader, as_json=as_json)
    default = frozenset({JobState.PENDING}) if start else DEFAULT_STATES
    if queue_name:
        known_queues(csv(queue_name))
    f = make_filter(jobs=jobs, states=states, default_states=None if jobs else default, users=user, me=me,
                    queues=queue_name, names=name)
    selected = select(f)
    if as_json:
        print_json([job_row(j) for j in selected])
        return
    try:
        if names is not None:
            if fmt is not None:
                raise ValueError("--Format: give -o (letters) or -O (names), not both")
            fmt = slurmfmt.format_from_names(names)
        layout = fmt or (slurmfmt.START if start else slurmfmt.LONG if long else slurmfmt.DEFAULT)
        slurmfmt.parse_format(layout)
    except ValueError as exc:
        fail(str(exc))
    gw = gateway()
    ctx = slurmfmt.Context()
    if array:
        selected = list(selected)
    else:
        selected, ctx.labels = slurmfmt.collapse_arrays(selected)
    if start or "S" in layout or "Y" in layout:  # backfill's reservations; a preemptor's nominated node
        pending = [j.id for j in selected if j.state is JobState.PENDING]
        planned = gw.planned(pending) if pending else []
        ctx.expected_start = {i: datetime.fromtimestamp(at, timezone.utc) for i, at, _ in planned if at is not None}
        ctx.nominated = {i: compress_hostlist(nodes.split(",")) for i, _, nodes in planned if nodes}
    if long and not noheader:
        print(datetime.now().strftime("%a %b %d %H:%M:%S %Y"))
    for line in slurmfmt.render(selected, layout, header=not noheader, ctx=ctx):
        print(line)


def user_id(user: str) -> str:
    """scontrol's ``UserId=name(uid)``; a user this machine does not know is its name alone."""
    import pwd

    try:
        entry = pwd.getpwuid(int(user)) if user.isdigit() else pwd.getpwnam(user)
    except (KeyError, OverflowError):
        return user or "(null)"
    return f"{entry.pw_name}({entry.pw_uid})"


def command(job: Job) -> str:
    """scontrol's Command: the batch script's absolute path; the command of ``--wrap`` or the
    Python API as given."""
    spec = job.spec
    if spec.script_path:
        return posixpath.join(spec.workdir or "/", spec.script_path)
    return " ".join([*(spec.command or []), *spec.args]) or "(null)"


def scontrol_lines(job: Job, now: datetime | None = None) -> list[str]:
    """One job as ``scontrol show job`` prints it: Key=Value, grouped on indented lines."""
    from crossdock.backends.local.environment import output_paths

    spec, iso = job.spec, slurmfmt.iso
    node = job.nodes[0] if job.nodes else "localhost"
    out, err = output_paths(job, node) if spec.workdir else (None, None)
    cpus = spec.cpus_per_task * spec.ntasks
    nodes = len(job.nodes) if job.nodes else spec.nodes
    tres = [f"cpu={cpus}"]
    if job.alloc_mem_mib or spec.mem_per_node_mib:
        tres.append(f"mem={job.alloc_mem_mib or spec.mem_per_node_mib}M")
    tres.append(f"node={nodes}")
    if spec.gpus is not None:
        tres.append(f"gres/gpu={spec.total_gpus():g}")
    ident = f"JobId={job.id}"
    if job.array_job_id is not None:
        ident += f" ArrayJobId={job.array_job_id} ArrayTaskId={job.array_task_id}"
    limit = spec.time_limit_seconds
    return [
        f"{ident} JobName={spec.display_name()}",
        f"   UserId={user_id(spec.user)} Backend={job.backend or '(null)'} Pool={job.pool or '(null)'}",
        f"   Priority={job.priority} Nice={spec.nice} PriorityClass={job.priority_class or '(null)'}",
        f"   JobState={job.state.value} Reason={job.reason or 'None'} Dependency={slurmfmt.dependency(job)}",
        f"   Requeue={int(spec.requeue)} Restarts={max(0, job.attempts - 1)} ExitCode={slurmfmt.exit_code(job)}",
        f"   RunTime={slurmfmt.clock(slurmfmt.run_seconds(job, now))}"
        f" TimeLimit={'UNLIMITED' if limit is None else slurmfmt.clock(limit)}",
        f"   SubmitTime={iso(job.submit_time)} EligibleTime={iso(job.eligible_time or job.submit_time)}",
        f"   StartTime={iso(job.start_time, 'Unknown')} EndTime={iso(job.end_time, 'Unknown')}",
        f"   Partition={job.queue} BackendRef={job.backend_ref or '(null)'}",
        f"   ReqNodeList={','.join(spec.nodelist) or '(null)'} ExcNodeList={','.join(spec.exclude) or '(null)'}",
        f"   NodeList={slurmfmt.nodelist(job) or '(null)'}",
        f"   NumNodes={nodes} NumCPUs={cpus} NumTasks={spec.ntasks} CPUs/Task={spec.cpus_per_task}",
        f"   TRES={','.join(tres)}",
        f"   MinMemoryNode={slurmfmt.memory(job)} Gres={slurmfmt.tres_per_node(job)}"
        f" GpuIds={','.join(job.gpu_ids) or '(null)'}",
        f"   Command={command(job)}",
        f"   WorkDir={spec.workdir or '(null)'}",
        f"   StdErr={err or spec.stderr or '(null)'}",
        f"   StdOut={out or spec.stdout or '(null)'}",
    ]


def show(words: List[str] = typer.Argument(..., metavar="[job] JOB",
                                           help="job id, array task (12_3) or array (12); `show job 12` as scontrol"),
         as_json: bool = typer.Option(False, "--json")) -> None:
    """Everything about one job, like scontrol show job, with why it is not running and its events."""
    if words[0] == "job" and len(words) > 1:
        words = words[1:]
    if len(words) != 1:
        fail(f"show: give one job (a comma list for several), not {' '.join(words)!r}; e.g. crossdock show job 12")
    job = words[0]
    gw = gateway()
    for j in select(Filter(ids=job.split(","))):  # an empty id is refused, never "every job"
        if as_json:
            print_json({**job_row(j), "spec": j.spec.model_dump(mode="json", exclude_defaults=True,
                                                                exclude={"env", "python"}),
                        "explanation": j.explanation, "events": [typed(e) for e in gw.events(j.id)]})
            continue
        lines = scontrol_lines(j)
        if j.spec.service is not None:  # a replica: its service tells the rest (readiness, drain, warnings)
            r = j.spec.service
            lines.append(f"   Service={r.name} Replica={r.replica} Generation={r.generation}"
                         f" (crossdock services show {r.name})")
        if j.explanation and j.state is JobState.PENDING:
            lines.append(f"   Explanation={j.explanation}")
        lines.append("   Events=")
        for e in gw.events(j.id):
            stamp = slurmfmt.iso(datetime.fromtimestamp(int(e["id"].split("-")[0]) / 1000, timezone.utc))
            lines.append(f"     {stamp} {describe(e)}")
        print("\n".join(lines) + "\n")


# --- sprio ------------------------------------------------------------------------------------

def priority_rows(jobs: Iterable[Job], usage: dict[str, float], now: datetime) -> list[dict]:
    """sprio's factors as crossdock orders pending jobs: the priority class value first, then nice
    (lower first), then the user's fair share of the queue's decayed usage (less used first), then age."""
    totals: dict[str, float] = {}
    for key, v in usage.items():
        if "/" in key:
            totals[key.split("/", 1)[0]] = totals.get(key.split("/", 1)[0], 0.0) + v
    rows = []
    for j in jobs:
        used = usage.get(f"{j.queue}/{j.spec.user}", 0.0)
        share = used / totals[j.queue] if totals.get(j.queue) else 0.0
        since = j.eligible_time or j.submit_time
        rows.append({"job_id": j.display_id, "id": j.id, "queue": j.queue, "user": j.spec.user,
                     "priority_class": j.priority_class, "class_value": j.priority, "nice": j.spec.nice,
                     "fairshare_used": round(share, 4), "queue_share": round(usage.get(j.queue, 0.0), 4),
                     "age_seconds": int((now - since).total_seconds()) if since else 0})
    return rows


def priority_view(jobs: Optional[str] = None, user: Optional[str] = None, me: bool = False,
                  noheader: bool = False, as_json: bool = False) -> None:
    f = make_filter(jobs=jobs, states=None, default_states=frozenset({JobState.PENDING}), users=user, me=me,
                    queues=None)
    if jobs:
        f.states = {JobState.PENDING}
    usage = gateway().usage()
    now = datetime.now(timezone.utc)
    pending = sorted(select(f), key=lambda j: (-j.priority, j.spec.nice, j.id))
    rows = priority_rows(pending, usage, now)
    if as_json:
        print_json(rows)
        return
    if not noheader:
        print(f"{'JOBID':>18} {'PARTITION':>9} {'USER':>8} {'CLASS':>12} {'CLASSVAL':>8} {'NICE':>6}"
              f" {'FAIRSHARE':>9} {'AGE':>10}")
    for r in rows:
        print(f"{r['job_id']:>18} {r['queue'][:9]:>9} {r['user'][:8]:>8} {r['priority_class'][:12]:>12}"
              f" {r['class_value']:>8} {r['nice']:>6} {r['fairshare_used']:>9.4f} {slurmfmt.duration(r['age_seconds']):>10}")


def priority(jobs: Optional[str] = typer.Option(None, "--jobs", "-j", help="comma list of job ids"),
             user: Optional[str] = typer.Option(None, "--user", "-u", help="comma list of users"),
             me: bool = typer.Option(False, "--me"),
             noheader: bool = typer.Option(False, "--noheader", "-h"),
             as_json: bool = typer.Option(False, "--json")) -> None:
    """Pending jobs' priority factors, like sprio, in the order the scheduler tries them: class value,
    nice, the user's fair share of the queue's recent usage (lower goes first) and age."""
    priority_view(jobs=jobs, user=user, me=me, noheader=noheader, as_json=as_json)
