"""``RunsServices`` on Kubernetes: the Service object per crossdock service, draining a replica,
and what the status pass adds about replicas (``serving.py`` builds the objects)."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any, Callable

from kubernetes import client
from kubernetes.client.rest import ApiException

from crossdock.backends.kubernetes import manifests as m
from crossdock.backends.kubernetes import serving
from crossdock.backends.kubernetes.informer import body, list_all
from crossdock.queue.models import Job
from crossdock.queue.ports import BackendStatus

log = logging.getLogger(__name__)


class ServiceReplicas:
    """Mixed into ``KubernetesBackend`` (which sets ``core``, ``namespace`` and ``drain_seconds``,
    and says which pods are its store's: ``ours``)."""

    core: client.CoreV1Api
    namespace: str
    drain_seconds: float
    clock: Callable[[], float] = staticmethod(time.time)
    ours: Callable[[Any], bool]

    def _service_error(self, exc: BaseException, what: str) -> Exception:
        from crossdock.backends.kubernetes.backend import api_error

        return api_error(exc, what)

    def ensure_service(self, spec: Any) -> str:
        """Create the Service in front of ``spec``'s replicas, or bring its selector and port up to
        date; returns the address clients in the cluster use, ``<name>.<namespace>.svc:<port>``."""
        want = serving.service_manifest(spec.name, spec.port, self.namespace)
        name = want["metadata"]["name"]
        ref = f"{self.namespace}/{name}"
        address = f"{name}.{self.namespace}.svc:{spec.port}"
        try:
            try:
                body(self.core.create_namespaced_service(self.namespace, want, _preload_content=False))
                log.info("created Service %s for service %s", ref, spec.name)
                return address
            except ApiException as exc:
                if exc.status != 409:
                    raise
            have = json.loads(body(self.core.read_namespaced_service(name, self.namespace, _preload_content=False)))
            spec_have = have.get("spec") or {}
            ports_have = [{k: p.get(k) for k in ("name", "port", "targetPort", "protocol")}
                          for p in spec_have.get("ports") or []]
            if spec_have.get("selector") != want["spec"]["selector"] or ports_have != want["spec"]["ports"]:
                # a JSON patch replaces the lists whole (a strategic merge would add a port beside the old)
                body(self.core.patch_namespaced_service(name, self.namespace, [
                    {"op": "replace", "path": "/spec/selector", "value": want["spec"]["selector"]},
                    {"op": "replace", "path": "/spec/ports", "value": want["spec"]["ports"]}], _preload_content=False))
                log.info("updated Service %s for service %s", ref, spec.name)
        except Exception as exc:  # noqa: BLE001 - mapped to crossdock's errors
            raise self._service_error(exc, f"ensuring Service {ref}") from exc
        return address

    def delete_service(self, name: str) -> None:
        """Remove the Service of crossdock service ``name`` (gone already is fine)."""
        obj = serving.service_object_name(name)
        try:
            body(self.core.delete_namespaced_service(obj, self.namespace, _preload_content=False))
            log.info("deleted Service %s/%s", self.namespace, obj)
        except ApiException as exc:
            if exc.status != 404:
                raise self._service_error(exc, f"deleting Service {self.namespace}/{obj}") from exc
        except Exception as exc:  # noqa: BLE001
            raise self._service_error(exc, f"deleting Service {self.namespace}/{obj}") from exc

    def drain_replica(self, job: Job) -> int:
        """Take the replica's pods out of its Service (``serving=false``); the first drain's time
        stays, so a repeated call does not restart the drain delay. Returns the pods drained now."""
        sel = f"{m.LABEL_JOB_ID}={job.id},{m.LABEL_ATTEMPT}={job.attempts}"
        try:
            pods, _ = list_all(lambda **kw: self.core.list_namespaced_pod(self.namespace, **kw), label_selector=sel)
            pods = [p for p in pods if self.ours(p)]
            drained = 0
            for pod in pods:
                if ((pod.get("metadata") or {}).get("labels") or {}).get(serving.LABEL_SERVING) == "false":
                    continue
                body(self.core.patch_namespaced_pod(pod["metadata"]["name"], self.namespace,
                                                    serving.drain_patch(self.clock()), _preload_content=False))
                drained += 1
        except ApiException as exc:
            if exc.status == 404:  # the pod went meanwhile: nothing left to drain
                return 0
            raise self._service_error(exc, f"draining job {job.id}") from exc
        except Exception as exc:  # noqa: BLE001
            raise self._service_error(exc, f"draining job {job.id}") from exc
        if drained:
            log.info("job %s (service %s): %d pod(s) left the Service", job.id, job.spec.service.name, drained)
        return drained

    def _with_replica_status(self, statuses: dict[int, BackendStatus], jobs: Sequence[Job],
                             by_attempt: Mapping[tuple[int, int], list[dict[str, Any]]]) -> None:
        """Readiness, address and drain progress of each replica, in its status's ``extra``."""
        now = self.clock()
        for job in jobs:
            st = statuses.get(job.id)
            if st is None or job.spec.service is None:
                continue
            extra = serving.replica_status(by_attempt.get((job.id, job.attempts), []), now, self.drain_seconds)
            if extra:
                statuses[job.id] = replace(st, extra={**st.extra, **extra})
