"""Per-queue quotas: nominal CPU, memory, GPUs (and GPUs per model), cohort borrowing, per-user caps.

A queue may use up to its nominal quota of each resource it names. With ``borrowing`` and a
``cohort``, it may go beyond, as long as the cohort as a whole stays within the sum of its
members' nominal quotas (it borrows what the others leave idle). A queue above its nominal
quota is *borrowing*; its jobs are the first preemption victims when a lender needs room back.
Resources a queue does not name are unlimited for it. ``max_running_per_user`` caps running
jobs per user in the queue.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Iterable

from crossdock.queue.config import ClusterConfig, Quota
from crossdock.queue.scheduler.request import Request
from crossdock.queue.snapshot import Allocation

RESOURCES = ("cpu", "gpu", "mem_mib")


def mig_fraction(profile: str | None) -> float:
    """The compute fraction of a MIG slice: ``3g.40gb`` is 3/7 of the GPU."""
    if not profile:
        return 1.0
    try:
        return int(profile.split("g.", 1)[0]) / 7
    except ValueError:
        return 1.0


def amounts(req: Request) -> dict[str, float]:
    gpus = req.gpus + req.gpu_share_milli / 1000 + req.mig_count * mig_fraction(req.mig)
    return {"cpu": req.cpu_milli * req.nodes / 1000, "gpu": gpus * req.nodes, "mem_mib": req.memory_mib * req.nodes}


class QuotaLedger:
    def __init__(self, config: ClusterConfig, allocations: Iterable[Allocation], gpu_model_of: dict[str, str]):
        self.config = config
        self._limits: dict[str, Quota | None | bool] = {}
        self.used: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
        self.running: dict[tuple[str, str], set[int]] = defaultdict(set)
        for a in allocations:
            if not a.queue:
                continue
            u = self.used[a.queue]
            u["cpu"] += a.cpu_milli / 1000
            u["mem_mib"] += a.memory_mib
            gpus = len([g for g in a.gpu_ids if g in gpu_model_of]) + sum(a.gpu_share.values())
            u["gpu"] += gpus
            for g in a.gpu_ids:
                if g in gpu_model_of:
                    u["model:" + gpu_model_of[g]] += 1
            if a.job_id is not None:
                self.running[(a.queue, a.user)].add(a.job_id)

    def _quota(self, queue: str) -> Quota | None:
        """The queue's quota, or None when it limits nothing (the common case, checked once)."""
        hit = self._limits.get(queue, False)
        if hit is False:
            q = self.config.queues.get(queue)
            quota = q.quota if q else None
            limited = quota is not None and (any(getattr(quota, r) is not None for r in RESOURCES)
                                             or bool(quota.gpu_models) or quota.max_running_per_user is not None)
            hit = self._limits[queue] = quota if limited else None
        return hit

    @staticmethod
    def _nominal(quota: Quota, resource: str) -> float | None:
        if resource.startswith("model:"):
            return quota.gpu_models.get(resource[6:])
        return getattr(quota, resource)

    def _cohort_room(self, cohort: str, resource: str, extra: float) -> bool:
        nominal = used = 0.0
        for name, q in self.config.queues.items():
            if q.quota.cohort != cohort:
                continue
            limit = self._nominal(q.quota, resource)
            if limit is None:
                continue
            nominal += limit
            used += self.used[name][resource]
        return used + extra <= nominal + 1e-9

    def check(self, req: Request, gpu_model: str | None = None) -> str | None:
        """None when ``req`` fits its queue's quota; else a message naming the limit."""
        quota = self._quota(req.queue)
        if quota is None:
            return None
        cap = quota.max_running_per_user
        if cap is not None and len(self.running[(req.queue, req.user)]) >= cap:
            return f"queue {req.queue!r}: user {req.user!r} already runs {cap} jobs (max_running_per_user)"
        need = amounts(req)
        if gpu_model and need["gpu"]:
            need["model:" + gpu_model] = need["gpu"]
        for resource, amount in need.items():
            limit = self._nominal(quota, resource)
            if limit is None or amount == 0:
                continue
            if self.used[req.queue][resource] + amount <= limit + 1e-9:
                continue
            if quota.borrowing and quota.cohort and self._cohort_room(quota.cohort, resource, amount):
                continue
            return f"queue {req.queue!r}: {resource} {self.used[req.queue][resource] + amount:g} over quota {limit:g}"
        return None

    def add(self, req: Request, gpu_model: str | None = None, sign: int = 1) -> None:
        need = amounts(req)
        for resource, amount in need.items():
            self.used[req.queue][resource] += sign * amount
        if gpu_model and need["gpu"]:
            self.used[req.queue]["model:" + gpu_model] += sign * need["gpu"]
        running = self.running[(req.queue, req.user)]
        (running.add if sign > 0 else running.discard)(req.job_id)

    def borrowing(self, queue: str) -> bool:
        quota = self._quota(queue)
        if quota is None:
            return False
        for resource in RESOURCES:
            limit = getattr(quota, resource)
            if limit is not None and self.used[queue][resource] > limit + 1e-9:
                return True
        return any(self.used[queue]["model:" + m] > lim + 1e-9 for m, lim in quota.gpu_models.items())
