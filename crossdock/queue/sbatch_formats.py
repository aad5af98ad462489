"""Value parsers for sbatch options, with Slurm's own formats and rounding.

Each parser takes the option's text and returns crossdock's normalized value (seconds, MiB,
model objects), or raises :class:`InvalidOption` naming the option, the value and the forms
it accepts. The rules follow Slurm's sources where its manual is silent:

* ``--time``: ``time_str2mins`` (``src/common/parse_time.c``): seconds round up to whole
  minutes (returned as seconds, so always a multiple of 60); ``0``, ``-1``, ``INFINITE`` and
  ``UNLIMITED`` mean no limit.
* ``--mem``: ``str_to_mbytes`` (``src/common/proc_args.c``): MiB by default, ``K`` rounds up,
  an optional ``B`` after the unit (``4GB``); ``0`` is kept (all the memory of a node).
* ``--gres``: ``name[:type][:count]``, count suffixes K/M/G/T/P multiply by powers of 1024.
* ``--array``: ``MaxArraySize`` bounds the task *ids*, not the task count.
* ``--dependency``: ``,`` means all, ``?`` means any, never both (the man page's rule; 22.05
  itself lets a mix through); a bare job id means ``afterany`` (Slurm's oldest form, ``,``
  only); ``+minutes`` must be >= 1 and, as in slurmctld, is read after any type.

Nothing here performs I/O.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import TypeVar

from pydantic import BaseModel, ValidationError

from crossdock.queue import hostlist
from crossdock.queue.errors import InvalidOption
from crossdock.queue.models import (
    MAX_GPUS,
    MAX_TIME_LIMIT_SECONDS,
    ArraySpec,
    Dependency,
    DependencySpec,
    DependencyType,
    GpuRequest,
    Gres,
)

M = TypeVar("M", bound=BaseModel)

# Slurm's NICE_OFFSET is 0x80000000; sbatch accepts +/- (NICE_OFFSET - 3).
NICE_LIMIT = 2147483645
# --nice without a value lowers the priority by 100 (sbatch man page).
NICE_DEFAULT = 100
# Slurm's default MaxArraySize: task ids 0..1000.
DEFAULT_MAX_ARRAY_SIZE = 1001
MAX_HOSTLIST_HOSTS = hostlist.MAX_HOSTS

TIME_FORMS = (
    "minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM or D-HH:MM:SS; "
    "0, -1, UNLIMITED or INFINITE for no limit; at most 365 days (365-00:00:00)"
)
MEM_FORMS = "a whole number of MiB, or with a K, M, G or T suffix (e.g. 500, 4G, 1024K); 0 = all of a node's memory"
GRES_FORMS = "name[:type][:count] in a comma list, e.g. gpu:2, gpu:a100:2, gpu:a100 (count 0: none); or none"
GPUS_FORMS = "[type:]count with count >= 1, e.g. 2, a100:2 or a100 (one)"
ARRAY_FORMS = (
    "ids and ranges in a comma list, a range may take :step, then an optional %max_running "
    "(e.g. 0-15:4%2, 1,3,5-7); ids from 0 to {max_id}"
)
DEPENDENCY_FORMS = (
    "type:job_id[:job_id...] joined by ',' (all) or '?' (any), not both; types: after, afterany, "
    "afterok, afternotok, aftercorr, afterburstbuffer, singleton; job_id may be N, N_task, N_[tasks] or N_*, "
    "with +minutes (>= 1) of delay, e.g. after:12+5; empty: no dependency"
)
NODES_FORMS = "a count or min-max with counts >= 1, e.g. 2 or 2-4 (k suffix = x1024)"
COUNT_FORMS = "a whole number >= 1"
NICE_FORMS = f"a whole number from -{NICE_LIMIT} to {NICE_LIMIT}; no value means {NICE_DEFAULT}"
EXPORT_FORMS = "ALL, NONE, or [ALL,|NONE,]VAR[=value][,VAR[=value]...]"
HOSTLIST_FORMS = "host names or ranges in a comma list, e.g. node1,node[3-5,07-09]"

# re.ASCII throughout: \d and str.isdigit() also take '١٢' and '²', which int() reads or refuses;
# at most 18 digits, so that every number fits an int64 (and int() never meets 4,300 digits).
_TIME_DAYS = re.compile(r"(\d{1,18})-(?:(\d{1,18})(?::(\d{1,18})(?::(\d{1,18}))?)?)?", re.ASCII)
_TIME_PLAIN = re.compile(r"(\d{1,18})(?::(\d{1,18})(?::(\d{1,18}))?)?", re.ASCII)
_NO_LIMIT = {"-1", "INFINITE", "UNLIMITED"}


def _bounded(model: type[M], option: str, value: str, forms: str, **fields: object) -> M:
    """``model(**fields)``, its bounds (a count past 2**31, a job id past 2**53) refused as this option's value."""
    try:
        return model(**fields)
    except ValidationError as exc:
        err = exc.errors()[0]
        raise InvalidOption(option, value, f"{forms} ({err['loc'][0] if err['loc'] else 'value'}:"
                                           f" {err['msg'].removeprefix('Value error, ')})") from None


def is_ascii_number(text: str) -> bool:
    """``0``-``9`` only: ``str.isdigit()`` also accepts ``'١٢'`` (which ``int`` reads as 12) and ``'²'``
    (which it refuses)."""
    return text.isascii() and text.isdigit() and len(text) <= 18


def parse_time(value: str, option: str = "--time") -> int | None:
    """Seconds of a Slurm time limit, rounded up to whole minutes as Slurm does (``1:30`` is
    120); ``None`` when there is no limit."""
    text = value if isinstance(value, str) and value.isascii() else ""
    if text.upper() in _NO_LIMIT:
        return None
    if m := _TIME_DAYS.fullmatch(text):
        days, hours, minutes, seconds = (int(g) if g else 0 for g in m.groups())
    elif m := _TIME_PLAIN.fullmatch(text):
        a, b, c = m.groups()
        days = 0
        if c is not None:  # HH:MM:SS
            hours, minutes, seconds = int(a), int(b), int(c)
        else:  # minutes[:seconds]
            hours, minutes, seconds = 0, int(a), int(b) if b else 0
    else:
        raise InvalidOption(option, value, TIME_FORMS)
    total = ((days * 24 + hours) * 60 + minutes) * 60 + seconds
    if total == 0:
        return None  # sbatch: a time limit of zero means no limit
    limit = -(-total // 60) * 60
    if limit > MAX_TIME_LIMIT_SECONDS:
        raise InvalidOption(option, value, TIME_FORMS)
    return limit


_MEM = re.compile(r"(\d{1,18})(?:([KkMmGgTt])[Bb]?)?", re.ASCII)
_MEM_FACTORS = {"m": 1, "g": 1024, "t": 1024 * 1024}


def parse_mem(value: str, option: str = "--mem") -> int:
    """MiB for ``--mem``/``--mem-per-cpu``: ``1K`` is 1 MiB (rounded up), ``2G`` is 2048."""
    m = _MEM.fullmatch(value) if isinstance(value, str) else None
    if m is None:
        raise InvalidOption(option, value, MEM_FORMS)
    number, unit = int(m.group(1)), (m.group(2) or "m").lower()
    if unit == "k":
        return -(-number // 1024)
    return number * _MEM_FACTORS[unit]


_COUNT_SUFFIX = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40, "p": 1 << 50}
_GRES_COUNT = re.compile(r"(\d{1,18})([KkMmGgTtPp]?)", re.ASCII)
_GRES_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]*")
_GRES_TYPE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.\-]*")


def _gres_count(text: str) -> int | None:
    m = _GRES_COUNT.fullmatch(text)
    if m is None:
        return None
    return int(m.group(1)) * _COUNT_SUFFIX[m.group(2).lower()]


def parse_gres(value: str, option: str = "--gres") -> list[Gres]:
    """Per-node generic resources: ``gpu:a100:2,nvme:1`` -> two :class:`Gres`."""
    if not isinstance(value, str) or not value:
        raise InvalidOption(option, value, GRES_FORMS)
    if value.lower() == "none":
        return []
    out: list[Gres] = []
    seen: set[tuple[str, str | None]] = set()
    for item in value.split(","):
        parts = item.split(":")
        if len(parts) > 3 or not _GRES_NAME.fullmatch(parts[0]):
            raise InvalidOption(option, value, GRES_FORMS)
        name, gtype, count = parts[0], None, 1
        if len(parts) == 2:
            c = _gres_count(parts[1])
            if c is None:
                gtype = parts[1]
            else:
                count = c
        elif len(parts) == 3:
            gtype = parts[1]
            c = _gres_count(parts[2])
            if c is None:
                raise InvalidOption(option, value, GRES_FORMS)
            count = c
        if gtype is not None and not _GRES_TYPE.fullmatch(gtype):
            raise InvalidOption(option, value, GRES_FORMS)
        if count == 0:
            continue  # Slurm reads a zero count as none of it
        if name == "gpu" and count > MAX_GPUS:
            raise InvalidOption(option, value, GRES_FORMS + f" (at most {MAX_GPUS} GPUs per node)")
        if (name, gtype) in seen:
            raise InvalidOption(option, value, GRES_FORMS + f" (each name:type once; {item!r} repeats)")
        seen.add((name, gtype))
        out.append(_bounded(Gres, option, value, GRES_FORMS, name=name, type=gtype, count=count))
    return out


def parse_gpus(value: str, per: str = "job", option: str | None = None) -> GpuRequest:
    """``--gpus``/``--gpus-per-node``/``--gpus-per-task``: ``[type:]count``.

    Slurm also takes a comma list of several types (``a100:2,v100:1``); crossdock places one
    GPU model per request, so a list is refused with that reason.
    """
    option = option or {"job": "--gpus", "node": "--gpus-per-node", "task": "--gpus-per-task"}[per]
    if not isinstance(value, str) or not value:
        raise InvalidOption(option, value, GPUS_FORMS)
    if "," in value:
        raise InvalidOption(option, value, GPUS_FORMS + " (one GPU type per request)")
    parts = value.split(":")
    if len(parts) == 1:
        gtype, count = None, _gres_count(parts[0])
        if count is None and _GRES_TYPE.fullmatch(value) and not is_ascii_number(value):
            gtype, count = value, 1  # "-G a100": one GPU of that type, as Slurm reads it
    elif len(parts) == 2:
        gtype, count = parts[0], _gres_count(parts[1])
        if not _GRES_TYPE.fullmatch(gtype):
            count = None
    else:
        count = None
    if count is None or count < 1:
        raise InvalidOption(option, value, GPUS_FORMS)
    return _bounded(GpuRequest, option, value, GPUS_FORMS, count=count, type=gtype, per=per)


_ARRAY_ITEM = re.compile(r"(\d{1,18})(?:-(\d{1,18})(?::(\d{1,18}))?)?", re.ASCII)


def parse_array(value: str, max_array_size: int = DEFAULT_MAX_ARRAY_SIZE, option: str = "--array") -> ArraySpec:
    """Task ids and throttle of ``--array``: ``0-15:4%2`` -> ids [0, 4, 8, 12], 2 at a time."""
    accepted = ARRAY_FORMS.format(max_id=max_array_size - 1)
    if not isinstance(value, str) or not value:
        raise InvalidOption(option, value, accepted)
    body, sep, throttle = value.partition("%")
    # Slurm's bit_unfmt takes the ids inside brackets too: [0-15], [1,3,5-7]%2
    body = body.removeprefix("[").removesuffix("]")
    max_running = None
    if sep:
        if not is_ascii_number(throttle):
            raise InvalidOption(option, value, accepted + " (%max_running is a whole number)")
        # %0 is Slurm's "no throttle" (ArrayTaskThrottle=0).
        max_running = int(throttle) or None
    ids: set[int] = set()
    for item in body.split(","):
        if not item and body:
            continue  # sbatch accepts "1,,2" and reads it as "1,2"
        m = _ARRAY_ITEM.fullmatch(item)
        if m is None:
            raise InvalidOption(option, value, accepted)
        first = int(m.group(1))
        last = int(m.group(2)) if m.group(2) is not None else first
        step = int(m.group(3)) if m.group(3) is not None else 1
        if last < first or step < 1:
            raise InvalidOption(option, value, accepted + " (ranges go up, step >= 1)")
        if last >= max_array_size:
            raise InvalidOption(option, value, accepted + f" (MaxArraySize is {max_array_size})")
        ids.update(range(first, last + 1, step))
    if not ids:
        raise InvalidOption(option, value, accepted)
    return _bounded(ArraySpec, option, value, accepted, task_ids=sorted(ids), max_running=max_running)


_DEP_JOB = re.compile(r"(\d{1,18})(?:_(\d{1,18}|\*|\[[0-9,\-]+\]))?(?:\+(\d{1,18}))?", re.ASCII)
_DEP_TYPES = {t.value: t for t in DependencyType}


def _dep_jobs(dtype: DependencyType, text: str, value: str, option: str) -> list[Dependency]:
    m = _DEP_JOB.fullmatch(text)
    if m is None or int(m.group(1)) < 1:
        raise InvalidOption(option, value, DEPENDENCY_FORMS)
    job_id, task, delay = m.groups()
    if delay is not None and int(delay) < 1:
        raise InvalidOption(option, value, DEPENDENCY_FORMS + " (+minutes >= 1)")
    if task is not None and task.startswith("["):
        # N_[1-3,5]: each of those tasks (Slurm's array-task dependency list)
        tasks: list[int | None] = list(parse_array(task[1:-1], 2**31, option).task_ids)
    else:
        # N_* names every task of array N, which is what plain N means.
        tasks = [int(task) if task not in (None, "*") else None]
    return [_bounded(Dependency, option, value, DEPENDENCY_FORMS, type=dtype, job_id=int(job_id), array_task=t,
                     delay_minutes=int(delay) if delay is not None else None) for t in tasks]


def parse_dependency(value: str, option: str = "--dependency") -> DependencySpec:
    """``afterok:12:13_2,singleton`` -> AND of three; ``afterok:12?afternotok:12`` -> OR."""
    if not isinstance(value, str) or not value:
        raise InvalidOption(option, value, DEPENDENCY_FORMS)
    if "," in value and "?" in value:
        raise InvalidOption(option, value, DEPENDENCY_FORMS + " (mixing ',' and '?' is not allowed)")
    combine = "OR" if "?" in value else "AND"
    deps: list[Dependency] = []
    for item in value.split("?" if combine == "OR" else ","):
        head, _, rest = item.partition(":")
        dtype = _DEP_TYPES.get(head.lower())
        if dtype is DependencyType.SINGLETON:
            if rest or ":" in item:
                raise InvalidOption(option, value, DEPENDENCY_FORMS + " (singleton takes no job id)")
            deps.append(Dependency(type=dtype))
        elif dtype is not None:
            if not rest:
                raise InvalidOption(option, value, DEPENDENCY_FORMS + f" ({dtype.value} needs a job id)")
            deps.extend(d for job in rest.split(":") for d in _dep_jobs(dtype, job, value, option))
        elif is_ascii_number(item[:1]) and ":" not in item and combine == "AND":
            # Slurm's oldest form: a bare job id (comma-separated only) means afterany.
            deps.extend(_dep_jobs(DependencyType.AFTERANY, item, value, option))
        else:
            raise InvalidOption(option, value, DEPENDENCY_FORMS)
    return DependencySpec(combine=combine, deps=deps)


def parse_count(value: str, option: str) -> int:
    """A positive whole number (``-c``, ``-n``, ``--ntasks-per-node``); zero and negatives are errors."""
    if not isinstance(value, str) or not is_ascii_number(value) or int(value) < 1:
        raise InvalidOption(option, value, COUNT_FORMS)
    return int(value)


_NODE_COUNT = re.compile(r"(\d{1,18})([KkMm]?)", re.ASCII)


def _node_count(text: str) -> int | None:
    m = _NODE_COUNT.fullmatch(text)
    if m is None:
        return None
    return int(m.group(1)) * _COUNT_SUFFIX[m.group(2).lower()]


def parse_nodes(value: str, option: str = "--nodes") -> tuple[int, int | None]:
    """``-N 2`` -> (2, None); ``-N 2-4`` -> (2, 4)."""
    if not isinstance(value, str):
        raise InvalidOption(option, value, NODES_FORMS)
    low_text, sep, high_text = value.partition("-")
    low = _node_count(low_text)
    high = _node_count(high_text) if sep else None
    if low is None or low < 1 or (sep and (high is None or high < low)):
        raise InvalidOption(option, value, NODES_FORMS)
    if high == low:
        high = None
    return low, high


def parse_nice(value: str | None, option: str = "--nice") -> int:
    if value is None:
        return NICE_DEFAULT
    if not re.fullmatch(r"[+-]?\d{1,18}", value or "", re.ASCII) or abs(int(value)) > NICE_LIMIT:
        raise InvalidOption(option, value, NICE_FORMS)
    return int(value)


_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def parse_export(value: str, option: str = "--export") -> tuple[str, dict[str, str]]:
    """``--export`` -> (mode, assignments).

    The mode is ``ALL``, ``NONE``, or a comma list of variable names to copy from the
    submitting environment; the assignments are the ``VAR=value`` items, set on top. As in
    Slurm, without ``ALL`` only the named variables (and ``SLURM_*``) reach the job.
    """
    if not isinstance(value, str) or not value:
        raise InvalidOption(option, value, EXPORT_FORMS)
    if value.upper() in ("ALL", "NONE"):
        return value.upper(), {}
    items = value.split(",")
    everything = items[0].upper() == "ALL"
    if items[0].upper() in ("ALL", "NONE"):
        items = items[1:]
    names: list[str] = []
    assigned: dict[str, str] = {}
    for item in items:
        name, eq, val = item.partition("=")
        if not _ENV_NAME.fullmatch(name):
            raise InvalidOption(option, value, EXPORT_FORMS + f" ({name!r} is not a variable name)")
        if eq:
            assigned[name] = val
        elif name not in names:
            names.append(name)
    if everything:
        return "ALL", assigned
    return (",".join(names) if names else "NONE"), assigned


def export_environment(mode: str, assigned: dict[str, str], submit_env: dict[str, str]) -> dict[str, str]:
    """The job environment Slurm builds at submit time from ``--export``.

    ``ALL``: the whole submitting environment; ``NONE``: only its ``SLURM_*`` variables; a
    name list: those names plus ``SLURM_*``. Explicit assignments win.
    """
    if mode == "ALL":
        env = dict(submit_env)
    else:
        wanted = set() if mode == "NONE" else set(mode.split(","))
        env = {k: v for k, v in submit_env.items() if k in wanted or k.startswith("SLURM_")}
    env.update(assigned)
    return env


_HOST_CHARS = re.compile(r"[A-Za-z0-9_.\-]+")


def parse_hostlist(value: str, option: str = "--nodelist") -> list[str]:
    """``--nodelist``/``--exclude``: ``node[1-3,07-08],login`` -> node1, node2, node3, node07, node08, login.

    The grammar is :mod:`crossdock.queue.hostlist`'s; here the hosts must also be plain names,
    and duplicates are dropped (order kept). A value containing ``/`` is a file name in Slurm;
    crossdock does not read files while parsing, so that is refused.
    """
    if not isinstance(value, str) or not value or "/" in value:
        raise InvalidOption(option, value, HOSTLIST_FORMS + ("; node files are not supported" if "/" in str(value) else ""))
    try:
        hosts = hostlist.expand_hostlist(value, MAX_HOSTLIST_HOSTS)
    except hostlist.HostlistError as exc:
        raise InvalidOption(option, value, f"{HOSTLIST_FORMS} ({exc.problem})") from None
    for host in hosts:
        if not _HOST_CHARS.fullmatch(host):
            raise InvalidOption(option, value, f"{HOSTLIST_FORMS} (bad host {host!r}: letters, digits, '_', '.', '-')")
    return list(dict.fromkeys(hosts))


def format_array(task_ids: Iterable[int], max_running: int | None = None) -> str:
    """The inverse of :func:`parse_array` (ranges collapsed), for display."""
    ids = sorted(set(task_ids))
    runs: list[str] = []
    i = 0
    while i < len(ids):
        j = i
        while j + 1 < len(ids) and ids[j + 1] == ids[j] + 1:
            j += 1
        runs.append(str(ids[i]) if i == j else f"{ids[i]}-{ids[j]}")
        i = j + 1
    text = ",".join(runs)
    return f"{text}%{max_running}" if max_running else text
