"""A local service replica: the port it listens on and what it is told.

A replica job (``JobSpec.service`` set) gets a free loopback port picked when its attempt
starts, in ``PORT``, with ``CROSSDOCK_SERVICE`` (the service's name) and ``CROSSDOCK_REPLICA``
(its ordinal); the endpoint (job, attempt, host, port) is recorded in the service store before
the server starts, so crossdock's router (:mod:`crossdock.workers.router`) probes it from its
first second and sends it traffic once it answers its readiness path.

The port is free when picked (below the kernel's ephemeral range: :mod:`.ports`) and bound by
the server a moment later: another process could take it in between. The server then fails to start, the attempt ends FAILED and the controller starts
another replica (a new port), which is what Kubernetes would do for a pod that crashes at start.
"""

from __future__ import annotations

from crossdock.backends.local.ports import free_port  # noqa: F401 (the supervisor's)
from crossdock.backends.redis_store.services import ServiceStore
from crossdock.queue.models import Job

HOST = "127.0.0.1"


def replica_environment(job: Job, port: int) -> dict[str, str]:
    replica = job.spec.service
    assert replica is not None
    return {"PORT": str(port), "CROSSDOCK_SERVICE": replica.name, "CROSSDOCK_REPLICA": str(replica.replica)}


def record_endpoint(services: ServiceStore, job: Job, port: int, host: str = HOST) -> None:
    services.set_endpoint(job.id, job.attempts, host, port)
