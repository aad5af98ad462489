"""What a backend's status pass says about service replicas, recorded on their endpoints.

Backends that cannot be probed from here (Kubernetes: the kubelet probes, the pod's Ready
condition tells) report a replica in ``BackendStatus.extra``: ``host``/``port`` (its address),
``ready`` (``true``/``false``), ``drained`` (``true`` once it left traffic long enough). The
follower hands them here after each pass; only what changed is written. The local backend's
router records its endpoints itself, so its statuses carry none of these and nothing happens.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

from crossdock.queue.models import Job
from crossdock.queue.ports import BackendStatus

log = logging.getLogger(__name__)


def record_replicas(store, jobs: Sequence[Job], statuses: Mapping[int, BackendStatus]) -> int:
    """Update the endpoints of the replica ``jobs`` from ``statuses`` (``store.services``); returns
    the writes made."""
    writes = 0
    for job in jobs:
        st = statuses.get(job.id)
        if job.spec.service is None or st is None or "ready" not in st.extra:
            continue
        try:
            writes += _record(store.services, job, st.extra)
        except LookupError as exc:  # the job went meanwhile
            log.debug("replica %s: %s", job.id, exc)
    return writes


def _record(services, job: Job, extra: Mapping[str, str]) -> int:
    writes = 0
    ep = services.endpoint(job.id)
    host, port = extra.get("host"), extra.get("port")
    current = ep is not None and ep.attempt == job.attempts
    if host and port and not (current and (ep.host, ep.port) == (host, int(port))):
        services.set_endpoint(job.id, job.attempts, host, int(port))
        ep, current, writes = services.endpoint(job.id), True, writes + 1
    if not current:
        return writes  # no address yet: readiness waits for one
    ready = extra.get("ready") == "true"
    if ep.ready != ready:
        services.set_ready(job.id, job.attempts, ready)
        writes += 1
    if extra.get("drained") == "true" and ep.draining and not ep.drained:
        services.set_drained(job.id)
        log.info("replica %s of service %s drained", job.id, job.spec.service.name)
        writes += 1
    return writes
