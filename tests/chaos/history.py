"""The history of a chaos run, kept as Jepsen keeps one: a list of operations, each an ``invoke``
and its completion, ``ok`` (it happened), ``fail`` (it certainly did not) or ``info`` (unknown: the
call raised while the store was away, so it may or may not have taken effect).

Three processes write it. The ``client`` submits (the write's identity is a key the test chooses
per job, as Jepsen writes unique values, so that a duplicate or a phantom can be told from a
retry) and cancels. The ``store`` is observed at the end: every job it holds, its state, and each
transition from its own event list. The ``backend`` is what the jobs themselves wrote: one
``start`` and one ``end`` line per run, with the attempt, the shell's pid and the wall time. A
``nemesis`` op notes each fault. :mod:`tests.chaos.checker` judges the whole.

Ops hold plain values only (str, int, float, dicts and lists of them), so a history prints,
stores as JSON and is written by hand in the checker's unit tests.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

INVOKE, OK, FAIL, INFO = "invoke", "ok", "fail", "info"
NOW = -1.0
"""``at`` for an op stamped when it is added."""


def mark(word: str, prefix: str = "") -> str:
    """A job's run marker, as a shell command whose one line of output is appended to a marks file:
    ``prefix`` (say ``$CROSSDOCK_JOB_ID `` in a file that several jobs share), start or end, the
    attempt the run belongs to, the pid of the shell that runs it, and when."""
    return f'echo "{prefix}{word} $CROSSDOCK_ATTEMPT $$ $(date +%s.%N)"'


@dataclass(frozen=True)
class Op:
    index: int
    process: str
    """client, store, backend or nemesis."""
    type: str
    """invoke, ok, fail or info."""
    f: str
    """submit, cancel, transition, read, start, end or fault."""
    value: Any = None
    job: int | None = None
    time: float | None = None
    """Epoch seconds (the machine's wall clock), when known."""
    error: str = ""
    """Why an ``info`` or ``fail`` completed so (the exception's type)."""

    def __str__(self) -> str:
        at = f"{self.time:.3f}" if self.time is not None else "-"
        job = f" job {self.job}" if self.job is not None else ""
        error = f" ({self.error})" if self.error else ""
        value = json.dumps(self.value, default=str)
        return f"#{self.index} {at} {self.process} {self.type} {self.f}{job} {value}{error}"


@dataclass
class History:
    ops: list[Op] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._lock = threading.Lock()

    def add(self, process: str, type: str, f: str, value: Any = None, job: int | None = None,
            at: float | None = NOW, error: str = "") -> Op:
        with self._lock:
            op = Op(len(self.ops), process, type, f, value, job, time.time() if at == NOW else at, error)
            self.ops.append(op)
            return op

    def complete(self, invoked: Op, type: str, value: Any = None, error: str = "") -> Op:
        """The completion of ``invoked``; an ``info`` or ``fail`` keeps the invoked value."""
        return self.add(invoked.process, type, invoked.f, invoked.value if value is None else value, invoked.job,
                        error=error)

    def call(self, f: str, value: Any, fn: Callable[[], Any], result: Callable[[Any], Any],
             unknown: tuple[type[BaseException], ...], job: int | None = None) -> Any:
        """A client call: ``invoke``, then ``ok`` with ``result(returned)``, or ``info`` when it
        raised one of ``unknown`` (raised again), or ``fail`` when it raised anything else."""
        invoked = self.add("client", INVOKE, f, value, job)
        try:
            out = fn()
        except unknown as exc:
            self.complete(invoked, INFO, error=type(exc).__name__)
            raise
        except Exception as exc:
            self.complete(invoked, FAIL, error=type(exc).__name__)
            raise
        self.complete(invoked, OK, result(out))
        return out

    def fault(self, description: str) -> Op:
        return self.add("nemesis", INFO, "fault", description)

    def by_job(self) -> dict[int, list[Op]]:
        out: dict[int, list[Op]] = {}
        for op in self.ops:
            if op.job is not None:
                out.setdefault(op.job, []).append(op)
        return out

    def dump(self, path: Path) -> None:
        """One JSON op a line; :meth:`load` reads it back."""
        path.write_text("\n".join(json.dumps(asdict(op), default=str) for op in self.ops) + "\n")

    @classmethod
    def load(cls, path: Path) -> History:
        return cls([Op(**json.loads(line)) for line in path.read_text().splitlines() if line.strip()])


# --- what the client did --------------------------------------------------------------------------
def submit(history: History, keys: list[str], fn: Callable[[], list[Any]], key_of: Callable[[Any], str],
           unknown: tuple[type[BaseException], ...]) -> list[Any]:
    """``fn`` submits the jobs named ``keys``; its ``ok`` maps each returned job's key to its id."""
    return history.call("submit", keys, fn, lambda jobs: {key_of(j): j.id for j in jobs}, unknown)


# --- what the store holds -------------------------------------------------------------------------
def is_transition(event: dict[str, str]) -> bool:
    """A state change in a job's events (notes and descheduler moves carry an ``event`` name)."""
    return "to" in event and event.get("event", "submitted") == "submitted"


def observe_store(history: History, store: Any, key_of: Callable[[Any], str]) -> list[Any]:
    """Every job the store holds: its transitions, then one complete ``read`` of keys and states;
    the jobs read. The store must hold the run's jobs alone (a prefix of its own)."""
    jobs = store.get_many(store.all_ids())
    for job in jobs:
        for ev in store.events(job.id):
            if is_transition(ev):
                history.add("store", OK, "transition", {"from": ev.get("from"), "to": ev["to"],
                            "actor": ev.get("actor", ""), "reason": ev.get("reason", "")},
                            job=job.id, at=float(ev["time"]) if ev.get("time") else None)
    history.add("store", OK, "read", {str(j.id): {"key": key_of(j), "state": j.state.value} for j in jobs})
    return jobs


# --- what the jobs wrote --------------------------------------------------------------------------
def parse_marks(text: str) -> list[tuple[str, int, str, float | None]]:
    """(start or end, attempt, pid, time) per line of a marks file; lines of two fields (an older
    marker: word and attempt) have no pid or time."""
    out = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[0] in ("start", "end"):
            pid = parts[2] if len(parts) > 2 else ""
            out.append((parts[0], int(parts[1]), pid, float(parts[3]) if len(parts) > 3 else None))
    return out


def observe_runs(history: History, job: int, marks: Iterable[tuple[str, int, str, float | None]]) -> None:
    """One job's runs, in the order its marks file holds them."""
    for word, attempt, pid, at in marks:
        history.add("backend", OK, word, {"attempt": attempt, "pid": pid}, job=job, at=at)
