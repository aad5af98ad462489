"""squeue/sbatch/scancel/scontrol-like commands."""

from __future__ import annotations

import functools
import os
import sys
import time
from pathlib import Path
from typing import List, Optional

import typer
from rich.live import Live

from crossdock.cli.common import console, fail, fail_each, print_json, runtime, sender
from crossdock.cli.render import job_row, queue_table, summary_table
from crossdock.queue.environ import exportable
from crossdock.queue.errors import CrossdockError, InvalidOption, NoSuchJob
from crossdock.queue.models import Job
from crossdock.queue.states import JobState
from crossdock.settings import submit_umask

RAW = {"allow_extra_args": True, "ignore_unknown_options": True, "help_option_names": []}


def submit(ctx: typer.Context) -> None:
    """Submit a batch script or --wrap command, with sbatch's options and #SBATCH directives.

    crossdock submit [OPTIONS] [SCRIPT [ARGS...]]   (SCRIPT from standard input when omitted)
    """
    from crossdock import service
    from crossdock.queue.sbatch import build_spec, dry_run_json, split_argv
    from crossdock.queue.sbatch_formats import export_environment

    from crossdock.queue.admission import advisories
    from crossdock.queue.sbatch_help import help_text

    argv = list(ctx.args)
    if argv[:1] in (["--help"], ["-h"], ["--usage"]):
        print(help_text())
        raise typer.Exit(0)
    if argv[:1] in (["--version"], ["-V"]):
        print(version_text())
        raise typer.Exit(0)
    rt = runtime(start_redis=False)  # parsing and --dry-run need no store
    try:
        options, script_path, script_args = split_argv(argv)
        script_text = None
        if script_path is not None:
            try:
                script_text = _script_text(Path(script_path).read_bytes(), script_path)
            except OSError as exc:
                fail(f"SCRIPT: cannot read {script_path!r}: {exc.strerror}")
            except ValueError:  # a NUL in the name, which no file can have
                fail(f"SCRIPT: {script_path!r} is not a file name (it holds a NUL character)")
        build = functools.partial(build_spec, options, script_path=script_path, script_args=script_args,
                                  max_array_size=rt.config.scheduler.max_array_size, environ=os.environ)
        try:
            sub = build(script_text)
        except InvalidOption as exc:
            # No script and no --wrap: like sbatch, read the script from standard input.
            if exc.option != "SCRIPT" or script_text is not None or sys.stdin.isatty():
                raise
            sub = build(_script_text(sys.stdin.buffer.read(), "standard input"))
    except InvalidOption as exc:
        fail_each([str(e) for e in getattr(exc, "errors", [exc])])
    if sub.help or sub.version:
        print(help_text() if sub.help else version_text())
        raise typer.Exit(0)
    # What --export asks for, as sbatch stores it at submit; crossdock's own secrets never.
    env = exportable(export_environment(sub.spec.export, sub.spec.env, exportable(dict(os.environ))))
    env.setdefault("SLURM_UMASK", submit_umask())  # the job's files follow the submitter's umask
    try:
        workdir = str(Path(sub.spec.workdir or os.getcwd()).resolve())
    except (OSError, ValueError) as exc:  # a NUL in the path, a working directory since deleted
        fail(f"--chdir: cannot use {sub.spec.workdir or 'the current directory'!r} as the job's working directory: {exc}")
    spec = sub.spec.model_copy(update={"env": env, "workdir": workdir})
    try:
        if sub.dry_run:  # admitted exactly as a submission is, against the same nodes; nothing stored
            nodes = service.load_inventory(rt, store_optional=True)
            jobs = service.check(rt, [spec], nodes)
            start = service.test_only(rt, jobs[0], nodes)
        else:
            jobs = service.submit(runtime(), [spec], token=os.environ.get("CROSSDOCK_IDEMPOTENCY_TOKEN"))
    except CrossdockError as exc:
        fail(str(exc))
    signals = lambda pool: rt.backends.capabilities(rt.config.pools[pool].backend).signals  # noqa: E731
    for w in [*sub.warnings, *advisories(spec, rt.config, jobs[0].pools, signals)]:  # after admission: a refusal is its one line alone
        print(f"crossdock: warning: {w}", file=sys.stderr)
    if sub.dry_run:
        # as sbatch --test-only says it, on stderr; the normalized spec on stdout
        print(f"crossdock: {start.line(jobs[0].queue)}", file=sys.stderr)
        if sub.json:
            print_json(dry_run_json(sub.spec))
        else:
            console.print_json(data=dry_run_json(sub.spec))
        return
    first = jobs[0].array_job_id if jobs[0].array_job_id is not None else jobs[0].id
    if sub.json:
        print_json({"job_id": first, "jobs": [j.id for j in jobs]})
    elif sub.parsable:
        print(first)
    else:
        print(f"Submitted batch job {first}")



def version_text() -> str:
    from crossdock import __version__

    return f"crossdock {__version__}"


def _script_text(data: bytes, where: str) -> str:
    """A batch script as text: UTF-8, as it is stored and passed on; anything else is one line."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        fail(f"SCRIPT: {where} is not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start});"
             " save it as UTF-8")


def _jobs(refs: List[str]) -> list[Job]:
    rt = runtime()
    ids: list[int] = []
    try:
        for r in refs:
            for part in r.split(","):
                ids.extend(rt.store.resolve(part))
    except NoSuchJob as exc:
        fail(f"{exc}; give a job id such as 12, an array task 12_3, or an array 12")
    return rt.store.get_many(ids)


def queue(
    user: Optional[str] = typer.Option(None, "--user", "-u", help="only this user's jobs"),
    queue_name: Optional[str] = typer.Option(None, "--queue", "-p", "--partition", help="only this queue"),
    states: Optional[str] = typer.Option(None, "--states", "-t", help="comma list, e.g. PENDING,RUNNING, or all"),
    jobs: Optional[str] = typer.Option(None, "--jobs", "-j", help="comma list of job ids"),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """List jobs, like squeue (pending and running by default; -t all for every job)."""
    rt = runtime()
    store = rt.store
    if jobs:
        selected = _jobs(jobs.split(","))
    elif states and states.lower() == "all":
        selected = store.get_many(store.all_ids(limit=10_000))
    else:
        selected = store.get_many(sorted(set(store.pending_ids()) | set(store.active_ids())))
    if states and states.lower() != "all":
        wanted = {s.strip().upper() for s in states.split(",")}
        unknown = wanted - {s.value for s in JobState}
        if unknown:
            fail(f"--states: unknown state {sorted(unknown)[0]!r}; accepted: {', '.join(s.value for s in JobState)}, all")
        if jobs is None:
            selected = store.get_many(store.all_ids(limit=10_000))
        selected = [j for j in selected if j.state.value in wanted]
    if user:
        selected = [j for j in selected if j.spec.user == user]
    if queue_name:
        selected = [j for j in selected if j.queue == queue_name or j.pool == queue_name]
    if as_json:
        print_json([job_row(j) for j in selected])
    else:
        console.print(queue_table(selected))


def show(job: str = typer.Argument(..., help="job id"), as_json: bool = typer.Option(False, "--json")) -> None:
    """Everything about one job, like scontrol show job, with why it is not running."""
    rt = runtime()
    for j in _jobs([job]):
        row = {**job_row(j), "spec": j.spec.model_dump(exclude_defaults=True, exclude={"env", "python"}),
               "explanation": j.explanation,
               "events": rt.store.events(j.id)}
        if as_json:
            print_json(row)
            continue
        for key, value in row.items():
            if key in ("spec", "events"):
                continue
            console.print(f"[bold]{key}[/]={value}", highlight=False)
        console.print("[bold]events[/]:")
        for e in row["events"]:
            if "to" in e:
                console.print(f"  {e.get('from', '')} -> {e['to']} by {e.get('actor', '')} {e.get('reason', '')}",
                              highlight=False)
            else:  # refused: no state change
                console.print(f"  {e.get('event', '')} {e.get('action', '')} by {e.get('actor', '')}", highlight=False)


def _acting(act, refs: List[str]):
    """Run a service action; a refusal or an unknown job is one line and exit status 2."""
    try:
        return act(runtime(), [p for r in refs for p in r.split(",")])
    except NoSuchJob as exc:
        fail(f"{exc}; give a job id such as 12, an array task 12_3, or an array 12")
    except CrossdockError as exc:
        fail(str(exc))


def cancel(refs: List[str] = typer.Argument(..., help="job ids, array tasks (12_3) or arrays (12)")) -> None:
    """Cancel jobs, like scancel."""
    from crossdock import service

    for job_id, outcome in _acting(lambda rt, ids: service.cancel(rt, ids, sender()), refs):
        console.print(f"{job_id}: {outcome}", highlight=False)


def _each(results: list[tuple[Job, bool]], verb: str) -> None:
    bad = 0
    for j, done in results:
        if done:
            console.print(f"{j.display_id}: {verb}", highlight=False)
        else:
            bad += 1
            console.print(f"{j.display_id}: not {verb} (state {j.state.value})", highlight=False)
    if bad:
        raise typer.Exit(1)


def hold(refs: List[str] = typer.Argument(...)) -> None:
    """Keep pending jobs from starting (scontrol hold)."""
    from crossdock import service

    _each(_acting(lambda rt, ids: service.hold(rt, ids, True), refs), "held")


def release(refs: List[str] = typer.Argument(...)) -> None:
    """Let held jobs start (scontrol release)."""
    from crossdock import service

    _each(_acting(lambda rt, ids: service.hold(rt, ids, False), refs), "released")


def requeue(refs: List[str] = typer.Argument(...)) -> None:
    """Put running or finished jobs back in the queue (scontrol requeue)."""
    from crossdock import service

    _each(_acting(lambda rt, ids: service.requeue(rt, ids, sender()), refs), "requeued")


def logs(job: str = typer.Argument(...), follow: bool = typer.Option(False, "--follow", "-f"),
         stderr: bool = typer.Option(False, "--stderr", help="show the error file when it differs")) -> None:
    """Print a job's output file; -f follows it until the job ends."""
    from crossdock.backends.local.environment import output_paths

    j = _jobs([job])[0]
    if j.backend and runtime().backends.capabilities(j.backend).logs:  # e.g. a pod's output, through the API
        try:
            sys.stdout.write(runtime().backends(j.backend).logs(j))  # type: ignore[attr-defined]
        except CrossdockError as exc:
            fail(f"logs of job {j.display_id}: {exc}", code=1)
        return
    out, err = output_paths(j, j.nodes[0] if j.nodes else "localhost")
    path = err if stderr else out
    rt = runtime()
    pos = 0
    while True:
        if path.exists():
            with open(path, "rb") as f:
                f.seek(pos)
                chunk = f.read()
                pos += len(chunk)
                sys.stdout.write(chunk.decode(errors="replace"))
                sys.stdout.flush()
        if not follow or rt.store.get(j.id).state.terminal:
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
    rt = runtime()
    ids = [j.id for j in _jobs(refs)]
    deadline = None if timeout is None else time.monotonic() + timeout
    live = None if quiet or not sys.stdout.isatty() else Live(console=console, refresh_per_second=4)
    if live:
        live.start()
    try:
        while True:
            jobs = rt.store.get_many(ids)
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
