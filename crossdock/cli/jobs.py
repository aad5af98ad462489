"""squeue/sbatch/scancel/scontrol-like commands."""

from __future__ import annotations

import sys
import time
from typing import List, Optional

import typer
from rich.live import Live

from crossdock.cli.common import console, fail, gateway
from crossdock.cli.render import summary_table
from crossdock.queue.errors import CrossdockError, NoSuchJob
from crossdock.queue.models import Job
from crossdock.queue.states import JobState

RAW = {"allow_extra_args": True, "ignore_unknown_options": True, "help_option_names": []}


def submit(ctx: typer.Context) -> None:
    """Submit a batch script or --wrap command, with sbatch's options and #SBATCH directives.

    crossdock submit [OPTIONS] [SCRIPT [ARGS...]]   (SCRIPT from standard input when omitted)
    """
    from crossdock.cli import submit as submit_command

    submit_command.run(list(ctx.args))


def _jobs(refs: List[str]) -> list[Job]:
    gw = gateway()
    ids: list[int] = []
    try:
        for r in refs:
            for part in r.split(","):
                ids.extend(gw.resolve(part))
        return gw.jobs(ids)
    except NoSuchJob as exc:
        fail(f"{exc}; give a job id such as 12, an array task 12_3, or an array 12")
    except CrossdockError as exc:
        fail(str(exc), code=1)


def _acting(act, refs: List[str]):
    """Run a service action; a refusal or an unknown job is one line and exit status 2."""
    try:
        return act(gateway(), [p for r in refs for p in r.split(",")])
    except NoSuchJob as exc:
        fail(f"{exc}; give a job id such as 12, an array task 12_3, or an array 12")
    except CrossdockError as exc:
        fail(str(exc))


def cancel(
    refs: Optional[List[str]] = typer.Argument(None, help="job ids, array tasks (12_3) or arrays (12)"),
    user: Optional[str] = typer.Option(None, "--user", "-u", help="only these users' jobs (comma list)"),
    me: bool = typer.Option(False, "--me", help="only my jobs"),
    name: Optional[str] = typer.Option(None, "--name", "-n", help="only jobs with these names (comma list)"),
    states: Optional[str] = typer.Option(None, "--state", "-t", help="only jobs in these states (PD,R,...)"),
    queue_name: Optional[str] = typer.Option(None, "--partition", "-p", help="only these queues or pools"),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="say what became of each job"),
) -> None:
    """Cancel jobs, like scancel: the ids given, or every job the filters match (with no user
    named, only your own jobs unless you are an admin), or the ids given that also match them.
    Quiet, as scancel: a job already ended is one line on stderr; -v tells each job's outcome."""
    from crossdock.cli.views import make_filter, select
    from crossdock.service import acting_users

    filtered = bool(user or me or name or states or queue_name)
    if not refs and not filtered:
        fail("cancel: give job ids, or filters such as --me, -u USER, -n NAME, -t STATE, -p QUEUE")
    if filtered:
        f = make_filter(jobs=None, states=states,
                        default_states=None if states else frozenset(s for s in JobState if not s.terminal),
                        users=user, me=me, queues=queue_name, names=name)
        f.ids = [p for r in refs for p in r.split(",")] if refs else None
        if not refs:
            f.users = acting_users(gateway().who, f.users)
        refs = [str(j.id) for j in select(f) if not j.state.terminal]
        if not refs:
            if verbose:
                console.print("no matching jobs", highlight=False)
            return
    for job_id, outcome in _acting(lambda gw, ids: gw.cancel(ids), refs):
        if outcome.startswith("already"):
            sys.stderr.write(f"crossdock: cancel: job {job_id} {outcome}\n")
        elif verbose:
            console.print(f"{job_id}: {outcome}", highlight=False)


VERBOSE = typer.Option(False, "--verbose", "-v", help="say what became of each job")


def _each(results: list[tuple[Job, bool]], verb: str, verbose: bool) -> None:
    """Quiet on success, as scontrol: each job not acted on is one line on stderr, exit status 1."""
    bad = 0
    for j, done in results:
        if done:
            if verbose:
                console.print(f"{j.display_id}: {verb}", highlight=False)
        else:
            bad += 1
            sys.stderr.write(f"crossdock: {j.display_id}: not {verb} (state {j.state.value})\n")
    if bad:
        raise typer.Exit(1)


def hold(refs: List[str] = typer.Argument(...), verbose: bool = VERBOSE) -> None:
    """Keep pending jobs from starting (scontrol hold)."""
    _each(_acting(lambda gw, ids: gw.hold(ids, True), refs), "held", verbose)


def release(refs: List[str] = typer.Argument(...), verbose: bool = VERBOSE) -> None:
    """Let held jobs start (scontrol release)."""
    _each(_acting(lambda gw, ids: gw.hold(ids, False), refs), "released", verbose)


def requeue(refs: List[str] = typer.Argument(...), verbose: bool = VERBOSE) -> None:
    """Put running or finished jobs back in the queue (scontrol requeue)."""
    _each(_acting(lambda gw, ids: gw.requeue(ids), refs), "requeued", verbose)


UPDATE_FIELDS = {"timelimit": "time_limit_seconds", "nice": "nice"}
"""scontrol update's names (any case) → the spec fields ``update`` changes."""


def parse_updates(words: list[str]) -> tuple[list[str], dict[str, object]]:
    """``[JobId=]12 TimeLimit=30 Nice=10`` as scontrol update reads it: the jobs, and the fields
    to change, with sbatch's forms (``-t``'s times, ``--nice``'s range). Every bad word is named
    at once (ValueError, one line per problem)."""
    from crossdock.queue.sbatch_formats import parse_nice, parse_time

    refs: list[str] = []
    changes: dict[str, object] = {}
    problems: list[str] = []
    for word in words:
        key, eq, value = word.partition("=")
        name = key.lower()
        if not eq:
            refs.append(word)
        elif name in ("jobid", "job"):
            refs.append(value)
        elif name in UPDATE_FIELDS:
            try:
                changes[UPDATE_FIELDS[name]] = parse_time(value, "TimeLimit") if name == "timelimit" \
                    else parse_nice(value, "Nice")
            except CrossdockError as exc:
                problems.append(str(exc))
        elif name in ("partition", "qos", "numcpus", "mincpusnode", "minmemorynode", "gres", "reqnodelist"):
            problems.append(f"{key}: not changed in place; cancel the job and submit it again with the new value")
        else:
            problems.append(f"{key}: unknown field; update takes TimeLimit=TIME and Nice=N")
    if not refs:
        problems.append("give a job, e.g. crossdock update 12 TimeLimit=30 (or JobId=12)")
    elif not changes and not problems:
        problems.append("nothing to change: give TimeLimit=TIME or Nice=N")
    if problems:
        raise ValueError("\n".join(problems))
    return refs, changes


def update(words: List[str] = typer.Argument(..., metavar="[JobId=]JOB FIELD=VALUE...",
                                             help="TimeLimit=TIME (sbatch -t's forms) or Nice=N"),
           verbose: bool = VERBOSE) -> None:
    """Change a pending job's time limit or nice, like scontrol update (only an admin raises a
    time limit or sets a negative nice); quiet on success, as scontrol."""
    from crossdock.cli.common import fail_each

    if words[:1] == ["job"]:  # scontrol update job 12 ...
        words = words[1:]
    try:
        refs, changes = parse_updates(words)
    except ValueError as exc:
        fail_each(str(exc).splitlines())
    _each(_acting(lambda gw, ids: gw.update(ids, changes), refs), "updated", verbose)


def logs(job: str = typer.Argument(...), follow: bool = typer.Option(False, "--follow", "-f"),
         stderr: bool = typer.Option(False, "--stderr", help="show the error file when it differs")) -> None:
    """Print a job's output file; -f follows it until the job ends."""
    from crossdock.backends.local.environment import output_paths

    j = _jobs([job])[0]
    gw = gateway()
    try:
        served = gw.backend_logs(j.id)  # e.g. a pod's output, through the API
    except CrossdockError as exc:
        fail(f"logs of job {j.display_id}: {exc}", code=1)
    if served is not None:
        sys.stdout.write(served)
        return
    out, err = output_paths(j, j.nodes[0] if j.nodes else "localhost")
    path = err if stderr else out
    pos = 0
    while True:
        if path.exists():
            with open(path, "rb") as f:
                f.seek(pos)
                chunk = f.read()
                pos += len(chunk)
                sys.stdout.write(chunk.decode(errors="replace"))
                sys.stdout.flush()
        if not follow or gw.job(j.id).state.terminal:
            if not path.exists() and not follow:
                fail(f"no output yet for job {j.display_id} (expected {path})", code=1)
            if follow and path.exists():
                with open(path, "rb") as f:
                    f.seek(pos)
                    sys.stdout.write(f.read().decode(errors="replace"))
            return
        time.sleep(0.5)


def exit_status(jobs: list[Job]) -> int:
    """0 when every job completed; else the first failing job's exit code (1 when it has none)."""
    for j in jobs:
        if j.state is not JobState.COMPLETED:
            return j.exit_code if j.exit_code else 1
    return 0


def wait(refs: List[str] = typer.Argument(...), timeout: Optional[float] = typer.Option(None, "--timeout"),
         quiet: bool = typer.Option(False, "--quiet", "-q")) -> None:
    """Wait for jobs to end with a live display; the exit status is the jobs' (0 when all completed)."""
    gw = gateway()
    ids = [j.id for j in _jobs(refs)]
    deadline = None if timeout is None else time.monotonic() + timeout
    live = None if quiet or not sys.stdout.isatty() else Live(console=console, refresh_per_second=4)
    if live:
        live.start()
    try:
        while True:
            jobs = gw.jobs(ids)
            if live:
                live.update(summary_table(jobs))
            if all(j.state.terminal for j in jobs):
                break
            if deadline is not None and time.monotonic() > deadline:
                fail(f"timed out after {timeout}s waiting for {len(ids)} jobs", code=124)
            time.sleep(0.25)
    finally:
        if live:
            live.stop()
    if not live and not quiet:
        console.print(summary_table(jobs))
    raise typer.Exit(exit_status(jobs))
