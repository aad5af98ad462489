"""Fair share: decayed usage, dominant-resource shares and the order pending jobs are tried in.

Usage is kept like Slurm's fair-share usage: every interval the previous value decays by
``0.5 ** (elapsed / half_life)`` and the running jobs' dominant shares times the elapsed
seconds are added, per ``queue`` and per ``queue/user`` key (:func:`accrue`; the scheduler loop
stores the result and hands it back in ``Snapshot.usage``).

Within one priority value, queues take turns by their *effective share*: their fraction of all
decayed usage plus the dominant share they hold right now (including jobs admitted earlier in
this cycle), divided by the queue's weight; the queue with the smallest share goes next.
Inside a queue, lower ``nice`` goes first, then users with less usage, then older jobs, then lower job ids, so the
same input always gives the same order.
"""

from __future__ import annotations

import heapq
from collections import deque
from datetime import datetime
from typing import Iterable, Iterator, Mapping, Sequence

from crossdock.queue.scheduler.request import Request

EPOCH = datetime(1970, 1, 1)


def decay_factor(elapsed_s: float, half_life_s: float) -> float:
    return 0.5 ** (max(elapsed_s, 0.0) / half_life_s)


def dominant_share(cpu_milli: float, memory_mib: float, gpus: float, capacity: tuple[float, float, float]) -> float:
    """The largest of the job's fractions of the cluster's CPU, memory and GPUs (DRF)."""
    shares = [a / c for a, c in zip((cpu_milli, memory_mib, gpus), capacity) if c > 0]
    return max(shares, default=0.0)


def accrue(usage: Mapping[str, float], running: Iterable[tuple[str, str, float]], elapsed_s: float,
           half_life_s: float) -> dict[str, float]:
    """New usage: the old one decayed, plus ``share * elapsed`` for each running (queue, user, share)."""
    f = decay_factor(elapsed_s, half_life_s)
    out = {k: v * f for k, v in usage.items()}
    for queue, user, share in running:
        out[queue] = out.get(queue, 0.0) + share * elapsed_s
        key = f"{queue}/{user}"
        out[key] = out.get(key, 0.0) + share * elapsed_s
    return out


def request_share(req: Request, capacity: tuple[float, float, float]) -> float:
    gpus = req.gpus + req.gpu_share_milli / 1000 + req.mig_count
    return dominant_share(req.cpu_milli * req.nodes, req.memory_mib * req.nodes, gpus * req.nodes, capacity)


class FairOrder:
    """Iterates requests in scheduling order; call :meth:`admitted` after placing the last one."""

    def __init__(self, requests: Sequence[Request], usage: Mapping[str, float], running_share: Mapping[str, float],
                 weights: Mapping[str, float], capacity: tuple[float, float, float]):
        self.capacity = capacity
        self.weights = weights
        queues = {r.queue for r in requests}
        total = sum(usage.get(q, 0.0) for q in queues | set(running_share)) or 0.0
        self.share = {q: (usage.get(q, 0.0) / total if total else 0.0) + running_share.get(q, 0.0) for q in queues}
        user_total: dict[str, float] = {}
        for r in requests:
            user_total.setdefault(r.queue, 0.0)
        for key, v in usage.items():
            q, _, user = key.partition("/")
            if user and q in user_total:
                user_total[q] += v

        def user_share(r: Request) -> float:
            t = user_total.get(r.queue) or 0.0
            return usage.get(f"{r.queue}/{r.user}", 0.0) / t if t else 0.0

        self.levels: dict[int, dict[str, deque[Request]]] = {}
        for r in sorted(requests, key=lambda r: (r.nice, user_share(r), r.submit_time or EPOCH, r.job_id)):
            self.levels.setdefault(r.priority, {}).setdefault(r.queue, deque()).append(r)
        self._last: Request | None = None

    def _key(self, queue: str, head: Request) -> tuple:
        return (self.share[queue] / self.weights.get(queue, 1.0), head.submit_time or EPOCH, head.job_id, queue)

    def admitted(self, req: Request) -> None:
        self.share[req.queue] = self.share.get(req.queue, 0.0) + request_share(req, self.capacity)

    def __iter__(self) -> Iterator[Request]:
        for priority in sorted(self.levels, reverse=True):
            level = self.levels[priority]
            heap = [self._key(q, jobs[0]) for q, jobs in level.items()]
            heapq.heapify(heap)
            while heap:
                queue = heapq.heappop(heap)[-1]
                jobs = level[queue]
                yield jobs.popleft()
                if jobs:
                    heapq.heappush(heap, self._key(queue, jobs[0]))
