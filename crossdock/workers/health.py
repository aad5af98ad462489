"""``crossdock health``: each part of the service and whether it is well, from what ``crossdock up``
writes to its state directory (``up.json``, refreshed every half second, and the ``up.pid`` lock)
and from probes of its own (Redis, each backend's inventory), so that it answers when Redis is away.
Where Redis answers, the workers are asked which queues they consume (``dispatch``): a SCHEDULED
job whose backend's queue no worker consumes would wait for ever, and is named.
"""

from __future__ import annotations

import json
import threading
import time
from typing import Any

from crossdock.backends.redis_store.embedded import shown
from crossdock.backends.redis_store.store import probe
from crossdock.queue.errors import StoreUnavailable
from crossdock.queue.states import JobState
from crossdock.runtime import Runtime
from crossdock.workers.app import make_app, queue_for
from crossdock.workers.consumers import consumers
from crossdock.workers.loops import RUNNING
from crossdock.workers.supervision import UpLock, is_worker

STALE_SECONDS = 10.0
PROBE_SECONDS = 10.0
STUCK_SECONDS = 30.0


def _ago(t: float | None) -> str:
    return "never" if t is None else f"{time.time() - t:.1f}s ago"


def _probe_backend(rt: Runtime, kind: str) -> str | None:
    """None when the backend lists its inventory within PROBE_SECONDS, else why not."""
    outcome: list[str | None] = []

    def ask() -> None:
        try:
            rt.backends(kind).inventory()
            outcome.append(None)
        except Exception as exc:  # any failure is the answer here
            outcome.append(f"{type(exc).__name__}: {exc}")

    t = threading.Thread(target=ask, daemon=True)
    t.start()
    t.join(PROBE_SECONDS)
    return outcome[0] if outcome else f"no answer within {PROBE_SECONDS:.0f}s"


def _scheduler_part(sched: dict[str, Any] | None) -> dict[str, Any]:
    if sched is None:
        return {"name": "scheduler", "ok": True, "detail": "not run by this up (--no-scheduler)"}
    failing = {n: p for n, p in sched["parts"].items() if p["state"] != RUNNING}
    if not sched["thread_alive"]:
        detail, ok = f"loop thread dead ({sched['parts']['loop']['last_error']})", False
    elif failing:
        detail = "; ".join(f"{n} {p['state']} ({p['last_error']}, failure {p['failures']}"
                           + (f", retry in {p['retry_in']:.1f}s)" if p["retry_in"] is not None else ")")
                           for n, p in failing.items())
        ok = False
    elif sched["role"] == "leader" and time.time() - (sched["last_cycle_at"] or 0) > STUCK_SECONDS:
        # a store call that hangs (a Redis that is stopped, not gone) holds the loop in redis-py's retries
        detail, ok = f"no cycle for {STUCK_SECONDS:.0f}s (last {_ago(sched['last_cycle_at'])})", False
    else:
        detail, ok = f"running, last cycle {_ago(sched['last_cycle_at'])}", True
    return {"name": "scheduler", "ok": ok, "detail": f"{sched['role']} {sched['holder']}: {detail}"
                                                    f" (restarts {sched['restarts']})"}


def _dispatch_part(rt: Runtime) -> dict[str, Any]:
    """Every SCHEDULED job's dispatch queue has a worker consuming it (asked of the workers)."""
    try:
        consumed = consumers(make_app(rt.redis_url))
        scheduled = [j for j in rt.store.get_many(rt.store.active_ids()) if j.state is JobState.SCHEDULED]
    except Exception as exc:  # the broker or the store away: the redis line says why
        return {"name": "dispatch", "ok": False, "detail": f"the workers could not be asked: {exc}"}
    stuck: dict[str, list[int]] = {}
    for job in scheduled:
        if job.backend is not None and queue_for(job.backend) not in consumed:
            stuck.setdefault(queue_for(job.backend), []).append(job.id)
    served = ", ".join(f"{q} ({len(nodes)} worker{'s' * (len(nodes) != 1)})" for q, nodes in sorted(consumed.items()))
    if not stuck:
        return {"name": "dispatch", "ok": True, "detail": f"{len(scheduled)} scheduled; consumed: {served or 'none'}"}
    lines = [f"{len(ids)} SCHEDULED job{'s' * (len(ids) != 1)} ({', '.join(map(str, sorted(ids)[:5]))}"
             f"{', …' if len(ids) > 5 else ''}) wait on {q}, which no worker consumes" for q, ids in sorted(stuck.items())]
    return {"name": "dispatch", "ok": False,
            "detail": "; ".join(lines) + f" (consumed: {served or 'none'}); start a worker for it"
                      " (`crossdock up` consumes every backend kind of the config in force)"}


def collect() -> dict[str, Any]:
    """Every part as ``{"name", "ok", "detail"}``; ``status``: healthy, degraded or down (no up)."""
    rt = Runtime.from_env(start_redis=False)
    state_dir = rt.settings.state_dir
    up_pid = UpLock(state_dir).holder()
    try:
        report = json.loads((state_dir / "up.json").read_text())
    except (OSError, ValueError):
        report = None
    parts = []
    fresh = bool(up_pid and report and report.get("pid") == up_pid
                 and time.time() - report["updated_at"] < STALE_SECONDS)
    if not up_pid:
        parts.append({"name": "up", "ok": False, "detail": f"not running on {state_dir}"})
    elif not fresh:
        parts.append({"name": "up", "ok": False, "detail": f"pid {up_pid}, but no report in {STALE_SECONDS:.0f}s"})
    else:
        parts.append({"name": "up", "ok": True, "detail": f"pid {up_pid}, up {time.time() - report['started_at']:.0f}s"})
        parts.append(_scheduler_part(report["scheduler"]))
        for w in report["workers"]:
            alive = w["alive"] and is_worker(w["pid"], state_dir)
            missing = f", not yet {w['missing']} (the config in force adds it)" if w.get("missing") else ""
            parts.append({"name": f"worker {w['pid']}", "ok": alive,
                          "detail": f"{'alive' if alive else 'dead'}, queues {w['queues']}{missing}"
                                    f" (restarts {w['restarts']})"})
        if report.get("socket"):  # up --multi-user
            sock = report["socket"]
            parts.append({"name": "socket", "ok": sock["alive"], "detail": f"{'serving' if sock['alive'] else 'down'}"
                          f" users on {sock['path']} (restarts {sock['restarts']})"})
        if report.get("metrics"):  # the exporter (unless disabled)
            served = report["metrics"]
            parts.append({"name": "metrics", "ok": served["alive"],
                          "detail": f"serving {served['url']}" if served["url"] else "no free port: not served"})
        if report.get("config-watcher"):  # the file up reloads
            w = report["config-watcher"]
            taken = not w.get("behind") and not w["last"].startswith(("refused", "cannot"))
            parts.append({"name": "config-file", "ok": taken, "detail": f"{w['path']}: {w['last']}"})
        if report.get("router"):  # the local services' router
            r = report["router"]
            listening = ", ".join(f"{n} :{p}" for n, p in sorted(r["services"].items())) or "no service yet"
            errors = "; ".join(f"{k}: {v}" for k, v in r.get("errors", {}).items())
            parts.append({"name": "router", "ok": r["alive"] and not errors,
                          "detail": f"{'serving' if r['alive'] else 'down'} ({listening}), metrics :{r['metrics_port']}"
                          f"{'; ' + errors if errors else ''} (restarts {r['restarts']})"})
    why = probe(rt.redis_url)
    kind = "external" if rt.settings.redis_url else "embedded"
    restarts = f" (restarts {report['redis']['restarts']})" if fresh else ""
    parts.append({"name": "redis", "ok": why is None,
                  "detail": f"{kind} {shown(rt.redis_url)}: {'reachable' if why is None else why}{restarts}"})
    if why is None:
        parts.append(_dispatch_part(rt))
        try:
            durable = rt.store.durable_writes()
        except StoreUnavailable as exc:  # asked for (no I/O otherwise), and the store went away
            durable = {"name": "durable writes", "ok": False, "detail": str(exc)}
        if durable is not None:
            parts.append(durable)
    try:
        kinds = sorted({p.backend for p in rt.config.pools.values()})
    except Exception as exc:  # a broken config is a health problem, not a traceback
        parts.append({"name": "config", "ok": False, "detail": f"{rt.settings.config_path}: {exc}"})
        kinds = []
    for kind in kinds:
        why = _probe_backend(rt, kind)
        parts.append({"name": f"backend {kind}", "ok": why is None, "detail": "reachable" if why is None else why})
    status = "down" if not up_pid else "healthy" if all(p["ok"] for p in parts) else "degraded"
    return {"status": status, "parts": parts, "up": report if fresh else None}
