"""A tiny world for the service controller: replica jobs and endpoints that follow its plans.

Each :meth:`World.step` runs one controller pass at ``now`` and applies its plan the way the
leader step would: created replicas become pending jobs (placed at once unless their pools are
full), widened ones get their pools, drained ones leave traffic, stopped ones end. ``drain_done``
says whether the router reports a draining replica drained by the next pass.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime, timezone

from crossdock.queue.models import Job, JobSpec
from crossdock.queue.serving import Endpoint, ServiceMetrics, ServiceRecord, ServiceSpec, ServiceStatus
from crossdock.queue.services.controller import Inputs, Plan, reconcile
from crossdock.queue.states import JobState


def spec(**kw) -> ServiceSpec:
    base = {"name": "chat", "command": ["serve"], "user": "ana", "min_replicas": 1, "max_replicas": 20,
            "target_qps": 20.0, "scale_down_stabilization_seconds": 30, "fallback_after_seconds": 30}
    return ServiceSpec(**{**base, **kw})


def replica_job(job_id: int, ordinal: int, *, state: JobState = JobState.RUNNING, pool: str | None = "l4",
                generation: int = 1, replaces: int | None = None, pinned: bool = False,
                pools: tuple[str, ...] = ("l4",), cancel: bool = False) -> Job:
    from crossdock.queue.models import ServiceReplica
    return Job(id=job_id, spec=JobSpec(command=["serve"], user="ana",
                                       service=ServiceReplica(name="chat", replica=ordinal, generation=generation,
                                                              replaces=replaces, pinned=pinned)),
               state=state, attempts=1 if state is not JobState.PENDING else 0, queue="inference",
               pool=pool if state is not JobState.PENDING else None, pools=list(pools), cancel_requested=cancel,
               nodes=[f"{pool}-{job_id}"] if state is JobState.RUNNING else [])


def ready_endpoint(job: Job, **kw) -> Endpoint:
    return Endpoint(**{"job_id": job.id, "attempt": job.attempts, "replica": job.spec.service.replica,
                       "host": "127.0.0.1", "port": 9000 + job.id, "ready": True, "service": "chat", **kw})


@dataclass
class World:
    spec: ServiceSpec
    pools: tuple[str, ...] = ("l4",)
    free: dict[str, int] = field(default_factory=lambda: {"l4": 100})
    """Pool → replicas it can still place."""
    generation: int = 1
    override: int | None = None
    deleting: bool = False
    qps: float = 0.0
    p95: float | None = None
    drain_done: bool = True
    status: ServiceStatus = field(default_factory=ServiceStatus)
    jobs: dict[int, Job] = field(default_factory=dict)
    endpoints: dict[int, Endpoint] = field(default_factory=dict)
    next_id: int = 100
    plans: list[Plan] = field(default_factory=list)
    removed: bool = False

    def record(self) -> ServiceRecord:
        return ServiceRecord(self.spec, self.generation, self.status, self.override, self.deleting)

    def step(self, now: float) -> Plan:
        self._settle()
        metrics = ServiceMetrics(qps=self.qps, p95_seconds=self.p95, at=now, window_seconds=5)
        room = {p: self.free.get(p, 0) for p in self.pools}
        plan = reconcile(Inputs(self.record(), list(self.jobs.values()), dict(self.endpoints), metrics, self.pools,
                                room, now))
        self._apply(plan)
        self.plans.append(plan)
        return plan

    def _settle(self) -> None:
        """Between passes: pending replicas land where there is room; placed ones turn ready."""
        for job in list(self.jobs.values()):
            if job.state is JobState.PENDING and not job.cancel_requested:
                pool = next((p for p in job.pools if self.free.get(p, 0) > 0), None)
                if pool is not None:
                    self.free[pool] -= 1
                    job = self.jobs[job.id] = job.model_copy(update={"state": JobState.RUNNING, "pool": pool,
                                                                      "attempts": 1, "nodes": [f"{pool}-{job.id}"]})
                    self.endpoints[job.id] = ready_endpoint(job)

    def _apply(self, plan: Plan) -> None:
        self.status = plan.status
        for c in plan.creates:
            self.next_id += 1
            self.jobs[self.next_id] = Job(id=self.next_id, spec=JobSpec(command=["serve"], user="ana", service=c.replica),
                                          queue="inference", pools=list(c.pools),
                                          submit_time=datetime.fromtimestamp(plan.status.updated_at, timezone.utc))
        for w in plan.widens:
            self.jobs[w.job_id] = self.jobs[w.job_id].model_copy(update={"pools": list(w.pools)})
        for job_id in plan.drains:
            self.endpoints[job_id] = replace(self.endpoints[job_id], draining=True, draining_since=plan.status.updated_at,
                                             drained=self.drain_done)
        for s in plan.stops:
            job = self.jobs[s.job_id]
            if job.pool and job.state is JobState.RUNNING:
                self.free[job.pool] = self.free.get(job.pool, 0) + 1
            self.jobs[s.job_id] = job.model_copy(update={"state": JobState.CANCELLED, "cancel_requested": True})
        for job_id in plan.forget:
            self.jobs.pop(job_id, None)
            self.endpoints.pop(job_id, None)
        self.removed = plan.remove

    # views
    def live(self) -> list[Job]:
        return [j for j in self.jobs.values() if not j.state.terminal and not j.cancel_requested
                and not (self.endpoints.get(j.id) and self.endpoints[j.id].draining)]

    def running_on(self, pool: str) -> int:
        return sum(1 for j in self.live() if j.state is JobState.RUNNING and j.pool == pool)
