"""The services step of the leader's turn: deploy what the config declares, run the controller
(:func:`crossdock.queue.services.controller.reconcile`) for every service, and carry out its plan.

Per service and pass: read the record, its replica jobs and endpoints, the latest traffic sample
(:class:`~crossdock.queue.ports.ReadsServiceMetrics`: by default the samples the router writes to
the store; ``services.metrics.source`` names another) and, when a replica sits on a fallback pool,
the room on the preferred one; then submit new replica jobs (one idempotency token per replica,
so a pass cut short between submit and record finds them again), widen pending ones, take
replicas out of traffic (the store's drain flag and the backend's ``drain_replica``), cancel the
ones to stop, forget finished ones, save status and events. A service that fails to reconcile
is logged and retried next pass; the others go on.
"""

from __future__ import annotations

import logging
import time
from datetime import datetime, timezone
from typing import Callable, Iterable

from crossdock.backends import prometheus
from crossdock.backends.redis_store.store import JobStore
from crossdock.queue.assembly import allocations_of
from crossdock.queue.errors import CrossdockError, InvalidJob
from crossdock.queue.models import Job
from crossdock.queue.ports import ReadsServiceMetrics, RunsServices
from crossdock.queue.serving import ServiceMetrics, ServiceRecord, ServiceReplica
from crossdock.queue.services.controller import Inputs, Plan, reconcile
from crossdock.queue.services.replicas import replica_job, service_pools
from crossdock.queue.services.room import replica_room
from crossdock.queue.states import JobState
from crossdock.runtime import Runtime
from crossdock.workers.app import SendTask

log = logging.getLogger(__name__)


class StoredMetrics:
    """Traffic samples as the router writes them to the store (``ServiceStore.put_metrics``)."""

    def __init__(self, store: JobStore):
        self.store = store

    def service_metrics(self, service: str) -> ServiceMetrics | None:
        return self.store.services.metrics(service)


METRICS_SOURCES: dict[str, Callable[[Runtime], ReadsServiceMetrics]] = {
    "router": lambda rt: StoredMetrics(rt.store),
    "prometheus": lambda rt: prometheus.from_config(rt.config.services.metrics),
}
"""``services.metrics.source`` → how to build it; another source registers itself here."""


def metrics_source(rt: Runtime) -> ReadsServiceMetrics:
    source = rt.config.services.metrics.source
    if source not in METRICS_SOURCES:
        raise ValueError(f"services.metrics.source: {source!r} has no reader here; known: {', '.join(METRICS_SOURCES)}")
    return METRICS_SOURCES[source](rt)


class ServiceStep:
    def __init__(self, rt: Runtime, holder: str, send: SendTask, metrics: ReadsServiceMetrics | None = None):
        self.rt, self.holder, self.send = rt, holder, send
        self._metrics = metrics
        self._declared: dict[str, str] = {}
        """Declared service → the spec (JSON) this process last deployed for it."""
        self._ensured: dict[tuple[str, str], int] = {}
        """(service, backend kind) → the generation ``ensure_service`` last made."""

    @property
    def metrics(self) -> ReadsServiceMetrics:
        if self._metrics is None:
            self._metrics = metrics_source(self.rt)
        return self._metrics

    def wanted(self) -> bool:
        return bool(self.rt.config.services.deploy) or self.rt.store.services.count() > 0

    def pass_once(self) -> dict[str, Plan]:
        self.deploy_declared()
        plans = {}
        for name in self.rt.store.services.names():
            try:
                plan = self.reconcile_one(name)
            except (CrossdockError, ValueError, LookupError) as exc:  # this service's problem: the others go on
                log.warning("service %s: %s", name, exc)
                continue
            if plan is not None:
                plans[name] = plan
        return plans

    def deploy_declared(self) -> None:
        """Create or update the services the config declares, when their declaration changed."""
        services = self.rt.store.services
        for spec in self.rt.config.services.declared():
            text = spec.model_dump_json()
            if self._declared.get(spec.name) == text:
                continue
            current = services.get(spec.name)
            if current is None or current.spec != spec:
                generation = services.put(spec)
                event = {"event": "deployed", "message": f"from the config, generation {generation}"}
                services.add_events(spec.name, [event], actor=self.holder)
            self._declared[spec.name] = text

    # --- one service -------------------------------------------------------------------------
    def reconcile_one(self, name: str) -> Plan | None:
        store, services = self.rt.store, self.rt.store.services
        rec = services.get(name)
        if rec is None:
            return None
        ids = services.replica_ids(name)
        jobs = store.get_many(ids)
        gone = set(ids) - {j.id for j in jobs}
        if gone:  # expired from the store (retention) before a pass forgot them
            services.forget_replicas(name, gone)
        endpoints = {e.job_id: e for e in services.endpoints(name)}
        try:
            metrics = self.metrics.service_metrics(name)
        except Exception as exc:  # a source that is away is no sample: the replicas stay
            log.warning("service %s: traffic source failed: %s", name, exc)
            metrics = None
        pools = self._pools(rec)
        now = time.time()
        plan = reconcile(Inputs(rec, jobs, endpoints, metrics, pools, self._room(rec, jobs, pools), now))
        self._act(rec, plan, {j.id: j for j in jobs})
        try:
            self._ensure(rec, pools)
        except CrossdockError as exc:  # a backend that is away: its replicas still come, its Service next pass
            log.warning("service %s: ensure_service failed: %s", name, exc)
        return plan

    def _pools(self, rec: ServiceRecord) -> tuple[str, ...]:
        """The service's pools in order of preference, less those whose backend runs no replica
        (``Capabilities.services``: a Slurm partition holds batch work only)."""
        cfg = self.rt.config
        queue = cfg.queues.get(cfg.queue_name(rec.spec.queue))
        return tuple(p for p in service_pools(rec.spec, queue.pools if queue else ())
                     if p in cfg.pools and self.rt.backends.capabilities(cfg.pools[p].backend).services)

    def _room(self, rec: ServiceRecord, jobs: list[Job], pools: tuple[str, ...]) -> dict[str, int]:
        """Room on the preferred pool, looked up only when a replica runs on a fallback pool."""
        if len(pools) < 2 or not any(j.state is JobState.RUNNING and j.pool in pools[1:] for j in jobs):
            return {}
        store, cfg = self.rt.store, self.rt.config
        nodes = store.inventory() or []
        active = store.get_many(store.active_ids())
        allocations = [a for j in active for a in allocations_of(j, cfg)]
        now = datetime.now(timezone.utc)
        template = replica_job(rec.spec, ServiceReplica(name=rec.spec.name, replica=0), pools[:1], cfg, nodes, now)
        return replica_room(template, pools[:1], nodes, allocations, cfg, now)

    def _kinds(self, pools: Iterable[str]) -> list[str]:
        return sorted({self.rt.config.pools[p].backend for p in pools if p in self.rt.config.pools})

    def _service_backends(self, pools: Iterable[str]) -> list[tuple[str, RunsServices]]:
        out = []
        for kind in self._kinds(pools):
            if self.rt.backends.capabilities(kind).services:
                backend = self.rt.backends(kind)
                if isinstance(backend, RunsServices):
                    out.append((kind, backend))
        return out

    def _ensure(self, rec: ServiceRecord, pools: tuple[str, ...]) -> None:
        if rec.deleting:
            return
        for kind, backend in self._service_backends(pools):
            if self._ensured.get((rec.spec.name, kind)) != rec.generation:
                address = backend.ensure_service(rec.spec)
                if address and not rec.address:  # a router's address (local pools) stays the service's
                    self.rt.store.services.set_address(rec.spec.name, address)
                self._ensured[(rec.spec.name, kind)] = rec.generation

    def _act(self, rec: ServiceRecord, plan: Plan, jobs: dict[int, Job]) -> None:
        store, services, name = self.rt.store, self.rt.store.services, rec.spec.name
        events = list(plan.events)
        nodes = store.inventory() or []
        now = datetime.now(timezone.utc)
        for c in plan.creates:
            try:
                job = replica_job(rec.spec, c.replica, c.pools, self.rt.config, nodes, now)
            except InvalidJob as exc:
                events.append({"event": "replica_refused", "message": f"replica {c.replica.replica}: {exc}"})
                continue
            token = f"service:{name}:{rec.created:.6f}:{c.replica.replica}"
            (stored,) = store.submit([job], token=token, actor=self.holder)
            services.add_replicas(name, [stored.id])
        for w in plan.widens:
            store.update_if(w.job_id, (JobState.PENDING,), {"pools": list(w.pools)})
        for job_id in plan.drains:
            services.set_draining(job_id)
            job = jobs.get(job_id)
            for _kind, backend in self._service_backends([job.pool] if job and job.pool else []):
                backend.drain_replica(job)
        for s in plan.stops:
            res = store.cancel(s.job_id, actor=self.holder)
            if not res.cancelled_now and not res.state.terminal:
                self.send("crossdock.cancel", [s.job_id], res.backend or "local")
        services.forget_replicas(name, plan.forget)
        services.add_events(name, events, actor=self.holder)
        if plan.remove:
            for _kind, backend in self._service_backends(self._pools(rec)):
                backend.delete_service(name)
            services.delete(name)
            log.info("service %s deleted", name)
        else:
            services.set_status(name, plan.status)
