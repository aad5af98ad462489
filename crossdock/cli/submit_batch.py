"""``crossdock submit --batch FILE [OPTIONS]``: many submissions in one call.

Each line of FILE (``-``: standard input) is one submission as it would follow ``crossdock
submit``: options, then a script and its arguments, or ``--wrap``; words are split as a shell
splits them (quotes, backslashes), and nothing is run through a shell. Blank lines and lines
starting with ``#`` are skipped. OPTIONS given after FILE apply to every line, and a line's own
options override them (as the command line overrides a script's ``#SBATCH`` lines).

All lines are read and admitted first; if any is refused, every problem is printed (``line N:
…``) and nothing is stored. Otherwise every job is stored in one transaction and one line per
submission is printed, in order: ``Submitted batch job ID`` (``--parsable``: the id alone).
One interpreter start, one config load and one store round trip serve the whole batch, so a
job costs a fraction of a millisecond of the call rather than a whole process
(``bench/bench_submit_latency.py --batch``).
"""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path

from crossdock.cli.common import fail, fail_each, gateway
from crossdock.cli.submit import _script_text, _warn_without_scheduler, submitted_spec
from crossdock.queue.environ import exportable
from crossdock.queue.errors import CrossdockError, InvalidOption
from crossdock.queue.models import JobSpec
from crossdock.queue.sbatch import build_spec, split_argv


def run_batch(argv: list[str]) -> None:
    source, common = _source(argv)
    lines = _read(source)
    gw = gateway(start_redis=False)
    max_array = gw.limits()["max_array_size"]
    specs: list[JobSpec] = []
    numbers: list[int] = []
    problems: list[str] = []
    parsable = False
    environ = exportable(dict(os.environ))
    for number, line in lines:
        try:
            sub = _one(common, line, max_array)
            specs.append(submitted_spec(sub.spec, environ))
        except InvalidOption as exc:
            problems += [f"line {number}: {e}" for e in getattr(exc, "errors", [exc])]
            continue
        numbers.append(number)
        parsable = parsable or sub.parsable
        for w in sub.warnings:
            print(f"crossdock: warning: line {number}: {w}", file=sys.stderr)
    if problems:
        fail_each(problems + [f"nothing submitted: {len(problems)} problem(s) in {len(lines)} line(s)"])
    if not specs:
        fail(f"--batch: {source!r} holds no submission (one per line: [OPTIONS] SCRIPT [ARGS] or --wrap=...)")
    try:  # every spec is admitted before anything is stored, in one transaction
        jobs = gateway().submit(specs, token=os.environ.get("CROSSDOCK_IDEMPOTENCY_TOKEN"))
    except CrossdockError as exc:
        fail_each(_refusals(gw, specs, numbers) or [str(exc)] + ["nothing submitted"])
    firsts, i = [], 0
    for spec in specs:  # the jobs come back in the order of their specs, an array's tasks together
        firsts.append(jobs[i].array_job_id if jobs[i].array_job_id is not None else jobs[i].id)
        i += len(spec.array.task_ids) if spec.array is not None else 1
    out = "\n".join(str(f) if parsable else f"Submitted batch job {f}" for f in firsts)
    print(out)
    _warn_without_scheduler(gateway(), jobs)


def _refusals(gw, specs: list[JobSpec], numbers: list[int]) -> list[str]:
    """After a refused batch: which lines admission refuses, each on its own (the slow path)."""
    refused = []
    for number, spec in zip(numbers, specs):
        try:
            gw.check([spec])
        except CrossdockError as exc:
            refused.append(f"line {number}: {exc}")
    return refused + [f"nothing submitted: {len(refused)} line(s) refused"] if refused else []


def _source(argv: list[str]) -> tuple[str, list[str]]:
    if argv[0].startswith("--batch="):
        return argv[0].split("=", 1)[1], argv[1:]
    if len(argv) < 2:
        fail("--batch: unknown option or missing value; accepted: a file of submissions, one per line, or - for"
             " standard input")
    return argv[1], argv[2:]


def _read(source: str) -> list[tuple[int, str]]:
    try:
        data = sys.stdin.buffer.read() if source == "-" else Path(source).read_bytes()
    except (OSError, ValueError) as exc:
        fail(f"--batch: cannot read {source!r}: {getattr(exc, 'strerror', None) or exc}")
    text = _script_text(data, "standard input" if source == "-" else source)
    return [(n, line) for n, line in enumerate(text.splitlines(), 1) if line.strip() and not line.lstrip().startswith("#")]


def _one(common: list[str], line: str, max_array: int):
    try:
        words = shlex.split(line)
    except ValueError as exc:  # an unclosed quote
        raise InvalidOption("LINE", line, f"words as a shell splits them ({exc})") from None
    options, script_path, script_args = split_argv(common + words)
    if {"--dry-run", "--test-only", "--help", "-h", "--usage", "--version", "-V"} & set(options):
        raise InvalidOption("LINE", line, "submissions only: --dry-run, --test-only, --help and --version are for one"
                                          " submission at a time")
    script_text = None
    if script_path is not None:
        try:
            script_text = Path(script_path).read_bytes().decode("utf-8")
        except (OSError, ValueError) as exc:
            why = exc.strerror if isinstance(exc, OSError) else "not UTF-8 text, or not a file name"
            raise InvalidOption("SCRIPT", script_path, f"a readable UTF-8 batch script ({why})") from None
    return build_spec(options, script_text=script_text, script_path=script_path, script_args=script_args,
                      max_array_size=max_array, environ=os.environ)
