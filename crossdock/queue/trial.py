"""Where and when the scheduler would start a job: what ``crossdock submit --test-only`` prints,
as ``sbatch --test-only`` does ("Job 12 to start at … using 4 processors on nodes n1 in partition p").

One dry cycle over the queue as it is, the job added with an id no stored job has; nothing is
stored and nothing is sent.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Sequence

from crossdock.queue.assembly import Records, build_snapshot
from crossdock.queue.config import ClusterConfig
from crossdock.queue.cycle import run_cycle
from crossdock.queue.models import Job
from crossdock.queue.snapshot import Node

TRIAL_ID = 2**53 - 1


@dataclass(frozen=True)
class Trial:
    start: datetime | None
    """When it would start (now when it fits now); None: not known (reason says why)."""
    nodes: tuple[str, ...] = ()
    pool: str | None = None
    cpus: int = 0
    reason: str = ""

    def line(self, queue: str) -> str:
        if self.start is None:
            return f"job would pend in queue {queue}: {self.reason}"
        where = f" on nodes {','.join(self.nodes)}" if self.nodes else ""
        return (f"job to start at {self.start.isoformat(timespec='seconds')} using {self.cpus} processors{where}"
                f" in {'pool ' + self.pool if self.pool else 'queue ' + queue}")


def trial(job: Job, pending: Sequence[Job], active: Sequence[Job], nodes: Sequence[Node], config: ClusterConfig,
          now: datetime) -> Trial:
    job = job.model_copy(update={"id": TRIAL_ID, "array_job_id": None if job.array_job_id is None else TRIAL_ID})
    snap = build_snapshot(Records([*pending, job], list(active), list(nodes)), config)
    result = run_cycle(snap, [*pending, job], config, now)
    cpus = job.spec.cpus_per_task * job.spec.ntasks
    for placed in result.admitted:
        if placed.job_id == TRIAL_ID:
            return Trial(now, placed.nodes, placed.pool, cpus)
    for held in result.reservations:
        if held.job_id == TRIAL_ID:
            return Trial(held.start, held.nodes, None, cpus)
    reason = result.pending.get(TRIAL_ID, "")
    explanation = result.explanations.get(TRIAL_ID, "")
    if job.eligible_time is not None and job.eligible_time > now:
        return Trial(job.eligible_time, (), None, cpus, reason)
    return Trial(None, (), None, cpus, f"{reason}{': ' + explanation if explanation else ''}" or "no start known")
