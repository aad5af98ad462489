"""``crossdock why JOB``: why a pending job pends, when it would start as it is, and the changes
that would start it sooner, each with the start the scheduler predicts for it."""

from __future__ import annotations

from datetime import datetime, timezone

import typer

from crossdock.cli.common import fail, gateway, print_json
from crossdock.queue.errors import CrossdockError


def _when(at: str | None, now: datetime) -> str:
    if at is None:
        return "not known"
    moment = datetime.fromisoformat(at)
    if moment <= now:
        return "now"
    minutes = round((moment - now).total_seconds() / 60)
    return f"{at} (in {minutes // 60} h {minutes % 60:02d} min)" if minutes >= 60 else f"{at} (in {minutes} min)"


def why(job: str = typer.Argument(..., help="job id or array task (12_3)"),
        as_json: bool = typer.Option(False, "--json")) -> None:
    """Why a job pends and the smallest changes that would start it sooner: fewer GPUs, another GPU
    model, pool or queue, a time limit that fits a backfill hole (each tried in a dry cycle)."""
    gw = gateway()
    try:
        ids = gw.resolve(job)
        if len(ids) != 1:
            fail(f"why: {job!r} is an array of {len(ids)} tasks; name one, e.g. {gw.job(ids[0]).display_id}")
        report = gw.why(ids[0])
    except CrossdockError as exc:  # no such job, another user's: one line
        fail(str(exc) if str(exc).startswith("why job") else f"why: {exc}")
    if as_json:
        print_json(report)
        return
    now = datetime.now(timezone.utc)
    if report["state"] != "PENDING":
        print(f"job {job} is {report['state']}, not pending" + (f" ({report['reason']})" if report["reason"] else ""))
        return
    print(f"job {job} pends: {report['reason'] or 'no reason recorded yet'}")
    print(f"expected start as it is: {_when(report['start'], now)}")
    if not report["options"]:
        print("no single change to its request starts it sooner")
        return
    print("what would start it sooner (one change each):")
    width = max(len(o["change"]) for o in report["options"])
    for o in report["options"]:
        where = f" on {','.join(o['nodes'])}" if o["nodes"] else ""
        pool = f" in pool {o['pool']}" if o["pool"] else ""
        print(f"  {o['change']:<{width}}  starts {_when(o['start'], now)}{pool}{where}; {o['apply']}")
