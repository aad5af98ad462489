"""A dry scheduling cycle over a config: what ``crossdock config check`` runs so that a config it
accepts is one the service can schedule with.

``dry_cycle(cfg, nodes, now)`` runs the cycle twice against the given nodes (the config's declared
and local ones): with nothing pending, then with one small probe job per queue. It returns one line
per problem: the cycle raising (inventory arithmetic, say, on a node no array can hold) or a
probe it had to set aside (InvalidSpec). A probe that merely does not fit is not a problem here:
admission refuses such jobs with their own message.
"""

from __future__ import annotations

from datetime import datetime
from typing import Sequence

from crossdock.queue.config import ClusterConfig
from crossdock.queue.cycle import run_cycle
from crossdock.queue.models import Job, JobSpec
from crossdock.queue.snapshot import Node, Snapshot
from crossdock.queue.states import Reason


def _probe(job_id: int, queue: str, cfg: ClusterConfig, now: datetime) -> Job:
    q = cfg.queues[queue]
    pc = cfg.priority_classes[q.priority_class]
    spec = JobSpec(command=["true"], queue=queue, user="config-check", mem_per_node_mib=1,
                   time_limit_seconds=60 * (q.default_time_minutes or 1))
    return Job(id=job_id, spec=spec, queue=queue, priority_class=q.priority_class, priority=pc.value,
               preemptible=pc.preemptible, pools=list(q.pools), submit_time=now)


def dry_cycle(cfg: ClusterConfig, nodes: Sequence[Node], now: datetime) -> list[str]:
    snapshot = Snapshot(nodes=tuple(nodes))
    queues = dict(enumerate(cfg.queues, start=1))  # probe job id -> its queue
    try:
        run_cycle(snapshot, [], cfg, now)
        result = run_cycle(snapshot, [_probe(i, q, cfg, now) for i, q in queues.items()], cfg, now)
    except Exception as exc:  # whatever the service would meet on its first cycle
        return [f"scheduler: a scheduling cycle over this config fails ({type(exc).__name__}: {exc});"
                " check the node sizes and scheduler settings"]
    return [f"queues.{queues[i]}: the scheduler cannot evaluate a job of this queue: {result.explanations.get(i, '')}"
            for i, reason in sorted(result.pending.items()) if reason == Reason.INVALID_SPEC]
