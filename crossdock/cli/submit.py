"""``crossdock submit``, sbatch's counterpart: the one command run in loops, so its path loads only
what a submission needs — not typer, click or rich (``crossdock.cli.main`` sends it here before
the rest of the CLI is imported), nor the scheduler, Celery or the dev tools
(``bench/bench_submit_latency.py`` measures it against a bare interpreter)."""

from __future__ import annotations

import functools
import os
import socket
import sys
from pathlib import Path

from crossdock.cli.common import fail, fail_each, gateway, print_json
from crossdock.queue.admission import advisories
from crossdock.queue.environ import exportable
from crossdock.queue.errors import CrossdockError, InvalidOption
from crossdock.queue.models import Job, JobSpec
from crossdock.queue.sbatch import build_spec, dry_run_json, split_argv
from crossdock.queue.sbatch_formats import export_environment
from crossdock.queue.sbatch_help import help_text
from crossdock.settings import submit_umask


def run(argv: list[str]) -> None:
    """Submit a batch script or --wrap command, with sbatch's options and #SBATCH directives.

    crossdock submit [OPTIONS] [SCRIPT [ARGS...]]   (SCRIPT from standard input when omitted)
    """
    if argv[:1] == ["--batch"] or argv[:1] and argv[0].startswith("--batch="):
        from crossdock.cli.submit_batch import run_batch

        return run_batch(argv)
    try:
        options, script_path, script_args = split_argv(argv)
        # --help and --version among the options answer at once, whatever else is given (as
        # sbatch's parser does); after the script they are the script's arguments
        if {"--help", "-h", "--usage"} & set(options):
            print(help_text())
            raise SystemExit(0)
        if {"--version", "-V"} & set(options):
            print(version_text())
            raise SystemExit(0)
        gw = gateway(start_redis=False)  # parsing and --dry-run need no store
        script_text = None
        if script_path is not None:
            try:
                script_text = _script_text(Path(script_path).read_bytes(), script_path)
            except OSError as exc:
                fail(f"SCRIPT: cannot read {script_path!r}: {exc.strerror}")
            except ValueError:  # a NUL in the name, which no file can have
                fail(f"SCRIPT: {script_path!r} is not a file name (it holds a NUL character)")
        build = functools.partial(build_spec, options, script_path=script_path, script_args=script_args,
                                  max_array_size=gw.limits()["max_array_size"], environ=os.environ)
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
        raise SystemExit(0)
    try:
        spec = submitted_spec(sub.spec)
    except InvalidOption as exc:
        fail(str(exc))
    start = None
    try:
        if sub.dry_run:  # admitted exactly as a submission is, against the same nodes; nothing stored
            jobs = gw.check([spec])
            if not gw.remote:  # where and when it would start, as sbatch --test-only says
                from crossdock import service

                start = service.test_only(gw.rt, jobs[0], service.load_inventory(gw.rt, store_optional=True))
        else:
            jobs = gateway().submit([spec], token=os.environ.get("CROSSDOCK_IDEMPOTENCY_TOKEN"))
    except CrossdockError as exc:
        fail(str(exc))
    warnings = list(sub.warnings)
    if not gw.remote:  # options some of the job's pools ignore (the socket's service has the config)
        rt = gw.rt
        signals = lambda pool: rt.backends.capabilities(rt.config.pools[pool].backend).signals  # noqa: E731
        warnings += advisories(spec, rt.config, jobs[0].pools, signals)
    for w in warnings:  # after admission: a refusal is its one line alone
        print(f"crossdock: warning: {w}", file=sys.stderr)
    if not sub.dry_run:
        _warn_without_scheduler(gateway(), jobs)
    if sub.dry_run:
        if start is not None:  # as sbatch --test-only says it, on stderr; the normalized spec on stdout
            print(f"crossdock: {start.line(jobs[0].queue)}", file=sys.stderr)
        if sub.json:
            print_json(dry_run_json(sub.spec))
        else:
            from crossdock.cli.common import console

            console.print_json(data=dry_run_json(sub.spec))
        return
    first = jobs[0].array_job_id if jobs[0].array_job_id is not None else jobs[0].id
    if sub.json:
        print_json({"job_id": first, "jobs": [j.id for j in jobs]})
    elif sub.parsable:
        print(first)
    else:
        print(f"Submitted batch job {first}")



def submitted_spec(spec: JobSpec, environ: dict[str, str] | None = None) -> JobSpec:
    """The spec as it is stored: the environment --export asks for, as sbatch stores it at submit
    (crossdock's own secrets never), and the working directory made absolute. ``environ``: the
    exportable part of this process's environment, when the caller has it already."""
    environ = exportable(dict(os.environ)) if environ is None else environ
    env = exportable(export_environment(spec.export, spec.env, environ))
    env.setdefault("SLURM_UMASK", submit_umask())  # the job's files follow the submitter's umask
    env["SLURM_SUBMIT_HOST"] = socket.gethostname()  # as sbatch records it (backends that are not Slurm read it)
    try:
        workdir = str(Path(spec.workdir or os.getcwd()).resolve())
    except (OSError, ValueError) as exc:  # a NUL in the path, a working directory since deleted
        raise InvalidOption("--chdir", spec.workdir or os.getcwd(), f"a directory the job can run in ({exc})") from None
    return spec.model_copy(update={"env": env, "workdir": workdir})


def version_text() -> str:
    from crossdock import __version__

    return f"crossdock {__version__}"


def _warn_without_scheduler(gw, jobs: list[Job]) -> None:
    """One warning when no scheduler holds the lease: the jobs wait PENDING until one runs.

    A warning, not sbatch's failure: sbatch fails when slurmctld is unreachable because the
    controller is where a job is queued. Here the queue is the store, and the store answered —
    the jobs are safely queued and a scheduler started later (``crossdock up``) takes them, as
    scripts that submit first and start the service after rely on. An unreachable store still
    fails the submit. Through the multi-user socket the service that answered runs the scheduler."""
    if gw.remote or gw.rt.store.lease_holder() is not None:
        return
    first = jobs[0].array_job_id if jobs[0].array_job_id is not None else jobs[0].id
    what = f"job {first}" if len(jobs) == 1 or jobs[0].array_job_id is not None else f"{len(jobs)} jobs"
    print(f"crossdock: warning: no scheduler is running; {what} will wait PENDING until one starts:"
          " run `crossdock up`", file=sys.stderr)


def _script_text(data: bytes, where: str) -> str:
    """A batch script as text: UTF-8, as it is stored and passed on; anything else is one line."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        fail(f"SCRIPT: {where} is not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start});"
             " save it as UTF-8")
