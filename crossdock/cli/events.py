"""``crossdock events``: who did what, when and why, from the global and per-job event streams."""

from __future__ import annotations

import json
import sys
import time
from datetime import datetime, timezone
from typing import Optional

import typer

from crossdock.cli.common import fail, gateway, one_line
from crossdock.cli.history import parse_time
from crossdock.cli.render import describe, typed
from crossdock.queue.durations import parse_duration
from crossdock.queue.errors import CrossdockError, NoSuchJob

FOLLOW_BLOCK_MS = 1000
"""How long one follow read waits on the stream (the socket caps it at 5 s)."""
# what an event names, in the order shown: a job's (from/to/event) or the autoscaler's (queue/pool)
_SUBJECT = ("queue", "pool")
_SHOWN = {"id", "job", "event", "from", "to", "actor", "reason", "time", "queue", "pool", "action"}


def parse_since(text: str, now: float | None = None) -> float:
    """``--since``: a duration back from now (``90s``, ``15m``, ``2h``, ``1d``, ``1w``; a bare number is
    seconds) or a time as sacct reads it (``2026-12-01T09:00``, ``today``, ``now-1hour``...)."""
    now = time.time() if now is None else now
    try:
        back = parse_duration(text)
        if back is not None:
            return now - back
        return parse_time(text, "--since", datetime.fromtimestamp(now, timezone.utc)).timestamp()
    except ValueError as exc:
        raise ValueError(f"{exc}; or a duration back from now: 90s, 15m, 2h, 1d, 1w") from None


def render(ev: dict[str, str], labels: dict[int, str] | None = None) -> str:
    """One event as one line: when, what it is about, what happened, who, why (and any other
    field); a job as users name it (``labels``: id -> ``94_2``)."""
    try:
        when = datetime.fromtimestamp(float(ev.get("time", "")), timezone.utc).astimezone().isoformat(timespec="seconds")
    except ValueError:
        when = ev.get("id", "?")
    if ev.get("job"):
        job = ev["job"]
        subject = f"job {(labels or {}).get(int(job), job) if job.isdigit() else job}"
    else:
        subject = next((f"{k} {ev[k]}" for k in _SUBJECT if ev.get(k)), "crossdock")
    extra = " ".join(f"{k}={ev[k]}" for k in sorted(ev) if k not in _SHOWN and ev[k] != "")
    parts = [when, subject, describe(ev)]
    if extra:
        parts.append(extra)
    return one_line("  ".join(parts))


def events(follow: bool = typer.Option(False, "--follow", "-f", help="keep printing new events until Ctrl-C"),
           job: Optional[str] = typer.Option(None, "--job", "-j", help="one job's events (12, 12_3, or an array 12)"),
           since: Optional[str] = typer.Option(None, "--since", help="from a time (sacct's forms) or a duration"
                                               " back from now: 90s, 15m, 2h, 1d"),
           count: int = typer.Option(100, "--count", "-n", min=1, max=1000,
                                     help="without --since: the last COUNT events"),
           as_json: bool = typer.Option(False, "--json", help="one JSON object per line (with -f too)")) -> None:
    """Who did what, when and why: job state changes (with the actor and reason), refusals, the
    autoscaler's changes; every job's (the global stream) or one job's."""
    try:
        start = None if since is None else parse_since(since)
    except ValueError as exc:
        fail(str(exc))
    gw = gateway()
    ids: list[int] = []
    if job is not None:
        try:
            ids = gw.resolve(job)
        except NoSuchJob:
            fail(f"--job {job!r}: no such job (it may have expired to history: `crossdock history -j {job}`)")
    page = gw.event_stream(ids, start, None, count if start is None else 1000, None)
    _print(page["events"], as_json)
    if not follow:
        return
    last = page["last"] or f"{int(time.time() * 1000)}-0"  # an empty stream: follow from now
    try:
        while True:
            page = gw.event_stream(ids, None, last, 1000, FOLLOW_BLOCK_MS)
            last = page["last"] or last
            _print(page["events"], as_json)
    except KeyboardInterrupt:
        raise typer.Exit(0) from None


def _print(rows: list[dict[str, str]], as_json: bool) -> None:
    labels = _labels(rows)
    for ev in rows:
        sys.stdout.write((json.dumps(typed(ev, labels)) if as_json else render(ev, labels)) + "\n")
    sys.stdout.flush()


def _labels(rows: list[dict[str, str]]) -> dict[int, str]:
    """Job id -> ``94_2`` for the array tasks these events name (one read of the stored jobs;
    a job gone to history keeps its number)."""
    ids = sorted({int(ev["job"]) for ev in rows if str(ev.get("job", "")).isdigit()})
    if not ids:
        return {}
    try:
        return {j.id: j.display_id for j in gateway().jobs(ids) if j.array_job_id is not None}
    except CrossdockError:
        return {}
