"""What the CLI and the Python API share for inference services: deploy, list, show, scale,
update and delete, each mutation allowed to the service's owner or an admin (as for jobs).

The leader's services step (:mod:`crossdock.workers.services`) does the work; these functions
only check and record what was asked for. Bad input is one :class:`CrossdockError` line that
names the field, the value and the fix.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Mapping

from pydantic import ValidationError

from crossdock.queue.config import ClusterConfig, service_placement_error
from crossdock.queue.errors import CrossdockError, InvalidJob, PermissionDenied
from crossdock.queue.models import Job, validation_message
from crossdock.queue.serving import Endpoint, ServiceRecord, ServiceReplica, ServiceSpec, ServiceState, ServiceStatus
from crossdock.queue.services.replicas import most_cpu, replica_job, service_pools, throttling_warning
from crossdock.runtime import Runtime
from crossdock.service import Caller, caller, load_inventory


class NoSuchService(CrossdockError):
    pass


class InvalidService(CrossdockError):
    """A service spec that is not valid, or cannot run under this config."""


@dataclass(frozen=True)
class ServiceView:
    """One service as ``crossdock services show`` tells it."""

    record: ServiceRecord
    replicas: list[tuple[Job, Endpoint | None]]
    events: list[dict[str, str]]
    warnings: list[str]

    def to_dict(self) -> dict[str, Any]:
        rec = self.record
        return {"name": rec.spec.name, "owner": rec.spec.user, "generation": rec.generation,
                "override": rec.override, "deleting": rec.deleting, "address": rec.address,
                "spec": rec.spec.model_dump(), "status": rec.status.model_dump(mode="json"),
                "replicas": [{"job_id": j.id, "replica": j.spec.service.replica if j.spec.service else None,
                              "generation": j.spec.service.generation if j.spec.service else None,
                              "state": j.state.value, "pool": j.pool, "pools": j.pools, "nodes": j.nodes,
                              "ready": bool(e and e.ready and e.attempt == j.attempts), "draining": bool(e and e.draining),
                              "endpoint": f"{e.host}:{e.port}" if e and e.port else None} for j, e in self.replicas],
                "events": self.events, "warnings": self.warnings}


def validate(rt: Runtime, spec: ServiceSpec) -> ServiceSpec:
    """``spec`` checked whole and against the config: its queue and pools exist, and a replica job
    of it would be admitted (some node could ever hold it)."""
    try:
        spec = ServiceSpec.model_validate(spec.model_dump())
    except ValidationError as exc:
        raise InvalidService(validation_message(exc)) from None
    problem = service_placement_error(rt.config, spec)
    if problem:
        raise InvalidService(problem)
    pools = service_pools(spec, rt.config.queues[rt.config.queue_name(spec.queue)].pools)
    try:
        replica_job(spec, ServiceReplica(name=spec.name, replica=0), pools, rt.config, load_inventory(rt),
                    datetime.now(timezone.utc))
    except InvalidJob as exc:
        raise InvalidService(f"a replica could not run: {exc}") from None
    return spec


def _get(rt: Runtime, name: str) -> ServiceRecord:
    rec = rt.store.services.get(name)
    if rec is None:
        known = ", ".join(rt.store.services.names()) or "none"
        raise NoSuchService(f"service {name!r}: no such service; deployed: {known}")
    return rec


def authorize(rt: Runtime, who: Caller, rec: ServiceRecord, action: str) -> None:
    """Allow ``action`` to the owner or an admin; else record a ``refused`` event and raise."""
    if who.admin or rec.spec.user == who.name:
        return
    rt.store.services.add_events(rec.spec.name, [{"event": "refused", "message": f"{action} refused to {who.name}"}],
                                 actor=who.name)
    raise PermissionDenied(f"{action} service {rec.spec.name!r}: it belongs to {rec.spec.user or 'the admins'!r}"
                           f" and you are {who.name!r}; only its owner or an admin may")


WORKLOAD_ENV = ("command", "env")
"""The fields whose change in an update takes the deployer's PATH again (:func:`with_deployer_path`)."""


def with_deployer_path(spec: ServiceSpec, environ: Mapping[str, str]) -> ServiceSpec:
    """A command run on the host finds its programs as it did in the deployer's shell: the
    deployer's ``PATH`` joins the service's ``env`` (as sbatch exports a submitter's), unless the
    spec sets one or runs an image (a container has its own)."""
    if spec.image or "PATH" in spec.env or not environ.get("PATH"):
        return spec
    return spec.model_copy(update={"env": {**spec.env, "PATH": environ["PATH"]}})


def with_deployer_path_changes(spec: ServiceSpec, changes: dict[str, Any], environ: Mapping[str, str]) -> dict[str, Any]:
    """``changes`` of an update of ``spec``, plus the deployer's PATH in ``env`` where a changed
    command or env should take it (:func:`with_deployer_path`): what a client that reaches the
    service through its socket sends, its own environment being out of the service's sight."""
    if not set(changes) & set(WORKLOAD_ENV):
        return changes
    try:
        merged = ServiceSpec.model_validate({**spec.model_dump(), **changes})
    except ValidationError:
        return changes  # the service names what is wrong
    pathed = with_deployer_path(merged, environ)
    return changes if pathed is merged else {**changes, "env": pathed.env}


def deploy(rt: Runtime, spec: ServiceSpec, who: Caller | None = None,
           environ: Mapping[str, str] | None = None) -> ServiceRecord:
    """Create a service, or update one the caller owns (a changed workload rolls its replicas);
    ``environ``: the deployer's environment, whose PATH the replicas get."""
    who = who or caller(rt)
    if environ is not None:
        spec = with_deployer_path(spec, environ)
    if not spec.user:
        spec = spec.model_copy(update={"user": who.name})
    elif spec.user != who.name and not who.admin:
        raise PermissionDenied(f"user: {spec.user!r} is not you ({who.name!r}); only an admin deploys for others")
    spec = validate(rt, spec)
    existing = rt.store.services.get(spec.name)
    if existing is not None:
        authorize(rt, who, existing, "update")
        if existing.deleting:
            raise InvalidService(f"service {spec.name!r} is being deleted; wait until `crossdock services list`"
                                 " no longer shows it, then deploy it again")
    generation = rt.store.services.put(spec)
    what = "deployed" if existing is None else ("updated" if generation != existing.generation else "changed")
    rt.store.services.add_events(spec.name, [{"event": what, "message": f"by {who.name}, generation {generation}"}],
                                 actor=who.name)
    return _get(rt, spec.name)


def update(rt: Runtime, name: str, changes: dict[str, Any], who: Caller | None = None,
           environ: Mapping[str, str] | None = None) -> ServiceRecord:
    """Change some fields of a service (``crossdock services update``); the rest stays. A new
    command or env takes the deployer's PATH (``environ``) unless it sets one or one is kept."""
    who = who or caller(rt)
    rec = _get(rt, name)
    authorize(rt, who, rec, "update")
    unknown = sorted(set(changes) - set(ServiceSpec.model_fields) | ({"name", "user"} & set(changes)))
    if unknown:
        raise InvalidService(f"{unknown[0]}: cannot be changed by update; changeable: "
                             + ", ".join(sorted(set(ServiceSpec.model_fields) - {"name", "user"})))
    try:
        spec = ServiceSpec.model_validate({**rec.spec.model_dump(), **changes})
    except ValidationError as exc:
        raise InvalidService(validation_message(exc)) from None
    workload = environ if set(changes) & set(WORKLOAD_ENV) else None
    return deploy(rt, spec, who, workload)  # the owner stays: ``spec.user`` is the record's


def scale(rt: Runtime, name: str, replicas: int | None, who: Caller | None = None) -> ServiceRecord:
    """Pin the replica count (None: back to the autoscaler, ``--auto``)."""
    who = who or caller(rt)
    rec = _get(rt, name)
    authorize(rt, who, rec, "scale")
    if replicas is not None and not 0 <= replicas <= 1000:
        raise InvalidService(f"replicas: {replicas} is out of range; give 0 to 1000, or --auto")
    rt.store.services.set_override(name, replicas)
    message = f"by {who.name}: " + ("back to the autoscaler" if replicas is None else f"{replicas} replicas")
    rt.store.services.add_events(name, [{"event": "override", "message": message}], actor=who.name)
    return _get(rt, name)


def delete(rt: Runtime, name: str, who: Caller | None = None) -> ServiceRecord:
    """Ask for deletion: the leader drains and stops every replica, then removes the record."""
    who = who or caller(rt)
    rec = _get(rt, name)
    authorize(rt, who, rec, "delete")
    rt.store.services.request_delete(name)
    rt.store.services.add_events(name, [{"event": "delete_requested", "message": f"by {who.name}"}], actor=who.name)
    return _get(rt, name)


def list_services(rt: Runtime) -> list[ServiceRecord]:
    return rt.store.services.list()


def warnings_of(rt: Runtime, rec: ServiceRecord) -> list[str]:
    queue = rt.config.queues.get(rt.config.queue_name(rec.spec.queue))
    found = throttling_warning(rec.spec, queue.cpu_request_ratio if queue else 1.0, rec.status.cpu_used)
    return [found] if found else []


def show(rt: Runtime, name: str, events: int = 20) -> ServiceView:
    rec = _get(rt, name)
    jobs = rt.store.get_many(rt.store.services.replica_ids(name))
    endpoints = {e.job_id: e for e in rt.store.services.endpoints(name)}
    return ServiceView(rec, [(j, endpoints.get(j.id)) for j in jobs], rt.store.services.events(name, events),
                       warnings_of(rt, rec))


def measured_cpu(rt: Runtime, name: str) -> float | None:
    """The most CPUs a replica of ``name`` was measured to use: the latest traffic sample's, else
    what the controller kept; None when nothing was measured (or the store does not answer)."""
    from crossdock.backends.redis_store.store import probe

    if probe(rt.redis_url) is not None:
        return None
    sample = rt.store.services.metrics(name)
    if sample is not None and sample.cpu_used:
        return most_cpu(sample.cpu_used)
    rec = rt.store.services.get(name)
    return rec.status.cpu_used if rec is not None else None


def declared_warnings(rt: Runtime, cfg: ClusterConfig) -> list[str]:
    """``config check``'s throttling warnings for the services ``cfg`` declares, against what the
    running installation measured for them."""
    out = []
    for spec in cfg.services.declared():
        queue = cfg.queues.get(cfg.queue_name(spec.queue))
        found = throttling_warning(spec, queue.cpu_request_ratio if queue else 1.0, measured_cpu(rt, spec.name))
        if found:
            out.append(f"services.deploy.{spec.name}.cpus: {found}")
    return out


class ServiceHandle:
    """A deployed service as the Python API sees it (``Client.serve``); every call reads the store."""

    def __init__(self, rt: Runtime, name: str, who: Caller):
        self.rt, self.name, self.who = rt, name, who

    def __repr__(self) -> str:
        return f"ServiceHandle({self.name!r})"

    def record(self) -> ServiceRecord:
        return _get(self.rt, self.name)

    def show(self) -> ServiceView:
        return show(self.rt, self.name)

    @property
    def address(self) -> str | None:
        """``host:port`` where clients reach it, once its router or Service is up."""
        return self.record().address

    def scale(self, replicas: int | None) -> ServiceRecord:
        """Pin the replicas (None: back to the autoscaler)."""
        return scale(self.rt, self.name, replicas, self.who)

    def update(self, **changes: Any) -> ServiceRecord:
        return update(self.rt, self.name, changes, self.who, os.environ)

    def delete(self) -> ServiceRecord:
        return delete(self.rt, self.name, self.who)

    def wait(self, *states: str, timeout: float = 120.0, poll: float = 0.2) -> ServiceRecord:
        """The record once the service is in one of ``states`` (default AVAILABLE); TimeoutError after
        ``timeout`` s. Waiting for DELETED returns when the record is gone."""
        import time

        wanted = {str(s) for s in states} or {"AVAILABLE"}
        deadline = time.monotonic() + timeout
        while True:
            rec = self.rt.store.services.get(self.name)
            if rec is None and "DELETED" in wanted:
                return ServiceRecord(spec=ServiceSpec(name=self.name, image="-"), generation=0,
                                     status=ServiceStatus(state=ServiceState.DELETED))
            if rec is not None and rec.status.state.value in wanted:
                return rec
            if time.monotonic() > deadline:
                now = rec.status.state.value if rec else "gone"
                raise TimeoutError(f"service {self.name!r} is {now}, not {' or '.join(sorted(wanted))},"
                                   f" after {timeout:g} s")
            time.sleep(poll)
