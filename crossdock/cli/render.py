"""Tables for people; plain dicts for --json."""

from __future__ import annotations

import re
from datetime import datetime, timezone
from typing import Any, Iterable

from rich.console import Group
from rich.table import Table

from crossdock.cli.slurmfmt import duration, run_seconds
from crossdock.queue.models import Job
from crossdock.queue.snapshot import Node

STATE_STYLE = {"PENDING": "yellow", "SCHEDULED": "cyan", "RUNNING": "green", "COMPLETED": "bold green",
               "FAILED": "red", "CANCELLED": "magenta", "TIMEOUT": "red", "NODE_FAIL": "red",
               "OUT_OF_MEMORY": "red", "PREEMPTED": "yellow"}


def elapsed(job: Job) -> str:
    return duration(run_seconds(job))


def time_limit(job: Job) -> str:
    return duration(job.spec.time_limit_seconds)


def job_row(job: Job) -> dict[str, Any]:
    gpu = job.spec.gpu_request()
    return {"job_id": job.display_id, "id": job.id, "name": job.spec.display_name(), "user": job.spec.user,
            "queue": job.queue, "priority_class": job.priority_class, "state": job.state.value, "reason": job.reason,
            "time": elapsed(job), "time_limit": time_limit(job), "nodes": job.nodes, "backend": job.backend,
            "pool": job.pool, "cpus": job.spec.cpus_per_task * job.spec.ntasks,
            "gpus": job.spec.total_gpus() if gpu else 0, "gpu_ids": job.gpu_ids, "attempts": job.attempts,
            "exit_code": job.exit_code, "submit_time": job.submit_time, "start_time": job.start_time,
            "end_time": job.end_time}


_NUMBER = re.compile(r"-?\d+(\.\d+)?")
_TEXT = {"id", "job_id", "reason", "actor", "action", "event", "name"}
"""Fields that stay text in JSON even when they look like numbers."""


def typed(ev: dict[str, str], labels: dict[int, str] | None = None) -> dict[str, object]:
    """An event for ``--json``: numbers as numbers (the store keeps text), ``time`` as epoch
    seconds and ``at`` as ISO 8601 (``2026-12-01T12:00:00+00:00``), and a job's ``job_id`` as
    users write it (``94_2`` for an array task)."""
    out: dict[str, object] = {}
    for key, value in ev.items():
        if key not in _TEXT and isinstance(value, str) and (m := _NUMBER.fullmatch(value)):
            out[key] = float(value) if m[1] else int(value)
        else:
            out[key] = value
    if isinstance(out.get("time"), (int, float)):
        out["at"] = datetime.fromtimestamp(float(out["time"]), timezone.utc).isoformat()
    if isinstance(out.get("job"), int):
        out["job_id"] = (labels or {}).get(out["job"], str(out["job"]))
    return out


def describe(ev: dict[str, str]) -> str:
    """What happened, who did it and why: ``PENDING -> SCHEDULED by scheduler-1``, ``refused
    cancel by mallory``, ``preempting by scheduler-1 reason: for job 12`` (no ``None`` reason)."""
    name = ev.get("event", "")
    change = (f"{ev.get('from', '')} -> {ev.get('to', '')}".strip()) if ev.get("from") or ev.get("to") else ""
    what = " ".join(x for x in (name, ev.get("action", ""), change) if x) or "changed"
    text = f"{what} by {ev.get('actor') or '?'}"
    if ev.get("reason") and ev["reason"] != "None":
        text += f"  reason: {ev['reason']}"
    return text


def summary_table(jobs: Iterable[Job], title: str = "") -> Table:
    t = Table(title=title or None, header_style="bold")
    for col in ("JOBID", "NAME", "QUEUE", "CLASS", "STATE", "REASON", "EXIT", "ELAPSED", "NODES", "GPUS", "ATTEMPTS"):
        t.add_column(col)
    for j in jobs:
        t.add_row(j.display_id, j.spec.display_name(), j.queue, j.priority_class,
                  f"[{STATE_STYLE.get(j.state.value, '')}]{j.state.value}[/]",
                  "" if j.reason in ("None", "") else j.reason, "" if j.exit_code is None else str(j.exit_code), elapsed(j), ",".join(j.nodes),
                  ",".join(g.rsplit(":", 1)[-1] for g in j.gpu_ids), str(j.attempts))
    return t


def node_rows(nodes: Iterable[Node], used: dict[str, tuple[int, int, set[str]]]) -> list[dict[str, Any]]:
    rows = []
    for n in nodes:
        cpu, mem, gpus = used.get(n.name, (0, 0, set()))
        by_model: dict[str, list[int]] = {}
        for g in n.gpus:
            total_free = by_model.setdefault(g.model, [0, 0])
            total_free[0] += 1
            total_free[1] += g.id not in gpus
        rows.append({"pool": n.pool, "backend": n.backend, "node": n.name, "state": "idle" if not cpu else "mix",
                     "cpus": n.cpu_milli // 1000, "cpus_free": (n.cpu_milli - cpu) / 1000, "memory_mib": n.memory_mib,
                     "memory_free_mib": n.memory_mib - mem,
                     "gpus": {m: {"total": v[0], "free": v[1]} for m, v in by_model.items()}})
    return rows


def info_table(rows: list[dict[str, Any]]) -> Table:
    t = Table(box=None, header_style="bold")
    for col in ("POOL", "BACKEND", "NODE", "STATE", "CPUS(free/total)", "MEMORY MiB(free/total)", "GPUS(free/total)"):
        t.add_column(col)
    for r in rows:
        gpus = " ".join(f"{m}:{v['free']}/{v['total']}" for m, v in r["gpus"].items()) or "-"
        t.add_row(r["pool"], r["backend"], r["node"], r["state"], f"{r['cpus_free']:g}/{r['cpus']}",
                  f"{r['memory_free_mib']}/{r['memory_mib']}", gpus)
    return t


def fragmentation_table(pools: list[dict[str, Any]]) -> Group:
    """The dashboard's GPU view (``crossdock.api.views.pool_view``) as text: each node's GPUs with
    the job on each (``·`` free), then per pool and model the GPUs used and free, the largest free
    block on one node and how many jobs of 1, 2, 4 and 8 GPUs the free ones take."""
    width = max((len(str(g["job"])) for p in pools for n in p["nodes"] for g in n["gpus"] if g["job"] is not None),
                default=1)
    nodes = Table(box=None, header_style="bold", padding=(0, 2, 0, 0))
    for col in ("POOL", "NODE", "GPUS (job on each)"):
        nodes.add_column(col)
    models = Table(box=None, header_style="bold", padding=(0, 2, 0, 0))
    for col in ("POOL", "MODEL", "USED", "FREE", "LARGEST FREE BLOCK", "FITS 1", "FITS 2", "FITS 4", "FITS 8"):
        models.add_column(col, justify="left" if col in ("POOL", "MODEL") else "right")
    for p in pools:
        for n in p["nodes"]:
            if n["gpus"]:
                nodes.add_row(p["pool"], n["name"], " ".join(("·" if g["job"] is None else str(g["job"])).rjust(width)
                                                             for g in n["gpus"]))
        for model, m in p["gpu_models"].items():
            models.add_row(p["pool"], model, f"{m['used']}/{m['total']}", str(m["free"]), str(m["largest_free_block"]),
                           *(str(m["fits"][k]) for k in ("1", "2", "4", "8")))
    return Group(nodes, models)
