"""Kubernetes Events on the objects crossdock creates, so that ``kubectl describe job cd-12-1`` and
``kubectl get events`` tell what crossdock did and why: ``Submitted`` when it creates a Job (the
crossdock job, queue, pool, attempt), ``Preempting`` (the grace period) and ``Cancelling`` when it
stops one. core/v1 Events with ``involvedObject`` naming the Job by uid (``kubectl describe``
selects on it), ``source.component``/``reportingComponent`` ``crossdock``.

An Event is a courtesy: a failure to post one (RBAC without ``create events``, an API server
away) is logged and never fails the call that made it.
"""

from __future__ import annotations

import logging
import socket
from datetime import datetime, timezone
from typing import Any

log = logging.getLogger(__name__)

COMPONENT = "crossdock"
SUBMITTED, PREEMPTING, CANCELLING, EVICTING = "Submitted", "Preempting", "Cancelling", "Evicting"
MAX_MESSAGE = 1024
"""The API server refuses longer Event messages."""


def event_body(namespace: str, job_name: str, uid: str | None, reason: str, message: str, warning: bool = False,
               instance: str | None = None, now: datetime | None = None) -> dict[str, Any]:
    """A core/v1 Event about the batch/v1 Job ``job_name``."""
    stamp = (now or datetime.now(timezone.utc)).strftime("%Y-%m-%dT%H:%M:%SZ")
    involved = {"apiVersion": "batch/v1", "kind": "Job", "name": job_name, "namespace": namespace}
    if uid:
        involved["uid"] = uid
    return {"apiVersion": "v1", "kind": "Event",
            "metadata": {"generateName": f"{job_name}.", "namespace": namespace,
                         "labels": {"app.kubernetes.io/managed-by": COMPONENT}},
            "involvedObject": involved, "reason": reason, "message": message[:MAX_MESSAGE],
            "type": "Warning" if warning else "Normal", "count": 1,
            "firstTimestamp": stamp, "lastTimestamp": stamp,
            "source": {"component": COMPONENT, "host": instance or socket.gethostname()},
            "reportingComponent": COMPONENT, "reportingInstance": instance or socket.gethostname()}


class JobEvents:
    """Posts Events about crossdock's Jobs in one namespace."""

    def __init__(self, core: Any, namespace: str):
        self.core, self.namespace = core, namespace
        self.instance = socket.gethostname()

    def record(self, job_name: str, uid: str | None, reason: str, message: str, warning: bool = False) -> bool:
        """Post one Event; False (logged) when the API server did not take it."""
        body = event_body(self.namespace, job_name, uid, reason, message, warning, self.instance)
        try:
            resp = self.core.create_namespaced_event(self.namespace, body, _preload_content=False)
            resp.release_conn()
        except Exception as exc:  # noqa: BLE001 - an Event must never fail a submit or a stop
            log.warning("could not post the %s Event of Job %s/%s: %s", reason, self.namespace, job_name,
                        str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
            return False
        return True


def submitted_message(job: Any, tasks: int = 1) -> str:
    what = f"array {job.array_job_id} ({tasks} tasks)" if tasks > 1 else f"job {job.display_id}"
    return (f"crossdock {what} submitted: user {job.spec.user or '?'}, queue {job.queue}, pool {job.pool},"
            f" attempt {job.attempts}")


def stop_message(job: Any, why: str, grace: int | None) -> str:
    if why == "preempted":
        return (f"crossdock preempts job {job.display_id} (queue {job.queue}, priority class {job.priority_class}) for"
                f" a higher-priority job; its pods get {grace}s to stop" + (" and it is requeued" if job.spec.requeue
                                                                             else ""))
    return f"crossdock job {job.display_id} {why}" + (" by its owner or an admin" if why == "cancelled" else "")
