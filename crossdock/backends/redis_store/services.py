"""The records of inference services: spec and status, the replica jobs each one follows, its
replicas' endpoints (where they listen, ready, draining, drained) and its latest traffic sample.

Keys are :class:`~crossdock.backends.redis_store.keys.Keys`' ``service*`` and ``endpoint``. The
writers are several processes: the leader's controller step (status, replicas), the faces (spec,
override, delete), the backends and the router (endpoints, readiness, drained, metrics), so each
write that must not resurrect or cross another is a small Lua script or a WATCHed transaction.
Events go to the service's own stream and, with a ``service`` field, to the global one.
"""

from __future__ import annotations

import json
import time
from typing import Any, Iterable, Mapping, Sequence

import redis
from pydantic import ValidationError

from crossdock.backends.redis_store.keys import Keys
from crossdock.queue.models import JobSpec
from crossdock.queue.serving import Endpoint, ServiceMetrics, ServiceRecord, ServiceSpec, ServiceStatus

METRICS_TTL_SECONDS = 300
"""A sample older than this is gone: a silent source is no traffic data, not the last traffic."""

# KEYS[1] service hash; ARGV: field, value, ... Writes only a service that still exists.
HSET_IF_EXISTS = """
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('HSET', KEYS[1], unpack(ARGV))
return 1
"""

# KEYS[1] endpoint hash; ARGV[1] attempt, ARGV[2] "1"|"" ready. Only the attempt the record is of.
SET_READY = """
if redis.call('HGET', KEYS[1], 'attempt') ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[1], 'ready', ARGV[2])
return 1
"""

# KEYS[1] endpoint hash. Drained only once draining: a late report of an earlier drain is ignored.
SET_DRAINED = """
if redis.call('HGET', KEYS[1], 'draining') ~= '1' then return 0 end
redis.call('HSET', KEYS[1], 'drained', '1')
return 1
"""


def _record(h: Mapping[str, str]) -> ServiceRecord:
    override = h.get("override", "")
    return ServiceRecord(spec=ServiceSpec.model_validate_json(h["spec"]), generation=int(h.get("generation") or 1),
                         status=ServiceStatus.model_validate_json(h["status"]) if h.get("status") else ServiceStatus(),
                         override=int(override) if override != "" else None, deleting=h.get("deleting") == "1",
                         address=h.get("address") or None, created=float(h.get("created") or 0))


def _endpoint(job_id: int, h: Mapping[str, str]) -> Endpoint:
    since = h.get("draining_since", "")
    return Endpoint(job_id=job_id, attempt=int(h.get("attempt") or 0), replica=int(h.get("replica") or 0),
                    host=h.get("host", ""), port=int(h.get("port") or 0), ready=h.get("ready") == "1",
                    draining=h.get("draining") == "1", drained=h.get("drained") == "1",
                    draining_since=float(since) if since else None, service=h.get("service", ""))


def _event_field(value: Any) -> str | int | float:
    if isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value)
    return value if isinstance(value, (str, int, float)) and not isinstance(value, bool) else json.dumps(value)


class ServiceStore:
    def __init__(self, client: redis.Redis, keys: Keys, stream_maxlen: int, actor: str = "crossdock"):
        self.r, self.k, self.maxlen, self.actor = client, keys, stream_maxlen, actor
        self._hset_if_exists = self.r.register_script(HSET_IF_EXISTS)
        self._set_ready = self.r.register_script(SET_READY)
        self._set_drained = self.r.register_script(SET_DRAINED)

    # --- the service record ----------------------------------------------------------------
    def put(self, spec: ServiceSpec) -> int:
        """Store ``spec`` (new, or replacing the one stored); return its generation, bumped when
        the workload changed (``ServiceSpec.same_workload``: its replicas must be replaced)."""
        key = self.k.service(spec.name)
        while True:
            with self.r.pipeline() as pipe:
                try:
                    pipe.watch(key)
                    old = pipe.hgetall(key)
                    generation = 1
                    if old:
                        generation = int(old.get("generation") or 1)
                        if not ServiceSpec.model_validate_json(old["spec"]).same_workload(spec):
                            generation += 1
                    pipe.multi()
                    fields = {"spec": spec.model_dump_json(), "generation": generation}
                    if not old:
                        fields |= {"status": ServiceStatus().model_dump_json(), "created": time.time()}
                    pipe.hset(key, mapping=fields)
                    pipe.sadd(self.k.services, spec.name)
                    pipe.execute()
                    return generation
                except redis.WatchError:
                    continue

    def get(self, name: str) -> ServiceRecord | None:
        h = self.r.hgetall(self.k.service(name))
        return _record(h) if h else None

    def count(self) -> int:
        return int(self.r.scard(self.k.services))

    def names(self) -> list[str]:
        return sorted(self.r.smembers(self.k.services))

    def list(self) -> list[ServiceRecord]:
        names = self.names()
        with self.r.pipeline() as pipe:
            for n in names:
                pipe.hgetall(self.k.service(n))
            found = pipe.execute()
        return [_record(h) for h in found if h]

    def set_status(self, name: str, status: ServiceStatus) -> bool:
        """Save the controller's status; False (nothing written) when the service is gone."""
        return bool(self._hset_if_exists(keys=[self.k.service(name)], args=["status", status.model_dump_json()]))

    def set_override(self, name: str, replicas: int | None) -> bool:
        """Pin the replica count (``None`` clears it: the autoscaler decides again)."""
        value = "" if replicas is None else replicas
        return bool(self._hset_if_exists(keys=[self.k.service(name)], args=["override", value]))

    def set_address(self, name: str, address: str | None) -> bool:
        """Where clients reach the service (``host:port``), set by whoever routes to it."""
        return bool(self._hset_if_exists(keys=[self.k.service(name)], args=["address", address or ""]))

    def request_delete(self, name: str) -> bool:
        """Mark the service for deletion: the controller drains and stops every replica, then
        calls :meth:`delete`. False when there is no such service."""
        return bool(self._hset_if_exists(keys=[self.k.service(name)], args=["deleting", "1"]))

    def delete(self, name: str) -> None:
        """Remove the record and everything kept for it (its replica jobs stay, as finished jobs do)."""
        ids = self.r.smembers(self.k.service_endpoints(name))
        with self.r.pipeline(transaction=True) as pipe:
            pipe.delete(self.k.service(name), self.k.service_jobs(name), self.k.service_endpoints(name),
                        self.k.service_metrics(name), self.k.service_events(name), *(self.k.endpoint(int(i)) for i in ids))
            pipe.srem(self.k.services, name)
            pipe.execute()

    # --- the replica jobs it follows -------------------------------------------------------
    def add_replicas(self, name: str, job_ids: Iterable[int], pipe: Any = None) -> None:
        ids = list(job_ids)
        if ids:
            (pipe or self.r).sadd(self.k.service_jobs(name), *ids)

    def replica_ids(self, name: str) -> list[int]:
        return sorted(int(i) for i in self.r.smembers(self.k.service_jobs(name)))

    def forget_replicas(self, name: str, job_ids: Iterable[int]) -> None:
        """Stop following these (finished) replica jobs and drop their endpoints."""
        ids = list(job_ids)
        if not ids:
            return
        with self.r.pipeline(transaction=True) as pipe:
            pipe.srem(self.k.service_jobs(name), *ids)
            pipe.srem(self.k.service_endpoints(name), *ids)
            pipe.delete(*(self.k.endpoint(i) for i in ids))
            pipe.execute()

    # --- endpoints ---------------------------------------------------------------------------
    def _replica_of(self, job_id: int):
        raw = self.r.hget(self.k.job(job_id), "spec")
        if raw is None:
            raise LookupError(f"job {job_id}: no such job")
        try:
            replica = JobSpec.model_validate_json(raw).service
        except ValidationError as exc:
            raise LookupError(f"job {job_id}: unreadable spec ({exc.errors()[0]['msg']})") from None
        if replica is None:
            raise LookupError(f"job {job_id}: not a service replica (its spec has no service)")
        return replica

    def set_endpoint(self, job_id: int, attempt: int, host: str, port: int) -> None:
        """Record where this attempt of a replica job listens. A new attempt starts not ready and not
        drained (a draining replica stays draining)."""
        replica = self._replica_of(job_id)
        key = self.k.endpoint(job_id)
        fields = {"service": replica.name, "replica": replica.replica, "attempt": attempt, "host": host, "port": port}
        old = self.r.hget(key, "attempt")
        with self.r.pipeline(transaction=True) as pipe:
            if old != str(attempt):
                fields |= {"ready": "", "drained": ""}
            pipe.hset(key, mapping=fields)
            pipe.sadd(self.k.service_endpoints(replica.name), job_id)
            pipe.execute()

    def set_ready(self, job_id: int, attempt: int, ready: bool) -> bool:
        """The readiness probe's verdict; ignored (False) for another attempt than the record's."""
        return bool(self._set_ready(keys=[self.k.endpoint(job_id)], args=[attempt, "1" if ready else ""]))

    def set_draining(self, job_id: int) -> None:
        """Take the replica out of traffic (no new requests); idempotent, the first time counts."""
        replica = self._replica_of(job_id)
        key = self.k.endpoint(job_id)
        with self.r.pipeline(transaction=True) as pipe:
            pipe.hset(key, mapping={"service": replica.name, "replica": replica.replica, "draining": "1"})
            pipe.hsetnx(key, "draining_since", time.time())
            pipe.sadd(self.k.service_endpoints(replica.name), job_id)
            pipe.execute()

    def set_drained(self, job_id: int) -> bool:
        """A draining replica's in-flight requests are done (the router says so); False when it was
        not draining."""
        return bool(self._set_drained(keys=[self.k.endpoint(job_id)]))

    def endpoint(self, job_id: int) -> Endpoint | None:
        h = self.r.hgetall(self.k.endpoint(job_id))
        return _endpoint(job_id, h) if h else None

    def endpoints(self, name: str) -> list[Endpoint]:
        ids = sorted(int(i) for i in self.r.smembers(self.k.service_endpoints(name)))
        with self.r.pipeline() as pipe:
            for i in ids:
                pipe.hgetall(self.k.endpoint(i))
            found = pipe.execute()
        return [_endpoint(i, h) for i, h in zip(ids, found) if h]

    # --- traffic -----------------------------------------------------------------------------
    def put_metrics(self, name: str, sample: ServiceMetrics) -> None:
        self.r.set(self.k.service_metrics(name), json.dumps(sample.to_dict()), ex=METRICS_TTL_SECONDS)

    def metrics(self, name: str) -> ServiceMetrics | None:
        raw = self.r.get(self.k.service_metrics(name))
        return ServiceMetrics.from_dict(json.loads(raw)) if raw else None

    # --- events ------------------------------------------------------------------------------
    def add_events(self, name: str, events: Sequence[Mapping[str, Any]], actor: str | None = None) -> None:
        """Record what happened to a service (``event`` names it; ``message`` says why), in its own
        stream and in the global one (with ``service``, and no ``job``)."""
        if not events:
            return
        now = time.time()
        with self.r.pipeline(transaction=True) as pipe:
            for e in events:
                fields = {k: _event_field(v) for k, v in {"service": name, "actor": actor or self.actor, "time": now,
                                                           **e}.items() if v is not None}
                pipe.xadd(self.k.service_events(name), fields, maxlen=self.maxlen, approximate=True)
                pipe.xadd(self.k.events, fields, maxlen=self.maxlen, approximate=True)
            pipe.execute()

    def events(self, name: str, count: int = 100) -> list[dict[str, str]]:
        """The latest ``count`` events of a service, oldest first."""
        return [dict(f) for _, f in reversed(self.r.xrevrange(self.k.service_events(name), count=count))]
