"""``crossdock submit``, sbatch's counterpart: the one command run in loops, so its path loads only
what a submission needs — not typer, click or rich (``crossdock.cli.main`` sends it here before
the rest of the CLI is imported), nor the scheduler, Celery or the dev tools
(``bench/bench_submit_latency.py`` measures it against a bare interpreter)."""

from __future__ import annotations

import functools
import json
import os
import socket
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, NoReturn

from crossdock.cli.common import EXIT_USAGE, fail, gateway, one_line
from crossdock.queue.admission import advisories
from crossdock.queue.environ import exportable
from crossdock.queue.errors import CrossdockError, InvalidOption
from crossdock.queue.models import Job, JobSpec
from crossdock.queue.sbatch import build_spec, dry_run_json, split_argv
from crossdock.queue.sbatch_formats import export_environment
from crossdock.queue.sbatch_help import help_text
from crossdock.settings import submit_umask


@dataclass
class Invocation:
    """Where a submission comes from: this process (:meth:`here`), or a client of the multi-user
    service's socket, whose files, standard input, environment and directory are the client's
    (``crossdock.gateway.argv``). Everything the submit path reads of its caller goes through it."""

    environ: Mapping[str, str]
    cwd: str
    umask: str
    read_file: Callable[[str], bytes]
    """A script's bytes, read with the caller's rights (OSError when it cannot)."""
    read_stdin: Callable[[], bytes | None]
    """Standard input's bytes; None when it is a terminal (nothing to read)."""
    out: Callable[[str], object]
    err: Callable[[str], object]
    tty: bool = False
    """Standard output is a terminal (--dry-run's JSON is then coloured)."""

    @classmethod
    def here(cls) -> "Invocation":
        def stdin() -> bytes | None:
            return None if sys.stdin.isatty() else sys.stdin.buffer.read()

        return cls(os.environ, os.getcwd(), submit_umask(), lambda path: Path(path).read_bytes(), stdin,
                   sys.stdout.write, sys.stderr.write, sys.stdout.isatty())

    def fail(self, *messages: str, code: int = EXIT_USAGE) -> NoReturn:
        """One ``crossdock: error:`` line per problem, then the exit status (2: bad input)."""
        for message in messages:
            self.err(f"crossdock: error: {one_line(message)}\n")
        raise SystemExit(code)


def run(argv: list[str]) -> None:
    """Submit a batch script or --wrap command, with sbatch's options and #SBATCH directives.

    crossdock submit [OPTIONS] [SCRIPT [ARGS...]]   (SCRIPT from standard input when omitted)
    """
    if argv[:1] == ["--batch"] or argv[:1] and argv[0].startswith("--batch="):
        from crossdock.cli.submit_batch import run_batch

        return run_batch(argv)
    submit(argv, Invocation.here(), gateway)


def submit(argv: list[str], inv: Invocation, connect: Callable[..., Any]) -> None:
    """One submission as ``inv`` asks it, through ``connect(start_redis)``'s gateway; prints through
    ``inv`` and ends with SystemExit on any refusal (nothing stored then)."""
    try:
        options, script_path, script_args = split_argv(argv)
        # --help and --version among the options answer at once, whatever else is given (as
        # sbatch's parser does); after the script they are the script's arguments
        if {"--help", "-h", "--usage"} & set(options):
            inv.out(help_text() + "\n")
            raise SystemExit(0)
        if {"--version", "-V"} & set(options):
            inv.out(version_text() + "\n")
            raise SystemExit(0)
        gw = connect(start_redis=False)  # parsing and --dry-run need no store
        script_text = None
        if script_path is not None:
            try:
                script_text = _script_text(inv.read_file(script_path), script_path, inv)
            except OSError as exc:
                inv.fail(f"SCRIPT: cannot read {script_path!r}: {exc.strerror}")
            except ValueError:  # a NUL in the name, which no file can have
                inv.fail(f"SCRIPT: {script_path!r} is not a file name (it holds a NUL character)")
        build = functools.partial(build_spec, options, script_path=script_path, script_args=script_args,
                                  max_array_size=gw.limits()["max_array_size"], environ=inv.environ)
        try:
            sub = build(script_text)
        except InvalidOption as exc:
            # No script and no --wrap: like sbatch, read the script from standard input.
            if exc.option != "SCRIPT" or script_text is not None:
                raise
            data = inv.read_stdin()
            if data is None:
                raise
            sub = build(_script_text(data, "standard input", inv))
    except InvalidOption as exc:
        inv.fail(*[str(e) for e in getattr(exc, "errors", [exc])])
    if sub.help or sub.version:
        inv.out((help_text() if sub.help else version_text()) + "\n")
        raise SystemExit(0)
    try:
        spec = submitted_spec(sub.spec, exportable(dict(inv.environ)), inv)
    except InvalidOption as exc:
        inv.fail(str(exc))
    start = None
    try:
        if sub.dry_run:  # admitted exactly as a submission is, against the same nodes; nothing stored
            jobs = gw.check([spec])
            if not gw.remote:  # where and when it would start, as sbatch --test-only says
                from crossdock import service

                start = service.test_only(gw.rt, jobs[0], service.load_inventory(gw.rt, store_optional=True))
        else:
            jobs = connect().submit([spec], token=inv.environ.get("CROSSDOCK_IDEMPOTENCY_TOKEN"))
    except CrossdockError as exc:
        inv.fail(str(exc))
    warnings = list(sub.warnings)
    if not gw.remote:  # options some of the job's pools ignore (the socket's service has the config)
        rt = gw.rt
        signals = lambda pool: rt.backends.capabilities(rt.config.pools[pool].backend).signals  # noqa: E731
        warnings += advisories(spec, rt.config, jobs[0].pools, signals)
    for w in warnings:  # after admission: a refusal is its one line alone
        inv.err(f"crossdock: warning: {w}\n")
    if not sub.dry_run:
        _warn_without_scheduler(connect(), jobs, inv.err)
    if sub.dry_run:
        if start is not None:  # as sbatch --test-only says it, on stderr; the normalized spec on stdout
            inv.err(f"crossdock: {start.line(jobs[0].queue)}\n")
        if inv.tty and not sub.json:
            from crossdock.cli.common import console

            console.print_json(data=dry_run_json(sub.spec))
        else:
            inv.out(json.dumps(dry_run_json(sub.spec), indent=2, default=str) + "\n")
        return
    first = jobs[0].array_job_id if jobs[0].array_job_id is not None else jobs[0].id
    if sub.json:
        inv.out(json.dumps({"job_id": first, "jobs": [j.id for j in jobs]}, indent=2) + "\n")
    elif sub.parsable:
        inv.out(f"{first}\n")
    else:
        inv.out(f"Submitted batch job {first}\n")


def submitted_spec(spec: JobSpec, environ: dict[str, str], inv: "Invocation | None" = None) -> JobSpec:
    """The spec as it is stored: the environment --export asks for, as sbatch stores it at submit
    (crossdock's own secrets never; ``environ``: the exportable part of the caller's environment),
    and the working directory made absolute against the caller's."""
    env = exportable(export_environment(spec.export, spec.env, environ))
    env.setdefault("SLURM_UMASK", inv.umask if inv else submit_umask())  # the job's files follow the submitter's umask
    env["SLURM_SUBMIT_HOST"] = socket.gethostname()  # as sbatch records it (backends that are not Slurm read it)
    cwd = inv.cwd if inv else os.getcwd()
    try:
        workdir = str(Path(cwd, spec.workdir or ".").resolve())
    except (OSError, ValueError) as exc:  # a NUL in the path, a working directory since deleted
        raise InvalidOption("--chdir", spec.workdir or cwd, f"a directory the job can run in ({exc})") from None
    return spec.model_copy(update={"env": env, "workdir": workdir})


def version_text() -> str:
    from crossdock import __version__

    return f"crossdock {__version__}"


def _warn_without_scheduler(gw, jobs: list[Job], err: Callable[[str], object] = sys.stderr.write) -> None:
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
    err(f"crossdock: warning: no scheduler is running; {what} will wait PENDING until one starts:"
        " run `crossdock up`\n")


def _script_text(data: bytes, where: str, inv: Invocation | None = None) -> str:
    """A batch script as text: UTF-8, as it is stored and passed on; anything else is one line."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        message = f"SCRIPT: {where} is not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start}); save it as UTF-8"
        (inv.fail if inv else fail)(message)
