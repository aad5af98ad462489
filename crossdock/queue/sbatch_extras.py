"""Formats of sbatch's timing, signal, feature and license options, as Slurm reads them.

- ``--begin``/``--deadline``: Slurm's ``parse_time`` (src/common/parse_time.c): ``now[+N[unit]]``,
  ``HH:MM[:SS][AM|PM]``, ``YYYY-MM-DD[THH:MM[:SS]]``, ``MMDD[YY]``, ``MM/DD[/YY]``, ``MM.DD[.YY]``,
  the words ``midnight noon elevenses fika teatime today tomorrow``, and a date then a time
  (``2026-01-02T10:00`` or ``10:00 01/02``). A time of day already past means tomorrow.
- ``--signal``: ``[{R|B}:]<sig_num>[@sig_time]`` (``get_signal_opts``): a number or a name with
  or without ``SIG``; ``sig_time`` seconds before the limit, 60 by default, at most 65535.
- ``--constraint``: feature names joined by ``&`` (and) or ``|`` (or), ``[...]`` groups and
  ``*N`` counts kept as written for Slurm; :func:`constraint_terms` gives the and-of-ors a pool
  maps to node labels.
- ``--licenses``: ``name[:count]`` joined by ``,`` (all) or ``|`` (any).
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta

from crossdock.queue.durations import parse_duration
from crossdock.queue.errors import InvalidOption
from crossdock.queue.models import KillSignal

BEGIN_FORMS = ("now[+N[seconds|minutes|hours|days|weeks]], HH:MM[:SS][AM|PM], YYYY-MM-DD[THH:MM[:SS]],"
               " MMDD[YY], MM/DD[/YY], midnight, noon, elevenses, fika, teatime, today or tomorrow")
SIGNAL_FORMS = "[{R|B}:]<sig_num>[@sig_time], e.g. USR1@90, B:SIGTERM, 10 (sig_time 0-65535 s, default 60)"
CONSTRAINT_FORMS = "feature names joined by & (and) or | (or), e.g. a100&ib or [rack1|rack2]"
LICENSES_FORMS = "name[:count] joined by , (all) or | (any), e.g. matlab:2,ansys"

_WORDS = {"midnight": 0, "elevenses": 11, "noon": 12, "fika": 15, "teatime": 16}
_NOW = re.compile(r"now(?:([+-])(\d{1,9})([a-z]*))?", re.ASCII)
_ISO = re.compile(r"(\d{4})-(\d{1,2})-(\d{1,2})(?:t(\d{1,2}):(\d{1,2})(?::(\d{1,2}))?)?", re.ASCII)
_CLOCK = re.compile(r"(\d{1,2}):(\d{1,2})(?::(\d{1,2}))?\s*(am|pm)?", re.ASCII)
_DATE = re.compile(r"(\d{2})([/.]?)(\d{2})(?:\2(\d{2}))?", re.ASCII)


def _at(day: datetime, hour: int, minute: int = 0, second: int = 0) -> datetime:
    return day.replace(hour=hour, minute=minute, second=second, microsecond=0)


def parse_begin(value: str, now: datetime, option: str = "--begin") -> datetime:
    """The time ``value`` names, read as Slurm's ``parse_time`` reads it at ``now``."""
    text = value.strip().lower() if isinstance(value, str) and value.isascii() else ""
    try:
        if m := _NOW.fullmatch(text):
            if m[1] is None:
                return now.replace(microsecond=0)
            delta = timedelta(seconds=parse_duration(m[2] + m[3]) or 0)  # ValueError: an unknown unit
            return (now + delta if m[1] == "+" else now - delta).replace(microsecond=0)
        if m := _ISO.fullmatch(text):
            y, mo, d, hh, mm, ss = (int(g) if g else 0 for g in m.groups())
            return datetime(y, mo, d, hh, mm, ss, tzinfo=now.tzinfo)
        if text in ("today", "tomorrow"):
            return _at(now, 0) + timedelta(days=1 if text == "tomorrow" else 0)
        words = text.split()
        if len(words) in (1, 2):
            return _clock_and_date(words, now)
    except ValueError:
        pass
    raise InvalidOption(option, value, BEGIN_FORMS)


def _clock_and_date(words: list[str], now: datetime) -> datetime:
    clock: tuple[int, int, int] | None = None
    day: datetime | None = None
    for word in words:
        if word in _WORDS and clock is None:
            clock = (_WORDS[word], 0, 0)
        elif (m := _CLOCK.fullmatch(word)) and clock is None:
            hour, minute, second = int(m[1]), int(m[2]), int(m[3] or 0)
            if m[4]:
                if not 1 <= hour <= 12:
                    raise ValueError
                hour = hour % 12 + (12 if m[4] == "pm" else 0)
            clock = (hour, minute, second)
        elif (m := _DATE.fullmatch(word)) and day is None:
            month, mday = int(m[1]), int(m[3])
            year = 2000 + int(m[4]) if m[4] else now.year
            day = _at(now, 0).replace(year=year, month=month, day=mday)
            if not m[4] and day < _at(now, 0):
                day = day.replace(year=year + 1)  # a month and day already past: next year's
        else:
            raise ValueError
    if clock is None:
        assert day is not None
        return day
    at = _at(day or now, *clock)
    if day is None and at < now:
        at += timedelta(days=1)  # a time of day already past: tomorrow's
    return at


# Linux's numbers (what Slurm's sig_name2num gives on Linux); a table, as the pure core imports no ``signal``.
SIGNALS = {name: n for n, name in enumerate(
    "HUP INT QUIT ILL TRAP ABRT BUS FPE KILL USR1 SEGV USR2 PIPE ALRM TERM STKFLT CHLD CONT STOP TSTP TTIN TTOU"
    " URG XCPU XFSZ VTALRM PROF WINCH IO PWR SYS".split(), start=1)}
_NAMES = {n: name for name, n in SIGNALS.items()}
_SIGNAL = re.compile(r"(?:([RB]{1,2}):)?([^@]+)(?:@(.*))?", re.ASCII)


def parse_signal(value: str, option: str = "--signal") -> KillSignal:
    m = _SIGNAL.fullmatch(value) if isinstance(value, str) else None
    if m is None or (m[1] and len(set(m[1])) != len(m[1])):
        raise InvalidOption(option, value, SIGNAL_FORMS)
    name = m[2].upper()
    if name.isdigit():
        number = int(name) if len(name) < 4 else 0
    else:
        number = SIGNALS.get(name.removeprefix("SIG"), 0)
    seconds = 60
    if m[3] is not None:
        if not m[3].isdigit() or len(m[3]) > 5 or int(m[3]) > 0xFFFF:
            raise InvalidOption(option, value, SIGNAL_FORMS)
        seconds = int(m[3])
    if not 1 <= number <= 64:
        raise InvalidOption(option, value, SIGNAL_FORMS)
    flags = m[1] or ""
    return KillSignal(number=number, seconds=seconds, batch_only="B" in flags, reservation="R" in flags)


def format_signal(sig: KillSignal) -> str:
    """Back to sbatch's form, for Slurm: ``B:USR1@90``."""
    flags = ("R" if sig.reservation else "") + ("B" if sig.batch_only else "")
    name = _NAMES.get(sig.number, str(sig.number))
    return f"{flags + ':' if flags else ''}{name}@{sig.seconds}"


_FEATURE = re.compile(r"[A-Za-z0-9_.\-=:]+(?:\*\d+)?", re.ASCII)


def parse_constraint(value: str, option: str = "--constraint") -> str:
    """``value`` checked for balanced brackets and feature names; kept as written."""
    depth = 0
    for token in re.split(r"([&|,\[\]()])", value or ""):
        if not token:
            continue
        if token in "[(":
            depth += 1
        elif token in "])":
            depth -= 1
            if depth < 0:
                break
        elif token not in "&|," and not _FEATURE.fullmatch(token):
            break
    else:
        if depth == 0 and value and constraint_terms(value):
            return value
    raise InvalidOption(option, value, CONSTRAINT_FORMS)


def constraint_terms(value: str) -> list[tuple[str, ...]]:
    """The features as an and (outer list) of ors (inner tuples); ``[a|b]`` (all nodes alike)
    reads as an or, which is stricter per node. ``*N`` counts are dropped here."""
    terms: list[tuple[str, ...]] = []
    for part in re.split(r"[&,]", re.sub(r"[\[\]()]", "", value)):
        names = tuple(re.sub(r"\*\d+$", "", f) for f in part.split("|") if f)
        if names:
            terms.append(names)
    return terms


_LICENSE = re.compile(r"([A-Za-z0-9_.\-@]+)(?:[:=](\d{1,9}))?", re.ASCII)


def parse_licenses(value: str, option: str = "--licenses") -> str:
    if not isinstance(value, str) or ("," in value and "|" in value):
        raise InvalidOption(option, value, LICENSES_FORMS + "; not , and | together")
    sep = "|" if "|" in value else ","
    out = []
    for item in value.split(sep):
        m = _LICENSE.fullmatch(item)
        if m is None or (m[2] is not None and int(m[2]) < 1):
            raise InvalidOption(option, value, LICENSES_FORMS)
        out.append(f"{m[1]}:{int(m[2] or 1)}")
    return sep.join(out)
