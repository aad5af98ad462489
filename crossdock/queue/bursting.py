"""Bursting between backends: which backend queue a job that fits nowhere now waits in (pure).

A queue *bursts* when its pools with a ``backend_queue`` belong to more than one backend (a Slurm
partition and a Kubernetes pool). A job of it that the cycle could not place (every pool full)
would wait in the first such pool of its queue whose empty node could run it; bursting sends it
instead to the pool where it is expected to start first, by
:func:`crossdock.queue.autoscale.burst.route`, with ``autoscaler.burst_margin_seconds`` of
hysteresis in favour of that first pool. A job goes to exactly one pool, once: once handed over
it is SCHEDULED and never routed again, so it can never run on both.

Where the expected starts come from (the leader puts them in ``Snapshot.start_estimates`` before
the cycle, for the first :data:`ESTIMATED_JOBS` pending jobs of bursting queues in the cycle's
order; other jobs keep the first pool):

- a backend that ``EstimatesStart`` answers itself (Slurm: ``sbatch --test-only``);
- any other pool (Kubernetes) gets :func:`backlog_start`: the jobs already waiting in its backend
  queue, and those estimated before it in this cycle, over the pool's throughput (one job per time limit of each job running there), plus the
  time a new node takes (``provision_seconds``) when the pool's provisioner must add one first —
  the leader passes 0 for now: no backend reports its provisioning time yet.
"""

from __future__ import annotations

from typing import Mapping, Sequence

from crossdock.queue.autoscale.burst import expected_start, route
from crossdock.queue.config import ClusterConfig
from crossdock.queue.models import Job
from crossdock.queue.snapshot import Snapshot

ESTIMATED_JOBS = 32
"""At most this many pending jobs per cycle get expected starts (the backends' cost is bounded too)."""


def bursting_queues(config: ClusterConfig) -> dict[str, list[str]]:
    """Queue → its pools with a ``backend_queue``, for queues where those span several backends."""
    out: dict[str, list[str]] = {}
    for name, q in config.queues.items():
        pools = [p for p in q.pools if p in config.pools and config.pools[p].backend_queue]
        if len({config.pools[p].backend for p in pools}) > 1:
            out[name] = pools
    return out


def to_estimate(ordered: Sequence[Job], config: ClusterConfig, limit: int = ESTIMATED_JOBS) -> list[tuple[Job, list[str]]]:
    """(job, the pools to estimate) for the first ``limit`` jobs of bursting queues in ``ordered``."""
    queues = bursting_queues(config)
    picked = [(j, queues[j.queue]) for j in ordered if j.queue in queues]
    return picked[:limit]


def throughput(snapshot: Snapshot, pool: str) -> float:
    """Jobs per second the pool is expected to finish: each job running there ends within its time
    limit, so it frees its place at 1/limit per second on average over a limit; jobs without a
    limit add nothing (nothing says when they end)."""
    nodes = {n.name for n in snapshot.nodes if n.pool == pool}
    seen: set[int] = set()
    rate = 0.0
    for a in snapshot.allocations:
        if a.job_id is None or a.job_id in seen or a.node not in nodes or not a.time_limit_seconds:
            continue
        seen.add(a.job_id)
        rate += 1.0 / a.time_limit_seconds
    return rate


def backlog_start(snapshot: Snapshot, pool: str, *, ahead: int = 0, provision_seconds: float = 0.0) -> float | None:
    """Expected start (seconds) in a pool whose backend does not estimate: the jobs waiting in its
    backend queue, and ``ahead`` more routed before this one, over its :func:`throughput`, plus
    ``provision_seconds`` when a node must be added first (0: the pool cannot grow)."""
    return expected_start(snapshot.backend_queued.get(pool, 0) + ahead, throughput(snapshot, pool),
                          provision_seconds=provision_seconds)


def route_pool(job: Job, candidates: Sequence[str], default: str, snapshot: Snapshot, config: ClusterConfig) -> str:
    """The pool ``job`` waits in among ``candidates`` (pools with room whose empty node could run
    it): ``default`` (where it would go without bursting) unless another is expected to start it
    sooner by the margin. Without estimates for the job, ``default``."""
    starts = snapshot.start_estimates.get(job.id)
    if not starts or len(candidates) < 2:
        return default
    order = [default, *(p for p in candidates if p != default)]
    return route({p: starts.get(p) for p in order}, order, margin=config.autoscaler.burst_margin_seconds).pool


def estimates_view(starts: Mapping[int, Mapping[str, float | None]]) -> dict[int, dict[str, float]]:
    """Only the known estimates (None dropped), as the Snapshot keeps them."""
    return {j: {p: s for p, s in by_pool.items() if s is not None} for j, by_pool in starts.items()}
