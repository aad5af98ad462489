"""``crossdock autoscale``: what the autoscaler decided in its last pass, and why."""

from __future__ import annotations

import time
from typing import Any

import typer
from rich.table import Table

from crossdock.cli.common import console, gateway, print_json


def _ago(t: float | None, now: float) -> str:
    return "-" if t is None else f"{max(now - t, 0):.0f}s ago"


def _change(c: dict[str, Any] | None, now: float) -> str:
    if not c:
        return "-"
    if c["event"] in ("fleet_scaled", "nodes_added", "nodes_removed"):
        return f"{c['from']}→{c['to']} {_ago(c['time'], now)}"
    return f"drained {len(str(c.get('jobs', '')).split(','))} jobs {_ago(c['time'], now)}"


def _limited(row: dict[str, Any]) -> str:
    if row.get("error"):
        return f"[red]error: {row['error']}[/]"
    return row.get("limited_by") or "-"


def tables(report: dict[str, Any], now: float) -> list[Table]:
    fleets = Table(title="fleets", box=None, header_style="bold", title_justify="left")
    for col in ("QUEUE", "FLEET", "BACKLOG", "CURRENT", "RECOMMENDED", "DESIRED", "LIMITED BY", "LAST CHANGE"):
        fleets.add_column(col, no_wrap=col != "LIMITED BY")
    for r in report["fleets"]:
        fleets.add_row(r["queue"], f"{r.get('backend')}/{r.get('fleet')}",
                       *(str(r.get(k, "-")) for k in ("backlog", "current", "recommended", "desired")),
                       _limited(r), _change(r["last_change"], now))
    pools = Table(title="pools", box=None, header_style="bold", title_justify="left")
    for col in ("POOL", "READY", "STARTING", "DESIRED", "WAITING JOBS", "TAKEN LAST", "LIMITED BY", "LAST CHANGE"):
        pools.add_column(col, no_wrap=col != "LIMITED BY")
    for r in report["pools"]:
        pools.add_row(r["pool"], *(str(r.get(k, "-")) for k in ("ready", "starting", "desired", "waiting")),
                      str(len(r["candidates"])) if "candidates" in r else "-", _limited(r),
                      _change(r["last_change"], now))
    return [t for t, rows in ((fleets, report["fleets"]), (pools, report["pools"])) if rows]


def autoscale(as_json: bool = typer.Option(False, "--json")) -> None:
    """Per elastic queue and provisioned pool: the backlog, current and desired size, the step that
    limited it (stabilization, a policy, min/max, cooldown...) and the last change."""
    report = gateway().autoscaling()  # through the socket in a multi-user installation
    if as_json:
        print_json(report)
        return
    now = time.time()
    if report["at"] is None:
        console.print("no autoscaling pass yet: `crossdock up` runs one when a queue has an elastic fleet"
                      " or a pool a provisioner", highlight=False)
        return
    console.print(f"last pass {_ago(report['at'], now)}", highlight=False)
    for t in tables(report, now):
        console.print(t)
    for row in report["fleets"]:
        if row.get("note"):
            console.print(f"[yellow]fleet {row.get('fleet') or row['queue']}[/]: {row['note']}", highlight=False)
