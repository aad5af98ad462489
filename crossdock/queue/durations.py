"""Durations, read and written one way everywhere.

Read: :func:`parse_duration` takes ``N[unit]`` with Slurm's unit words (``90s``, ``15m``,
``2hours``, ``1d``, ``1w``; a bare number is seconds): ``crossdock events --since 15m``, the
``now+2hours`` of sacct's ``-S``/``-E`` and of sbatch's ``--begin``. (A time limit,
``-t 1-12:00``, is Slurm's own form: :func:`crossdock.queue.sbatch_formats.parse_time`.)
Written: :func:`duration` is squeue's (``M:SS``, ``H:MM:SS``, ``D-HH:MM:SS``: TIME, TIME_LIMIT),
:func:`clock` sacct's Elapsed (``HH:MM:SS``). Pure: standard library only.
"""

from __future__ import annotations

import re

UNITS = {"": 1, "s": 1, "sec": 1, "second": 1, "seconds": 1, "m": 60, "min": 60, "minute": 60, "minutes": 60,
         "h": 3600, "hour": 3600, "hours": 3600, "d": 86400, "day": 86400, "days": 86400,
         "w": 604800, "week": 604800, "weeks": 604800}
"""Slurm's time units (``src/common/parse_time.c``), in seconds; no unit is seconds."""
UNIT_WORDS = "seconds, minutes, hours, days or weeks (s, m, h, d, w)"
_DURATION = re.compile(r"(\d{1,12}(?:\.\d{1,9})?)([a-z]*)", re.ASCII)


def parse_duration(text: str) -> float | None:
    """Seconds in ``N[unit]`` (case-insensitive); None when ``text`` is not that form. Raises
    ValueError for a number with a unit Slurm does not know (``3fortnights``)."""
    m = _DURATION.fullmatch(text.strip().lower())
    if m is None:
        return None
    if m[2] not in UNITS:
        raise ValueError(f"unknown unit {m[2]!r} in {text!r}; use {UNIT_WORDS}")
    return float(m[1]) * UNITS[m[2]]


def _parts(seconds: int | float) -> tuple[int, int, int, int]:
    d, rem = divmod(max(0, int(seconds)), 86400)
    h, rem = divmod(rem, 3600)
    return (d, h, *divmod(rem, 60))  # type: ignore[return-value]


def duration(seconds: int | float | None, unlimited: str = "UNLIMITED") -> str:
    """Slurm's secs2time_str: M:SS, H:MM:SS, D-HH:MM:SS."""
    if seconds is None:
        return unlimited
    d, h, m, s = _parts(seconds)
    if d:
        return f"{d}-{h:02d}:{m:02d}:{s:02d}"
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


def clock(seconds: int | float) -> str:
    """sacct's Elapsed: HH:MM:SS, D-HH:MM:SS past a day."""
    d, h, m, s = _parts(seconds)
    return f"{d}-{h:02d}:{m:02d}:{s:02d}" if d else f"{h:02d}:{m:02d}:{s:02d}"
