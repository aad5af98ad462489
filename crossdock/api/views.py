"""What the API and the dashboard show, built from the store's records: jobs as JSON (another
user's as the gateway's reads show them: ``private_data``), queues with depth and wait, pools and nodes with
GPU use per model (how fragmented the free GPUs are), preemptions and migrations, the
autoscaler's decisions and the descheduler's status. Plain functions over data, no I/O but
what the ``rt`` passed in reads."""

from __future__ import annotations

import statistics
from datetime import datetime
from typing import Any, Iterable, Sequence

from crossdock import service
from crossdock.queue.config import ClusterConfig
from crossdock.queue.models import Job
from crossdock.queue.snapshot import Node
from crossdock.queue.states import JobState, Reason

FIT_SIZES = (1, 2, 4, 8)
"""GPU counts per node for which the fragmentation view says how many such jobs the free GPUs take."""
HELD = {Reason.JOB_HELD_USER.value, Reason.JOB_HELD_ADMIN.value}


def job_json(job: Job) -> dict[str, Any]:
    """A job as JSON; the gateway's reads have already shown another user's as ``private_data`` allows."""
    return {"display_id": job.display_id, **job.model_dump(mode="json")}


def queue_rows(cfg: ClusterConfig, pending: Iterable[Job], active: Iterable[Job], now: datetime) -> list[dict[str, Any]]:
    """Each configured queue (and any other a job names): pending (held apart), running, the
    oldest and the median wait of what pends, in seconds since a job became eligible."""
    rows = {name: {"queue": name, "priority_class": q.priority_class, "pools": list(q.pools), "pending": 0,
                   "held": 0, "running": 0, "waits": []} for name, q in cfg.queues.items()}

    def row(name: str) -> dict[str, Any]:
        return rows.setdefault(name, {"queue": name, "priority_class": "", "pools": [], "pending": 0, "held": 0,
                                      "running": 0, "waits": []})

    for j in pending:
        r = row(j.queue)
        if j.reason in HELD:
            r["held"] += 1
            continue
        r["pending"] += 1
        since = j.eligible_time or j.submit_time
        if since is not None:
            r["waits"].append(max(0.0, (now - since).total_seconds()))
    for j in active:
        row(j.queue)["running"] += 1
    out = []
    for r in rows.values():
        waits = r.pop("waits")
        r["oldest_wait_seconds"] = round(max(waits), 1) if waits else None
        r["median_wait_seconds"] = round(statistics.median(waits), 1) if waits else None
        out.append(r)
    return out


def pool_view(nodes: Sequence[Node], active: Iterable[Job]) -> list[dict[str, Any]]:
    """Pools with their nodes (CPU, memory and each GPU with the job on it) and, per GPU model,
    the GPUs in use and free, the largest free block on one node and how many jobs of
    :data:`FIT_SIZES` GPUs per node the free ones take: free GPUs spread one or two per node
    are what a large job cannot use."""
    on: dict[str, dict[str, int]] = {}
    cpu: dict[str, int] = {}
    mem: dict[str, int] = {}
    for j in active:
        for node in j.nodes:
            cpu[node] = cpu.get(node, 0) + (j.alloc_cpu_milli or j.spec.cpus_per_node() * 1000)
            mem[node] = mem.get(node, 0) + j.alloc_mem_mib
        for gpu in j.gpu_ids:
            on.setdefault(gpu.rsplit(":", 1)[0], {})[gpu] = j.id
    pools: dict[str, dict[str, Any]] = {}
    for n in nodes:
        pool = pools.setdefault(n.pool, {"pool": n.pool, "backend": n.backend, "nodes": [], "gpu_models": {}})
        used = on.get(n.name, {})
        gpus = [{"id": g.id, "model": g.model, "job": used.get(g.id)} for g in n.gpus]
        pool["nodes"].append({"name": n.name, "schedulable": n.schedulable, "cpus": n.cpu_milli / 1000,
                              "cpus_used": cpu.get(n.name, 0) / 1000, "memory_mib": n.memory_mib,
                              "memory_used_mib": mem.get(n.name, 0), "gpus": gpus})
        free_here: dict[str, int] = {}
        for g in gpus:
            m = pool["gpu_models"].setdefault(g["model"], {"total": 0, "used": 0, "free": 0, "free_per_node": []})
            m["total"] += 1
            if g["job"] is None:
                m["free"] += 1
                free_here[g["model"]] = free_here.get(g["model"], 0) + 1
            else:
                m["used"] += 1
        for model, m in pool["gpu_models"].items():
            if n.schedulable and free_here.get(model):
                m["free_per_node"].append(free_here[model])
    for pool in pools.values():
        for m in pool["gpu_models"].values():
            blocks = m.pop("free_per_node")
            m["largest_free_block"] = max(blocks, default=0)
            m["fits"] = {str(k): sum(b // k for b in blocks) for k in FIT_SIZES}
    return list(pools.values())


MIGRATION_EVENTS = {"migrated": "migration", "migration_planned": "planned migration",
                    "eviction_refused": "eviction refused"}
"""The descheduler's events (its ``from``/``to`` are nodes) and how the dashboard names them."""


def disruptions(events: Iterable[dict[str, str]]) -> list[dict[str, str]]:
    """Preemptions and the descheduler's moves among ``events`` (the global stream's), newest last."""
    out = []
    for e in events:
        if e.get("to") == JobState.PREEMPTED.value:
            out.append({"kind": "preemption", **e})
        elif e.get("event") in MIGRATION_EVENTS:
            out.append({"kind": MIGRATION_EVENTS[e["event"]], **e})
    return out


def descheduler_status(rt: Any) -> dict[str, Any]:
    """The descheduler as far as this installation has one: its config block
    (``config.descheduler``) and its last plan (``store.deschedule.last_plan()``) where they
    exist; else disabled, with nothing to show. Its moves are read from the events."""
    cfg = getattr(rt.config, "descheduler", None)
    records = getattr(rt.store, "deschedule", None)
    last = records.last_plan() if hasattr(records, "last_plan") else None
    shown = cfg.model_dump(mode="json") if hasattr(cfg, "model_dump") else None
    return {"enabled": bool(shown and shown.get("enabled")), "config": shown, "last_pass": last}


def service_rows(records: Iterable[Any]) -> list[dict[str, Any]]:
    """The services panel: each inference service's state, replicas and address, by name (its
    command and environment stay out, as a job's do for others)."""
    return [{"name": r.spec.name, "user": r.spec.user, "queue": r.spec.queue, "state": r.status.state.value,
             "ready": r.status.ready, "replicas": r.status.replicas, "desired": r.status.desired,
             "address": r.address, "message": r.status.message, "deleting": r.deleting}
            for r in sorted(records, key=lambda r: r.spec.name)]
