"""What a local job's supervisor leaves in the job's workspace, outside the store.

The store can be down while a job runs; these files are how the reconciler tells a supervisor
that is only cut off from the store from a dead one, and learns the end a dead one could not
record:

- ``supervisor.json``: the supervisor's pid and start time (``/proc``), so a reused pid is not
  taken for it, and the job's pid (its process group);
- ``heartbeat``: touched every beat whether the store answers or not (a hung supervisor stops);
- ``outcome.json``: the attempt's end, written before the supervisor tries to record it.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from crossdock.queue.states import JobState

WATCHER = "supervisor.json"
BEAT = "heartbeat"
OUTCOME = "outcome.json"
RESULT = "result.pkl"

STALE_SECONDS = 60.0
"""A supervisor whose heartbeat file is older than this counts as dead even if its process lives."""


def path(state_dir: Path, job_id: int, attempt: int) -> Path:
    """The workspace of one attempt (not created)."""
    return state_dir / "jobs" / str(job_id) / str(attempt)


def process_start(pid: int) -> int | None:
    """The start time (clock ticks since boot) of a live process; None when it is gone or a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2:].split()  # the command name may hold blanks and parentheses
    return None if fields[0] in ("Z", "X") else int(fields[19])


def _write_json(target: Path, data: dict[str, Any]) -> None:
    """Write whole or not at all: a reader never sees half a file."""
    tmp = target.with_name(f".{target.name}.{os.getpid()}")
    with open(tmp, "w") as f:
        json.dump(data, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, target)


def _read_json(source: Path) -> dict[str, Any] | None:
    try:
        return json.loads(source.read_text())
    except (OSError, ValueError):
        return None


def record_watcher(ws: Path, job_pid: int | None = None) -> None:
    pid = os.getpid()
    _write_json(ws / WATCHER, {"pid": pid, "start": process_start(pid), "job_pid": job_pid})
    beat(ws)


def beat(ws: Path) -> None:
    (ws / BEAT).touch()


def watcher_alive(ws: Path, now: float | None = None) -> bool:
    """The supervisor that wrote ``supervisor.json`` still runs and beat recently."""
    rec = _read_json(ws / WATCHER)
    if not rec or process_start(int(rec["pid"])) != rec.get("start"):
        return False
    try:
        age = (now or time.time()) - (ws / BEAT).stat().st_mtime
    except OSError:
        return False
    return age < STALE_SECONDS


def watcher_pid(ws: Path) -> int | None:
    """The pid of the supervisor that wrote ``supervisor.json`` (alive or not)."""
    rec = _read_json(ws / WATCHER)
    return int(rec["pid"]) if rec else None


def job_pid(ws: Path) -> int | None:
    rec = _read_json(ws / WATCHER)
    return int(rec["job_pid"]) if rec and rec.get("job_pid") else None


@dataclass(frozen=True)
class Outcome:
    """How an attempt ended, as its supervisor saw it."""

    state: JobState
    reason: str
    exit_code: int | None
    signal: int | None
    start_time: float | None
    end_time: float
    backend_ref: str = ""
    max_rss_kib: int | None = None
    """The job process tree's peak resident memory."""


def write_outcome(ws: Path, outcome: Outcome) -> None:
    _write_json(ws / OUTCOME, {**asdict(outcome), "state": outcome.state.value})


def read_outcome(ws: Path) -> Outcome | None:
    rec = _read_json(ws / OUTCOME)
    if rec is None:
        return None
    return Outcome(**{**rec, "state": JobState(rec["state"])})


def result(ws: Path) -> bytes | None:
    """A Python job's pickled result, when it wrote one."""
    try:
        return (ws / RESULT).read_bytes()
    except OSError:
        return None
