"""When Slurm would start a job sent now (``EstimatesStart``), for bursting between backends.

Slurm's own answer is a will-run test, ``sbatch --test-only`` (the backfill scheduler's estimate
from the running jobs' time limits; ``sbatch -M`` picks a cluster the same way). slurmrestd v0.0.38
has no will-run endpoint, so the REST drivers ask their CLI fallback.

Cost is bounded: answers are cached per pool and job shape (the resources asked for, not the
script) for ``ttl_s``, about one scheduling cycle, and at most ``budget`` tests run per ``ttl_s``;
past it the estimate is unknown (None) and the caller keeps the job where it would have gone.

Powered-down nodes: Slurm 22.05 answers a start in the year 2707 for a job only powered-down nodes
could run. The estimate is then ``resume_s``, the time a node takes to come up and its job to start
(measured here: under a second for slurmd to register, then up to 30 s for slurmctld's periodic
check to launch a job that waited for the node); a start on nodes that are powered down now gets
the same added.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from datetime import datetime

from crossdock.backends.slurm.driver import SlurmError, SubmitRequest
from crossdock.backends.slurm.power import FAILED, POWERED_DOWN
from crossdock.backends.slurm.request import build_request
from crossdock.queue.models import Job

log = logging.getLogger(__name__)

YEAR_S = 365 * 86400.0


def shape_key(pool: str, req: SubmitRequest) -> tuple:
    """What a will-run answer depends on: the pool and the resources asked for."""
    return (pool, req.nodes, req.nodes_max, req.ntasks, req.ntasks_per_node, req.cpus_per_task, req.mem_per_node_mib,
            req.mem_per_cpu_mib, req.gres, req.gpus, req.gpus_per_task, req.time_limit_minutes, req.exclusive,
            req.nodelist, req.exclude)


def seconds_until(start: str, now: float) -> float:
    """Seconds from ``now`` (epoch) to Slurm's local ISO time ``start``, at least 0."""
    return max(datetime.fromisoformat(start).timestamp() - now, 0.0)


class StartEstimates:
    """``EstimatesStart`` for ``SlurmBackend`` (mixed in; it sets the attributes below)."""

    estimate_ttl_s: float = 2.0
    estimate_budget: int = 8
    resume_s: float = 30.0
    _wall: Callable[[], float] = staticmethod(time.time)
    _estimates: dict[tuple, tuple[float, float | None]]
    """Shape key → (when asked, the answer)."""
    _estimate_window: list
    """[start of the current ``ttl_s`` window, tests run in it]."""
    _power: dict[str, str]
    """Node → its power state at the last inventory."""

    def estimate_start(self, job: Job, pool: str) -> float | None:
        """Seconds until ``job`` would start in ``pool`` if sent now; None when unknown (not a
        Slurm pool, the budget spent, Slurm unreachable or refusing the job)."""
        partition = self._slurm_pools().get(pool)  # type: ignore[attr-defined]
        if partition is None:
            return None
        req = build_request(job, partition=partition, gpu_types=self.gpu_types(job))  # type: ignore[attr-defined]
        key = shape_key(pool, req)
        now = self._clock()  # type: ignore[attr-defined]
        hit = self._estimates.get(key)
        if hit is not None and now - hit[0] < self.estimate_ttl_s:
            return hit[1]
        window = self._estimate_window
        if now - window[0] >= self.estimate_ttl_s:
            window[:] = [now, 0]
        if window[1] >= self.estimate_budget:
            return None
        window[1] += 1
        try:
            answer = self.driver.will_run(req)  # type: ignore[attr-defined]
        except SlurmError as exc:
            log.debug("no start estimate for job %s in %s: %s", job.id, pool, exc)
            value = None
        else:
            value = self._seconds(answer.start, answer.nodes)
        self._estimates[key] = (now, value)
        return value

    def _seconds(self, start: str, nodes: tuple[str, ...]) -> float:
        seconds = seconds_until(start, self._wall())
        asleep = any(self._power.get(n) in (POWERED_DOWN, FAILED) for n in nodes)
        if seconds >= YEAR_S:
            return self.resume_s if asleep else YEAR_S
        return seconds + self.resume_s if asleep else seconds
