"""Counted licenses (sbatch's ``--licenses=name[:count],…``): the config's ``licenses:`` says how
many of each exist; running (and dispatched) jobs hold what they asked for, and a job that would
take a license past its count waits with reason ``Licenses``, as in Slurm. A license the config
does not declare is not counted here (a Slurm pool's own ``Licenses=`` judges it)."""

from __future__ import annotations

from collections import Counter
from typing import Iterable, Mapping


def asked(text: str | None, counted: Mapping[str, int]) -> tuple[tuple[str, int], ...]:
    """The counted licenses of a normalized ``--licenses`` value (``name:count`` joined by ``,``)."""
    if not text or not counted:
        return ()
    out: Counter[str] = Counter()
    for item in text.split(","):
        name, _, count = item.partition(":")
        if name in counted:
            out[name] += int(count or 1)
    return tuple(sorted(out.items()))


def in_use(held: Iterable[str | None], counted: Mapping[str, int]) -> dict[str, int]:
    """License name → how many the given jobs' ``--licenses`` values hold."""
    total: Counter[str] = Counter()
    for text in held:
        for name, n in asked(text, counted):
            total[name] += n
    return dict(total)


class LicenseLedger:
    """What a cycle may still hand out, booked as it admits jobs."""

    def __init__(self, counted: Mapping[str, int], used: Mapping[str, int]):
        self.counted, self.used = counted, Counter(used)

    def check(self, licenses: tuple[tuple[str, int], ...]) -> str | None:
        for name, n in licenses:
            if self.used[name] + n > self.counted[name]:
                return (f"license {name}: {self.used[name]} of {self.counted[name]} held by running jobs;"
                        f" this job needs {n}")
        return None

    def add(self, licenses: tuple[tuple[str, int], ...], sign: int = 1) -> None:
        for name, n in licenses:
            self.used[name] += sign * n
