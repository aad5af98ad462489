"""Slurm hostlist expressions, expanded to host names: ``node[1-3,07]``, ``rack[1-2]-n[1-2]``.

The one implementation in crossdock: the sbatch parser (``--nodelist``, ``--exclude``) and the
Slurm backend (node lists in squeue, sacct, scontrol and slurmrestd output) both call it. The
grammar is Slurm's (``src/common/hostlist.c``; the cases in the tests were checked against
``scontrol show hostnames`` of Slurm 22.05):

* a comma list of host expressions; commas inside brackets separate ranges;
* an expression is text with any number of bracket groups, expanded as a product with the
  leftmost group slowest: ``r[1-2]n[1-2]`` -> r1n1 r1n2 r2n1 r2n2;
* a group is a comma list of ``N`` or ``LO-HI`` with LO <= HI, digits only; every number is
  padded to the width of LO as written: ``n[01-10]`` -> n01 .. n10, ``n[8-11]`` -> n8 .. n11,
  ``n[9-011]`` -> n9 n10 n11;
* order and duplicates are kept, as scontrol keeps them; callers that want a set drop them.

Where Slurm is lenient with broken text (``n[1-2`` gives ``n]``, ``n[1-]`` gives ``n1``, an
empty item between commas is skipped), this refuses it with a :class:`HostlistError` that names
the problem. Text after the last group (``n[1-2].ib``), which Slurm 22.05 refuses, is read as a
suffix (n1.ib n2.ib), as python-hostlist reads it. Pure: no I/O, standard library only.
"""

from __future__ import annotations

from crossdock.queue.errors import CrossdockError

MAX_HOSTS = 1 << 16
"""An expression that expands past this is almost surely a typo (``node[1-99999999]``)."""


class HostlistError(CrossdockError, ValueError):
    """A hostlist expression that does not follow the grammar; ``problem`` says where."""

    def __init__(self, text: str, problem: str):
        self.text, self.problem = text, problem
        super().__init__(f"hostlist {text!r}: {problem}")


def expand_hostlist(text: str, max_hosts: int = MAX_HOSTS) -> list[str]:
    """The host names of ``text``, in order; ``""`` is no host."""
    hosts: list[str] = []
    if not text:
        return hosts
    for expr in _split_top(text):
        if not expr:
            raise HostlistError(text, "empty host name between commas")
        hosts.extend(_expand_expr(text, expr, max_hosts - len(hosts), max_hosts))
    return hosts


def _split_top(text: str) -> list[str]:
    """Split on the commas outside brackets, checking that brackets pair up and do not nest."""
    parts: list[str] = []
    start, open_at = 0, -1
    for i, ch in enumerate(text):
        if ch == "[":
            if open_at >= 0:
                raise HostlistError(text, f"'[' at {i} inside the bracket opened at {open_at}; brackets do not nest")
            open_at = i
        elif ch == "]":
            if open_at < 0:
                raise HostlistError(text, f"']' at {i} has no '[' before it")
            open_at = -1
        elif ch == "," and open_at < 0:
            parts.append(text[start:i])
            start = i + 1
    if open_at >= 0:
        raise HostlistError(text, f"'[' at {open_at} is never closed")
    parts.append(text[start:])
    return parts


def _expand_expr(text: str, expr: str, room: int, max_hosts: int) -> list[str]:
    """The hosts of one expression, at most ``room`` of them (what ``max_hosts`` leaves)."""
    hosts = [""]
    rest = expr
    while (open_at := rest.find("[")) >= 0:
        close_at = rest.index("]", open_at)  # _split_top made sure it is there
        prefix, body, rest = rest[:open_at], rest[open_at + 1:close_at], rest[close_at + 1:]
        numbers = _numbers(text, body, room, max_hosts)
        if len(hosts) * len(numbers) > room:
            raise HostlistError(text, f"expands to more than {max_hosts} hosts")
        hosts = [h + prefix + n for h in hosts for n in numbers]
    return [h + rest for h in hosts]


def _numbers(text: str, body: str, room: int, max_hosts: int) -> list[str]:
    out: list[str] = []
    for item in body.split(","):
        lo, dash, hi = item.partition("-")
        if not lo.isascii() or not lo.isdigit() or (dash and not (hi.isascii() and hi.isdigit())):
            raise HostlistError(text, f"range {item!r} in [{body}]: write N or LO-HI with digits only")
        first, last = int(lo), int(hi) if dash else int(lo)
        if last < first:
            raise HostlistError(text, f"range {item!r} goes down; write LO-HI with LO <= HI")
        if last - first + 1 + len(out) > room:
            raise HostlistError(text, f"expands to more than {max_hosts} hosts (range {item!r})")
        out.extend(str(n).zfill(len(lo)) for n in range(first, last + 1))
    return out


def compress_hostlist(hosts: list[str] | tuple[str, ...]) -> str:
    """The shortest usual hostlist of ``hosts``, as Slurm writes ``SLURM_JOB_NODELIST``: names that
    differ only in a trailing number share one bracket group (``n1,n2,n3,n7`` -> ``n[1-3,7]``),
    numbers sorted and duplicates dropped; zero-padded numbers keep their width (``n[01-10]``).
    Groups keep the order of their first host; ``expand_hostlist`` gives the hosts back."""
    groups: dict[tuple[str, int], set[int]] = {}
    order: list[tuple[str, int] | str] = []
    for host in hosts:
        digits = len(host) - len(host.rstrip("0123456789"))
        if not digits or "[" in host:
            if host not in order:
                order.append(host)
            continue
        prefix, number = host[:-digits], host[-digits:]
        padded = len(number) if number.startswith("0") and len(number) > 1 else 0
        if not padded and (prefix, len(number)) in groups:
            padded = len(number)  # n10 joins n[01-09]
        key = (prefix, padded)
        if key not in groups:
            groups[key] = set()
            order.append(key)
        groups[key].add(int(number))
    parts: list[str] = []
    for item in order:
        if isinstance(item, str):
            parts.append(item)
            continue
        prefix, width = item
        numbers = sorted(groups[item])
        if len(numbers) == 1:
            parts.append(f"{prefix}{numbers[0]:0{width}d}")
            continue
        ranges: list[str] = []
        start = prev = numbers[0]
        for n in [*numbers[1:], None]:
            if n is not None and n == prev + 1:
                prev = n
                continue
            ranges.append(f"{start:0{width}d}" if start == prev else f"{start:0{width}d}-{prev:0{width}d}")
            if n is not None:
                start = prev = n
        parts.append(f"{prefix}[{','.join(ranges)}]")
    return ",".join(parts)
