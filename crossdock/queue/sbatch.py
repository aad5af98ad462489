"""sbatch-compatible submission: ``#SBATCH`` directives and command-line options -> ``JobSpec``.

The reading follows sbatch itself:

1. ``#SBATCH`` lines are read from the top of the script until the first line that is
   neither blank nor a comment (the shebang is a comment). Each line is split the way sbatch's
   ``_get_argument`` splits it: blanks separate words, ``'`` and ``"`` quote, ``\\`` escapes
   the next character (inside quotes too), an unquoted ``#`` ends the line.
2. Options are read like ``getopt_long`` with a leading ``+``: ``--opt=value``,
   ``--opt value``, ``-cVALUE``, ``-c VALUE``, clustered flags (``-Hc4``), unique prefixes of
   long names (``--part``), and options with an optional value take it only after ``=``.
   Reading stops at the first word that is not an option (the script) or after ``--``.
3. Command-line options override ``SBATCH_*`` environment variables, which override the
   script's directives, option by option. ``--mem`` and ``--mem-per-cpu`` exclude each other
   across the script and the command line, as in sbatch; so do the GPU options, because a
   crossdock job carries one GPU request.

Everything here is pure: the caller reads the script file and prints the result.
"""

from __future__ import annotations

import difflib
import math
import posixpath
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Literal

from pydantic import ValidationError

from crossdock.queue.errors import InvalidOption, InvalidOptions
from crossdock.queue.models import JobSpec
from crossdock.queue.sbatch_formats import (
    DEFAULT_MAX_ARRAY_SIZE,
    parse_array,
    parse_count,
    parse_dependency,
    parse_export,
    parse_gpus,
    parse_gres,
    parse_hostlist,
    parse_mem,
    parse_nice,
    parse_nodes,
    parse_time,
)
from crossdock.queue.sbatch_extras import parse_begin, parse_constraint, parse_licenses, parse_signal
from crossdock.queue.sbatch_json import dry_run_json
from crossdock.queue.sbatch_native import NATIVE, REFUSED, REFUSED_SHORT, native_arg
from crossdock.queue.sbatch_script import MAGIC, InvalidDirective, directive_tokens, read_sbatch_directives

__all__ = [
    "OPTIONS",
    "InvalidDirective",
    "OptionDef",
    "Submission",
    "build_spec",
    "dry_run_json",
    "read_sbatch_directives",
    "split_argv",
]

# --- the option table -----------------------------------------------------------------------

Arg = Literal["required", "optional", "none"]
Settings = dict[str, Any]


@dataclass(frozen=True)
class _Ctx:
    max_array_size: int
    warnings: list[str]
    errors: list[InvalidOption] = field(default_factory=list)
    now: datetime = field(default_factory=lambda: datetime.now(timezone.utc).astimezone())
    """Dates and times of day are read in its zone: the submit host's, as sbatch reads them."""


Apply = Callable[[Settings, "str | None", str, _Ctx], None]


@dataclass(frozen=True)
class OptionDef:
    long: str
    short: str | None
    arg: Arg
    apply: Apply
    help: str = ""
    env: str | None = None  # sbatch's input environment variable for this option
    cli_only: bool = False


def _store(key: str, parse: Callable[[str, str], Any] | None = None) -> Apply:
    def apply(s: Settings, value: str | None, opt: str, ctx: _Ctx) -> None:
        s[key] = parse(value, opt) if parse else value

    return apply


def _const(key: str, constant: Any) -> Apply:
    def apply(s: Settings, value: str | None, opt: str, ctx: _Ctx) -> None:
        s[key] = constant

    return apply


@dataclass(frozen=True)
class _Choice:
    """One member of a group of options that exclude each other (``--mem``/``--mem-per-cpu``)."""

    member: str
    parsed: Any
    option: str
    value: str | None


def _exclusive_group(group: str, member: str, parse: Callable[[str, str], Any]) -> Apply:
    def apply(s: Settings, value: str | None, opt: str, ctx: _Ctx) -> None:
        previous = s.get(group)
        if previous is not None and previous.member != member:
            raise InvalidOption(opt, value, f"one of {previous.option} and {opt}, not both")
        s[group] = _Choice(member, parse(value, opt), opt, value)

    return apply


def _merge_group(group: str, script: Settings, env: Settings, cli: Settings) -> _Choice | None:
    """sbatch's rule for --mem/--mem-per-cpu (and crossdock's for the GPU options): the script
    and the command line together may name one kind only; the environment's applies only when
    neither names any."""
    ours, theirs = cli.get(group), script.get(group)
    if ours is not None and theirs is not None and ours.member != theirs.member:
        raise InvalidOption(
            ours.option, ours.value, f"one of {theirs.option} (given in the script) and {ours.option}, not both"
        )
    return ours or theirs or env.get(group)


def _nodes(s: Settings, value: str | None, opt: str, ctx: _Ctx) -> None:
    s["nodes"], s["nodes_max"] = parse_nodes(value, opt)


def _array(s: Settings, value: str | None, opt: str, ctx: _Ctx) -> None:
    s["array"] = parse_array(value, ctx.max_array_size, opt)


def _output(key: str) -> Apply:
    def apply(s: Settings, value: str | None, opt: str, ctx: _Ctx) -> None:
        if not value:
            raise InvalidOption(opt, value, "a file name pattern (%j %A %a %x %u %N ...), or none")
        # sbatch turns "none" into /dev/null; any other pattern is kept verbatim.
        s[key] = "/dev/null" if value.lower() == "none" else value

    return apply


def _export(s: Settings, value: str | None, opt: str, ctx: _Ctx) -> None:
    s["export"], s["env"] = parse_export(value, opt)


def _exclusive(s: Settings, value: str | None, opt: str, ctx: _Ctx) -> None:
    if value is not None:
        raise InvalidOption(opt, value, "--exclusive without a value (user, mcs and topo sharing are not supported)")
    s["exclusive"] = True


def _nonempty(key: str) -> Apply:
    def apply(s: Settings, value: str | None, opt: str, ctx: _Ctx) -> None:
        if not value:
            raise InvalidOption(opt, value, "a non-empty value")
        s[key] = value

    return apply


def _ignored(s: Settings, value: str | None, opt: str, ctx: _Ctx) -> None:
    ctx.warnings.append(f"{opt} is accepted for compatibility and has no effect in crossdock")


def _gpus(per: str) -> Apply:
    return _exclusive_group("gpus", per, lambda v, o: parse_gpus(v, per, o))


def _when(key: str) -> Apply:
    def apply(s: Settings, value: str | None, opt: str, ctx: _Ctx) -> None:
        s[key] = parse_begin(value or "", ctx.now, opt)

    return apply


NATIVE_KEY = "native:"  # settings key prefix of an option passed to Slurm as written


def _native(name: str) -> Apply:
    def apply(s: Settings, value: str | None, opt: str, ctx: _Ctx) -> None:
        s[NATIVE_KEY + name] = value

    return apply


def _no_effect(why: str) -> Apply:
    def apply(s: Settings, value: str | None, opt: str, ctx: _Ctx) -> None:
        ctx.warnings.append(f"{opt}{'=' + value if value else ''}: accepted, no effect in crossdock ({why})")

    return apply


OPTIONS: tuple[OptionDef, ...] = (
    OptionDef("job-name", "J", "required", _store("name"), "job name (default: the script's file name)", "SBATCH_JOB_NAME"),
    OptionDef("partition", "p", "required", _nonempty("partition"), "queues, pools or pools' Slurm partitions, comma list",
              "SBATCH_PARTITION"),
    OptionDef("qos", "q", "required", _nonempty("priority_class"), "priority class", "SBATCH_QOS"),
    OptionDef("time", "t", "required", _store("time_limit_seconds", parse_time), "time limit", "SBATCH_TIMELIMIT"),
    OptionDef("cpus-per-task", "c", "required", _store("cpus_per_task", parse_count), "CPUs per task"),
    OptionDef("ntasks", "n", "required", _store("ntasks", parse_count), "tasks (default: one per node)"),
    OptionDef("nodes", "N", "required", _nodes, "nodes: N or MIN-MAX"),
    OptionDef("ntasks-per-node", None, "required", _store("ntasks_per_node", parse_count), "tasks per node"),
    OptionDef("tasks-per-node", None, "required", _store("ntasks_per_node", parse_count), "= --ntasks-per-node"),
    OptionDef("ntasks-per-gpu", None, "required", _store("ntasks_per_gpu", parse_count), "tasks per GPU (expanded)"),
    OptionDef("cpus-per-gpu", None, "required", _store("cpus_per_gpu", parse_count), "CPUs per GPU (expanded)",
              "SBATCH_CPUS_PER_GPU"),
    OptionDef(
        "mem", None, "required", _exclusive_group("mem", "mem_per_node_mib", parse_mem),
        "memory per node (MiB, or K/M/G/T)", "SBATCH_MEM_PER_NODE",
    ),
    OptionDef(
        "mem-per-cpu", None, "required", _exclusive_group("mem", "mem_per_cpu_mib", parse_mem),
        "memory per CPU", "SBATCH_MEM_PER_CPU",
    ),
    OptionDef(
        "mem-per-gpu", None, "required", _exclusive_group("mem", "mem_per_gpu_mib", parse_mem),
        "memory per GPU (expanded to memory per node)", "SBATCH_MEM_PER_GPU",
    ),
    OptionDef("gres", None, "required", _store("gres", parse_gres), "generic resources per node", "SBATCH_GRES"),
    OptionDef("gpus", "G", "required", _gpus("job"), "GPUs for the whole job: [type:]count", "SBATCH_GPUS"),
    OptionDef("gpus-per-node", None, "required", _gpus("node"), "GPUs per node", "SBATCH_GPUS_PER_NODE"),
    OptionDef("gpus-per-task", None, "required", _gpus("task"), "GPUs per task", "SBATCH_GPUS_PER_TASK"),
    OptionDef("array", "a", "required", _array, "array task ids: 0-15:4%2", "SBATCH_ARRAY_INX"),
    OptionDef("dependency", "d", "required", _store("dependency", lambda v, o: parse_dependency(v, o) if v else None),
              "afterok:ID[:ID...]...; empty clears the script's"),
    OptionDef("output", "o", "required", _output("stdout"), "stdout file pattern", "SBATCH_OUTPUT"),
    OptionDef("error", "e", "required", _output("stderr"), "stderr file pattern", "SBATCH_ERROR"),
    OptionDef("chdir", "D", "required", _nonempty("workdir"), "working directory"),
    OptionDef("export", None, "required", _export, "ALL, NONE or [ALL,]VAR[=value],...", "SBATCH_EXPORT"),
    OptionDef("nice", None, "optional", _store("nice", parse_nice), "lower the priority by N (default 100)"),
    OptionDef("hold", "H", "none", _const("hold", True), "submit held"),
    OptionDef("requeue", None, "none", _const("requeue", True), "may be requeued", "SBATCH_REQUEUE"),
    OptionDef("no-requeue", None, "none", _const("requeue", False), "never requeue", "SBATCH_NO_REQUEUE"),
    OptionDef("exclusive", None, "optional", _exclusive, "whole nodes only", "SBATCH_EXCLUSIVE"),
    OptionDef("nodelist", "w", "required", _store("nodelist", parse_hostlist), "hosts required: node[1-3]"),
    OptionDef("exclude", "x", "required", _store("exclude", parse_hostlist), "hosts excluded"),
    OptionDef("wrap", None, "required", _store("wrap"), "run this command line with /bin/sh", cli_only=True),
    OptionDef("parsable", None, "none", _const("parsable", True), "print only the job id"),
    OptionDef("constraint", "C", "required", _store("constraint", parse_constraint),
              "node features: a&b, a|b (Slurm features; node labels through a pool's features map)",
              "SBATCH_CONSTRAINT"),
    OptionDef("signal", None, "required", _store("kill_signal", parse_signal),
              "[{R|B}:]sig_num[@sig_time]: signal before the time limit", "SBATCH_SIGNAL"),
    OptionDef("time-min", None, "required", _store("time_min_seconds", parse_time), "minimum time limit (backfill)"),
    OptionDef("begin", "b", "required", _when("begin"), "defer until: now+1hour, 16:00, 2026-01-02T10:00, tomorrow"),
    OptionDef("deadline", None, "required", _when("deadline"), "cancel the job if it can no longer end by then"),
    OptionDef("reservation", None, "required", _nonempty("reservation"), "Slurm reservation (Slurm pools only)",
              "SBATCH_RESERVATION"),
    OptionDef("licenses", "L", "required", _store("licenses", parse_licenses), "licenses: name[:count],... (Slurm pools)"),
    OptionDef("clusters", "M", "required", _no_effect("one crossdock queue spans its clusters"), "ignored",
              "SBATCH_CLUSTERS"),
    OptionDef("get-user-env", None, "optional", _no_effect("the submit environment is exported per --export"),
              "ignored", "SBATCH_GET_USER_ENV"),
    # crossdock's own
    OptionDef("backend", None, "required", _nonempty("backend"), "backend: slurm, k8s, local..."),
    OptionDef("pool", None, "required", _nonempty("pool"), "node pool"),
    OptionDef("priority-class", None, "required", _nonempty("priority_class"), "priority class (= --qos)"),
    OptionDef("placement", None, "required", _nonempty("placement"), "binpack, spread, most-requested"),
    OptionDef("queue", None, "required", _nonempty("queue"), "crossdock queue"),
    OptionDef("dry-run", None, "none", _const("dry_run", True), "validate and print, store nothing"),
    OptionDef("test-only", None, "none", _const("dry_run", True), "sbatch's name for --dry-run"),
    OptionDef("version", "V", "none", _const("version", True), "print the version and exit", cli_only=True),
    OptionDef("help", "h", "none", _const("help", True), "print this help and exit", cli_only=True),
    OptionDef("usage", None, "none", _const("help", True), "print this help and exit", cli_only=True),
    OptionDef("json", None, "none", _const("json", True), "print JSON"),
    # sbatch options that only inform Slurm's accounting or mail: accepted, with a warning.
    OptionDef("account", "A", "required", _ignored, "ignored", "SBATCH_ACCOUNT"),
    OptionDef("comment", None, "required", _ignored, "ignored"),
    OptionDef("mail-type", None, "required", _ignored, "ignored"),
    OptionDef("mail-user", None, "required", _ignored, "ignored"),
    OptionDef("wckey", None, "required", _ignored, "ignored", "SBATCH_WCKEY"),
    OptionDef("open-mode", None, "required", _ignored, "ignored", "SBATCH_OPEN_MODE"),
    OptionDef("quiet", "Q", "none", _ignored, "ignored"),
    OptionDef("verbose", "v", "none", _ignored, "ignored"),
    OptionDef("acctg-freq", None, "required", _ignored, "ignored", "SBATCH_ACCTG_FREQ"),
    OptionDef("profile", None, "required", _ignored, "ignored", "SBATCH_PROFILE"),
    OptionDef("propagate", None, "optional", _ignored, "ignored"),
    OptionDef("cpu-freq", None, "required", _ignored, "ignored"),
    OptionDef("kill-on-invalid-dep", None, "required", _ignored, "ignored"),
)

OPTIONS += tuple(OptionDef(name, short, arg, _native(name), "passed to Slurm as written (Slurm pools only)")
                 for name, (short, arg) in NATIVE.items())
UNSUPPORTED = frozenset(REFUSED)
_UNSUPPORTED_SHORT = frozenset(REFUSED_SHORT)

_BY_LONG = {o.long: o for o in OPTIONS}
_BY_SHORT = {o.short: o for o in OPTIONS if o.short}
_ALL_LONG = sorted(set(_BY_LONG) | UNSUPPORTED)


def _printable(text: str) -> str:
    """A user-typed option name fit for a one-line message."""
    return text if text.isprintable() else ascii(text)


def _unknown(written: str, value: str | None = None) -> InvalidOption:
    name = written.lstrip("-").partition("=")[0]
    written = _printable(written)
    name = REFUSED_SHORT.get(name, name) if len(name) == 1 else name
    if name in REFUSED:
        return InvalidOption(written, value, f"none (crossdock does not take --{name}: {REFUSED[name]})")
    close = difflib.get_close_matches(name, list(_BY_LONG), n=1)
    if close:
        return InvalidOption(written, value, f"a supported option: did you mean --{close[0]}?")
    return InvalidOption(written, value, "one of the supported options: " + ", ".join(_supported_names()))


def _supported_names() -> list[str]:
    return [f"-{o.short}/--{o.long}" if o.short else f"--{o.long}" for o in OPTIONS]


def _lookup_long(name: str, written: str, value: str | None) -> OptionDef:
    if name in _BY_LONG:
        return _BY_LONG[name]
    if name in UNSUPPORTED:
        raise _unknown(written, value)
    # getopt_long accepts any unambiguous prefix of a long option.
    matches = [n for n in _ALL_LONG if n.startswith(name)] if name else []
    if len(matches) == 1 and matches[0] in _BY_LONG:
        return _BY_LONG[matches[0]]
    if len(matches) > 1:
        raise InvalidOption(_printable(written), value, "an unambiguous option name: " + ", ".join(f"--{m}" for m in matches))
    raise _unknown(written, value)


@dataclass(frozen=True)
class _Given:
    option: OptionDef
    value: str | None
    written: str
    line: int | None


def _missing(written: str) -> InvalidOption:
    return InvalidOption(written, None, f"a value after {written}")


def _at_line(exc: InvalidOption, line: int | None) -> InvalidOption:
    if line is None or isinstance(exc, InvalidDirective):
        return exc
    return InvalidDirective(exc.option, exc.value, exc.accepted, line)


def _scan_tokens(tokens: Sequence[tuple[str, int | None]], errors: list[InvalidOption]) -> tuple[list[_Given], int]:
    given: list[_Given] = []
    i = 0
    while i < len(tokens):
        word, line = tokens[i]
        if word == "--":
            return given, i + 1
        if not word.startswith("-") or word == "-":
            return given, i
        if word.startswith("--"):
            name, eq, attached = word[2:].partition("=")
            try:
                opt = _lookup_long(name, f"--{name}", attached if eq else None)
            except InvalidOption as exc:
                if not eq and i + 1 < len(tokens) and not tokens[i + 1][0].startswith("-"):
                    # an option crossdock does not know: its value (most take one) is shown, then skipped
                    i += 1
                    exc = InvalidOption(exc.option, tokens[i][0], exc.accepted)
                errors.append(_at_line(exc, line))
                i += 1
                continue
            written = f"--{opt.long}"
            if opt.arg == "none":
                if eq:
                    errors.append(_at_line(InvalidOption(written, attached, f"{written} without a value"), line))
                value = None
            elif eq:
                value = attached
            elif opt.arg == "optional":
                value = None
            elif i + 1 < len(tokens):
                i += 1
                value = tokens[i][0]
            else:
                errors.append(_at_line(_missing(written), line))
                return given, len(tokens)
            given.append(_Given(opt, value, written, line))
            i += 1
            continue
        # short options, possibly clustered: -Hc4, -c 4
        j = 1
        while j < len(word):
            letter = word[j]
            opt = _BY_SHORT.get(letter)
            if opt is None:
                value = word[j + 1:] or None
                if value is None and i + 1 < len(tokens) and not tokens[i + 1][0].startswith("-"):
                    i += 1
                    value = tokens[i][0]
                errors.append(_at_line(_unknown(f"-{letter}", value), line))
                break
            written = f"-{letter}"
            if opt.arg == "none":
                given.append(_Given(opt, None, written, line))
                j += 1
                continue
            if j + 1 < len(word):
                value = word[j + 1:]
            elif i + 1 < len(tokens):
                i += 1
                value = tokens[i][0]
            else:
                errors.append(_at_line(_missing(written), line))
                return given, len(tokens)
            given.append(_Given(opt, value, written, line))
            break
        i += 1
    return given, len(tokens)


def split_argv(argv: Sequence[str]) -> tuple[list[str], str | None, list[str]]:
    """Split ``crossdock submit`` argv into (options, script path or None, script args).

    As in sbatch, options end at the first word that is not an option: ``submit job.sh -t 5``
    passes ``-t 5`` to the script.
    """
    tokens = [(w, None) for w in argv]
    _, stop = _scan_tokens(tokens, [])  # bad options are reported by build_spec, all together
    options = list(argv[:stop])
    rest = list(argv[stop:])
    if options and options[-1] == "--":
        options.pop()
    if not rest:
        return options, None, []
    return options, rest[0], rest[1:]


# --- building the spec ----------------------------------------------------------------------


@dataclass
class Submission:
    """A validated job spec plus the flags that shape the submission, not the job."""

    spec: JobSpec
    parsable: bool = False
    dry_run: bool = False
    json: bool = False
    warnings: list[str] = field(default_factory=list)
    help: bool = False
    version: bool = False


def _apply_all(given: Iterable[_Given], settings: Settings, ctx: _Ctx, *, from_script: bool) -> None:
    for g in given:
        if from_script and g.option.cli_only:
            # sbatch reads the script it was given and ignores a --wrap found inside it.
            ctx.warnings.append(f"#SBATCH line {g.line}: {g.written} only works on the command line; ignored")
            continue
        try:
            g.option.apply(settings, g.value, g.written, ctx)
        except InvalidOption as exc:
            ctx.errors.append(_at_line(exc, g.line or 0) if from_script else exc)


def _check_script(script_text: str) -> None:
    first = script_text.split("\n", 1)[0]
    if not first.startswith("#!"):
        raise InvalidOption(
            "SCRIPT", first[:80], "a batch script whose first line starts with #! and an interpreter path (or --wrap)"
        )
    if "\r\n" in script_text:
        raise InvalidOption("SCRIPT", "\\r\\n", "a script with Unix line breaks (\\n), not DOS ones (\\r\\n)")
    if "\0" in script_text:
        raise InvalidOption("SCRIPT", "\\0", "a text script without NUL characters")


def _default_name(wrap: str | None, script_path: str | None) -> str:
    if wrap is not None:
        return "wrap"
    if script_path and script_path != "-":
        return posixpath.basename(script_path.rstrip("/")) or "sbatch"
    return "sbatch"  # the script came on standard input


def _env_settings(environ: Mapping[str, str], ctx: _Ctx) -> Settings:
    """sbatch's input environment variables (``SBATCH_TIMELIMIT``...), for the options crossdock
    has; others are left alone, as a site may set them for its own Slurm."""
    settings: Settings = {}
    for opt in OPTIONS:
        if opt.env is None or opt.env not in environ:
            continue
        value: str | None = environ[opt.env]
        if opt.arg == "none" or (opt.arg == "optional" and value == ""):
            value = None
        try:
            opt.apply(settings, value, f"--{opt.long}", ctx)
        except InvalidOption as exc:
            ctx.errors.append(InvalidOption(opt.env, exc.value, exc.accepted))
    return settings


_OPTION_OF = {"cpus_per_task": "--cpus-per-task", "ntasks": "--ntasks", "nodes": "--nodes", "nodes_max": "--nodes",
              "ntasks_per_node": "--ntasks-per-node", "mem_per_node_mib": "--mem", "mem_per_cpu_mib": "--mem-per-cpu",
              "time_limit_seconds": "--time", "gres": "--gres", "gpus": "--gpus", "array": "--array",
              "dependency": "--dependency", "nice": "--nice", "time_min_seconds": "--time-min",
              "constraint": "--constraint", "reservation": "--reservation", "licenses": "--licenses"}
"""A spec field -> the option that sets it, so that a bound the spec checks names what the user typed."""

_SPEC_KEYS = (
    "cpus_per_task", "ntasks_per_node", "gres", "time_limit_seconds", "partition", "priority_class",
    "queue", "backend", "pool", "placement", "nice", "array", "dependency", "hold", "requeue",
    "exclusive", "nodelist", "exclude", "stdout", "stderr", "workdir", "export", "env",
    "constraint", "kill_signal", "time_min_seconds", "begin", "deadline", "reservation", "licenses",
)


def _validated(fields: dict[str, Any], errors: list[InvalidOption]) -> JobSpec | None:
    try:
        return JobSpec(**fields)
    except ValidationError as exc:
        for err in exc.errors():
            where = ".".join(str(p) for p in err["loc"])
            if where:
                errors.append(InvalidOption(_OPTION_OF.get(where.split(".")[0], where), err.get("input"), err["msg"]))
            else:
                whole = InvalidOption("spec", None, err["msg"])
                Exception.__init__(whole, err["msg"].removeprefix("Value error, "))  # the spec's own checks name their fields
                errors.append(whole)
        return None


def _per_gpu(spec: JobSpec, s: Settings, fields: dict[str, Any], errors: list[InvalidOption]) -> JobSpec | None:
    """Expand --ntasks-per-gpu, --cpus-per-gpu and --mem-per-gpu into the spec's per-task and per-node counts."""
    mem = s.get("mem")
    asked = [o for o, given in (("--ntasks-per-gpu", "ntasks_per_gpu" in s), ("--cpus-per-gpu", "cpus_per_gpu" in s),
                                ("--mem-per-gpu", mem is not None and mem.member == "mem_per_gpu_mib")) if given]
    if not asked:
        return spec
    req = spec.gpu_request()
    if req is None:
        errors.extend(InvalidOption(o, s.get(o[2:].replace("-", "_"), mem.value if mem else None),
                                    "a GPU request beside it: --gpus, --gpus-per-node, --gpus-per-task or --gres=gpu:N")
                      for o in asked)
        return None
    if "ntasks_per_gpu" in s:
        if req.per == "task":
            errors.append(InvalidOption("--ntasks-per-gpu", s["ntasks_per_gpu"], "--gpus or --gpus-per-node with it, not --gpus-per-task"))
            return None
        if "ntasks" not in s:
            fields["ntasks"] = max(fields["ntasks"], s["ntasks_per_gpu"] * spec.total_gpus())
        spec = _validated(fields, errors)
        if spec is None:
            return None
    if "cpus_per_gpu" in s:
        if "cpus_per_task" in s:
            errors.append(InvalidOption("--cpus-per-gpu", s["cpus_per_gpu"], "one of --cpus-per-task and --cpus-per-gpu, not both"))
            return None
        fields["cpus_per_task"] = max(1, math.ceil(s["cpus_per_gpu"] * spec.gpus_per_node() / spec.tasks_per_node()))
    if mem is not None and mem.member == "mem_per_gpu_mib":
        fields["mem_per_node_mib"] = mem.parsed * spec.gpus_per_node()
    return _validated(fields, errors)


def build_spec(
    argv: Sequence[str],
    script_text: str | None = None,
    script_path: str | None = None,
    script_args: Sequence[str] = (),
    max_array_size: int = DEFAULT_MAX_ARRAY_SIZE,
    environ: Mapping[str, str] | None = None,
    now: datetime | None = None,
) -> Submission:
    """The submission that ``sbatch [argv] [script_path [script_args]]`` describes.

    ``argv`` holds options only (see :func:`split_argv`); ``script_text`` is the script's
    content (from the file or standard input), ``None`` with ``--wrap``. ``environ``, when
    given, supplies sbatch's ``SBATCH_*`` input variables. As in sbatch, the command line
    overrides the environment, which overrides the script's ``#SBATCH`` lines. ``now`` is the
    time ``--begin``/``--deadline`` are read at (default: the clock).

    Every problem found is reported: one :class:`InvalidOption`, or :class:`InvalidOptions`
    holding one per line.
    """
    warnings: list[str] = []
    ctx = _Ctx(max_array_size=max_array_size, warnings=warnings, now=now or datetime.now(timezone.utc).astimezone())
    errors = ctx.errors

    script_settings: Settings = {}
    if script_text is not None:
        try:
            _check_script(script_text)
            tokens = directive_tokens(script_text)
        except InvalidOption as exc:
            errors.append(exc)
            tokens = []
        given, stop = _scan_tokens(tokens, errors)
        if stop < len(tokens):
            word, line = tokens[stop]
            if "\\" in script_text.split("\n")[line - 1]:
                # sbatch's reader ends a word at any blank, even after a backslash (22.05 refuses
                # `-J a\ b` with the stray `b` too): say how to write what was meant
                errors.append(InvalidDirective(MAGIC, word, "one word per value: a backslash does not keep a blank in"
                                               ' the word (sbatch ends it there); quote the value instead, e.g. -J "a b"',
                                               line))
            else:
                errors.append(InvalidDirective(MAGIC, word, "options only, e.g. #SBATCH --time=10", line))
        _apply_all(given, script_settings, ctx, from_script=True)
        errors.sort(key=lambda e: getattr(e, "line", 0))  # the script's problems in line order

    env_settings = _env_settings(environ, ctx) if environ else {}

    cli_settings: Settings = {}
    cli_given, stop = _scan_tokens([(w, None) for w in argv], errors)
    if stop < len(argv):
        errors.append(InvalidOption("ARGUMENT", argv[stop], "options only here; the script and its arguments come after them"))
    _apply_all(cli_given, cli_settings, ctx, from_script=False)

    s: Settings = {**script_settings, **env_settings, **cli_settings}
    for group in ("mem", "gpus"):
        try:
            s[group] = _merge_group(group, script_settings, env_settings, cli_settings)
        except InvalidOption as exc:
            errors.append(exc)
            s[group] = cli_settings.get(group)
    if s.get("help") or s.get("version"):
        return Submission(spec=JobSpec(command=["true"]), help=bool(s.get("help")), version=bool(s.get("version")),
                          warnings=warnings)
    wrap = s.get("wrap")
    if wrap is not None and (script_text is not None or script_path is not None or script_args):
        errors.append(InvalidOption("--wrap", wrap, "either --wrap or a script, not both"))
    if wrap is None and script_text is None and not errors:
        # alone, so that the command line may read the script from standard input instead
        raise InvalidOption("SCRIPT", script_path, "a batch script (a file or standard input), or --wrap")

    fields: dict[str, Any] = {key: s[key] for key in _SPEC_KEYS if key in s}
    fields["name"] = s["name"] if "name" in s else _default_name(wrap, script_path)
    native = [native_arg(name, s[NATIVE_KEY + name]) for name in NATIVE if NATIVE_KEY + name in s]
    if native:
        fields["slurm_options"] = native
    if wrap is not None:
        fields["command"] = ["/bin/sh", "-c", wrap]
    elif script_text is not None:
        fields["script"] = script_text
        fields["script_path"] = script_path
        fields["args"] = list(script_args)
    if s["mem"] is not None and s["mem"].member != "mem_per_gpu_mib":
        fields[s["mem"].member] = s["mem"].parsed
    if s["gpus"] is not None:
        fields["gpus"] = s["gpus"].parsed
    begin, deadline = s.get("begin"), s.get("deadline")
    if begin is not None and deadline is not None and deadline <= begin:
        errors.append(InvalidOption("--deadline", deadline.isoformat(), f"a time after --begin ({begin.isoformat()})"))

    nodes, nodes_max = s.get("nodes", 1), s.get("nodes_max")
    nodelist = s.get("nodelist") or []
    if nodelist and set(nodelist) & set(s.get("exclude") or []):
        both = sorted(set(nodelist) & set(s["exclude"]))
        errors.append(InvalidOption("--exclude", ",".join(both), "hosts not also required by --nodelist"))
    if len(nodelist) > nodes:
        # Slurm allocates every listed host, so the node count grows to the list.
        if "nodes" in s and (nodes_max or nodes) < len(nodelist):
            errors.append(InvalidOption("--nodelist", ",".join(nodelist), f"at most {nodes_max or nodes} hosts for --nodes"))
        nodes = len(nodelist)
        if nodes_max is not None and nodes_max <= nodes:
            nodes_max = None
    if "ntasks" in s:
        ntasks = s["ntasks"]
        if ntasks < nodes:
            warnings.append(f"can't run {ntasks} tasks on {nodes} nodes, setting --nodes to {ntasks}")
            nodes, nodes_max = ntasks, None
    else:
        ntasks = nodes  # sbatch: the default is one task per node
    fields.update(nodes=nodes, nodes_max=nodes_max, ntasks=ntasks)

    spec = _validated(fields, errors)
    if spec is not None:
        spec = _per_gpu(spec, s, fields, errors)
    if errors:
        raise errors[0] if len(errors) == 1 else InvalidOptions(errors)
    assert spec is not None
    return Submission(
        spec=spec,
        parsable=bool(s.get("parsable")),
        dry_run=bool(s.get("dry_run")),
        json=bool(s.get("json")),
        warnings=list(dict.fromkeys(warnings)),
    )
