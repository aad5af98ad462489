"""``crossdock deschedule``: what the descheduler moved (or, with ``--dry-run``, would move now) and why."""

from __future__ import annotations

import time
from typing import Any

import typer
from rich.table import Table

from crossdock.cli.common import console, fail, gateway, print_json


def tables(report: dict[str, Any]) -> list[Table]:
    moves = Table(title="migrations", box=None, header_style="bold", title_justify="left")
    for col in ("JOB", "FROM", "TO", "STRATEGY", "REASON"):
        moves.add_column(col, no_wrap=col != "REASON")
    for m in report["migrations"]:
        to = ",".join(m["to"]) if m["to"] else "(scheduler)"
        moves.add_row(str(m["job"]), ",".join(m["from"]), to, m["strategy"], m["reason"])
    skipped = Table(title="left in place", box=None, header_style="bold", title_justify="left")
    for col in ("JOB", "STRATEGY", "WHY"):
        skipped.add_column(col, no_wrap=col != "WHY")
    for s in report["skipped"]:
        skipped.add_row(str(s["job"]), s["strategy"], s["why"])
    return [t for t, rows in ((moves, report["migrations"]), (skipped, report["skipped"])) if rows]


def deschedule(dry_run: bool = typer.Option(False, "--dry-run", help="plan now and list what would move; move nothing"),
               as_json: bool = typer.Option(False, "--json")) -> None:
    """The descheduler's moves with their reasons (from where, to where, why) and the candidates it
    left in place with why; ``--dry-run`` plans now from the live state instead of showing the last pass."""
    from crossdock.queue.errors import PermissionDenied

    try:
        report = gateway().deschedule(dry_run)  # through the socket in a multi-user installation
    except PermissionDenied as exc:
        fail(str(exc))
    if not dry_run and not report.pop("enabled"):
        console.print("the descheduler is off (descheduler.enabled: false); `--dry-run` plans anyway", highlight=False)
    report.pop("enabled", None)
    if as_json:
        print_json(report)
        return
    if report["at"] is None:
        console.print("no descheduler pass yet", highlight=False)
        return
    head = "dry run" if dry_run else f"last pass {max(time.time() - report['at'], 0):.0f}s ago"
    unblocked = ", ".join(str(i) for i in report["unblocked"]) or "none"
    console.print(f"{head}: {len(report['migrations'])} migration(s); jobs that start after them: {unblocked}",
                  highlight=False)
    for t in tables(report):
        console.print(t)
