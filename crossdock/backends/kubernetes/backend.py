"""The Kubernetes backend: pools are node selectors, jobs are ``batch/v1`` Jobs.

* ``submit`` creates ``cd-<job id>-<attempt>``; 409 AlreadyExists means a replayed dispatch,
  and the existing Job (checked to carry the same id and attempt labels) is the answer.
* ``inventory`` reads Nodes (allocatable, GPU product labels, taints, conditions) and the
  pods bound to them that crossdock did not create: those hold capacity too.
* ``status`` answers from two informers (crossdock's pods and Jobs, watched from the last
  resourceVersion, listed again on 410) — or, with ``watch=False``, from one labelled list
  of each. ``states.py`` translates; this module only gathers what belongs to which job.
* ``cancel``/``preempt`` mark the Job (``crossdock.io/stop``) and delete it in the foreground,
  preempt first deleting the pods with the job's grace period.
* ``evict`` (the descheduler's) goes through the Eviction API, so PodDisruptionBudgets hold: a
  budget's 429 is ``REFUSED_BY_BUDGET`` and nothing is retried; ``disruption_budgets`` reads the
  namespace's PDBs (``eviction.py``).
* every pod is created behind a scheduling gate that ``status`` lifts from one pod per run, so
  the Job controller's rare second pod never starts (``once.py``); gangs (multi-node jobs) are
  released whole, when every worker fits (``gangs.py``).
* ``orphans``/``delete_orphans`` find unfinished Jobs of no active attempt (reconcile).
* ``sync_priority_classes`` makes a ``crossdock-<name>`` PriorityClass per configured class.
* ``node_group``/``add_nodes``/``remove_nodes`` grow and shrink pools with ``provisioner: kwok`` or
  ``karpenter`` (``provisioning.py``, ``karpenter.py``).
"""

from __future__ import annotations

import json
import logging
import pwd
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from kubernetes import client
from kubernetes.client.rest import ApiException

from crossdock.queue.ports import (BackendError, BackendStatus, BackendUnavailable, Capabilities, Eviction, Inventory,
                                   NodeGroup, Orphan, StopRequests, SubmitFailed)
from crossdock.backends.kubernetes import eviction, gangs, once
from crossdock.backends.kubernetes import manifests as m
from crossdock.backends.kubernetes import nodes, provisioning
from crossdock.backends.kubernetes import states
from crossdock.backends.kubernetes.events import (CANCELLING, PREEMPTING, SUBMITTED, JobEvents, stop_message,
                                                 submitted_message)
from crossdock.backends.kubernetes.fleet import DeploymentFleets
from crossdock.backends.kubernetes.informer import Informer, body, list_all
from crossdock.backends.kubernetes.replicas import ServiceReplicas
from crossdock.queue.config import ClusterConfig
from crossdock.queue.models import Job
from crossdock.queue.states import JobState, Reason

log = logging.getLogger(__name__)

COMPLETION_INDEX = once.COMPLETION_INDEX
RELEASE_PARALLELISM = 8
"""Pods released at once in one status pass (a 1,000-task array's pods appear together)."""


def _body(exc: ApiException) -> str:
    try:
        return str(json.loads(exc.body or "{}").get("message") or exc.reason)
    except ValueError:
        return str(exc.body or exc.reason)


def api_error(exc: BaseException, what: str) -> Exception:
    """The crossdock error for a failed API call: refused for good, or worth retrying."""
    if isinstance(exc, ApiException):
        msg = f"{what}: {exc.status} {_body(exc)}"
        if exc.status in (400, 404, 422):
            return SubmitFailed(msg)
        if exc.status == 403 and "exceeded quota" in msg:
            return BackendUnavailable(msg, retryable=True)
        if exc.status in (401, 403):
            return BackendUnavailable(msg + " (check the kubeconfig's credentials and RBAC)", retryable=False)
        return BackendUnavailable(msg, retryable=True)
    return BackendUnavailable(f"{what}: Kubernetes API unreachable: {exc}", retryable=True)


def _labels(obj: Mapping[str, Any]) -> dict[str, str]:
    return dict((obj.get("metadata") or {}).get("labels") or {})


def _annotations(obj: Mapping[str, Any]) -> dict[str, str]:
    return dict((obj.get("metadata") or {}).get("annotations") or {})


def _array_tasks(kjobs: Mapping[str, tuple[dict[str, Any], bool]]) -> dict[tuple[int, int], tuple[str, str]]:
    """(job id, attempt) → (array Job name, completion index), from every array Job's
    ``crossdock.io/array-jobs`` annotation (an array may be split over several Jobs)."""
    out: dict[tuple[int, int], tuple[str, str]] = {}
    for name, (kjob, _deleted) in kjobs.items():
        labels = _labels(kjob)
        if m.LABEL_ARRAY_JOB not in labels:
            continue
        try:
            attempt = int(labels.get(m.LABEL_ATTEMPT, "0"))
            for i, pair in enumerate(_annotations(kjob).get(m.ANNOTATION_ARRAY_JOBS, "").split(",")):
                if pair:
                    out[(int(pair.split(":", 1)[0]), attempt)] = (name, str(i))
        except ValueError:
            continue
    return out


class KubernetesBackend(ServiceReplicas):
    kind = "k8s"
    capabilities = Capabilities(arrays=True, batches=True, reowns_claims=True, backend_queue=True, logs=True,
                                provisioners=provisioning.PROVISIONERS, fleets=True, services=True, evicts=True,
                                signals=True)

    def __init__(self, config: ClusterConfig, api_client: client.ApiClient, *, namespace: str = "default",
                 store: StopRequests | None = None, image: str = "python:3.11-slim",
                 ttl_seconds_after_finished: int | None = 3600,
                 deadline_slack_seconds: int = 300, watch: bool = True, sync_timeout: float = 30.0,
                 karpenter_node_class: str | None = None, drain_seconds: float = 5.0,
                 installation: Callable[[], tuple[str, bool]] | None = None) -> None:
        self.config = config
        self._installation, self._identity = installation, None
        self.drain_seconds = drain_seconds
        """How long a draining replica stays up after leaving its Service (``replicas.py``)."""
        self.api = api_client
        self.core = client.CoreV1Api(api_client)
        self.batch = client.BatchV1Api(api_client)
        self.scheduling = client.SchedulingV1Api(api_client)
        self.namespace = namespace
        self.store = store
        self.watch = watch
        self.sync_timeout = sync_timeout
        self.options = m.Options(namespace=namespace, image=image, ttl_seconds_after_finished=ttl_seconds_after_finished,
                                 deadline_slack_seconds=deadline_slack_seconds)
        self._gpu_products: dict[str, tuple[str, ...]] | None = None
        self.provisioners = provisioning.Provisioners(config, api_client, karpenter_node_class=karpenter_node_class)
        self._informers: tuple[Informer, Informer] | None = None
        self._lock = threading.Lock()
        self._gated = threading.Event()
        """Set by the pods' watch when a gated pod appears: the releaser thread lets it through."""
        self._closed = threading.Event()
        """Set by ``close``: the releaser of those informers stops (each informers() start has its own)."""
        self.events = JobEvents(self.core, namespace)
        """Kubernetes Events on crossdock's Jobs (``events.py``)."""

    # --- inventory --------------------------------------------------------------------------
    def inventory(self) -> Inventory:
        """Nodes of the configured pools, and capacity held by pods crossdock did not create."""
        try:
            raw_nodes, _ = list_all(self.core.list_node)
            pods, _ = list_all(self.core.list_pod_for_all_namespaces, field_selector=nodes.BOUND_AND_ACTIVE)
        except Exception as exc:  # noqa: BLE001 - mapped to crossdock's errors
            raise api_error(exc, "listing nodes and pods") from exc
        found = nodes.pool_nodes(raw_nodes, self.config, self.kind)
        self._gpu_products = nodes.gpu_products(raw_nodes)
        return Inventory(found, tuple(nodes.foreign_allocations(pods, found)))

    def gpu_products(self) -> dict[str, tuple[str, ...]]:
        """Lower-case GPU model → ``nvidia.com/gpu.product`` values on the cluster's nodes."""
        if self._gpu_products is None:
            try:
                raw_nodes, _ = list_all(self.core.list_node)
            except Exception as exc:  # noqa: BLE001
                raise api_error(exc, "listing nodes") from exc
            self._gpu_products = nodes.gpu_products(raw_nodes)
        return dict(self._gpu_products)

    # --- node pools (ProvisionsNodes: pools with provisioner kwok or karpenter) -----------------
    def node_group(self, pool: str) -> NodeGroup:
        return self.provisioners.of(pool).node_group(pool)

    def add_nodes(self, pool: str, count: int) -> list[str]:
        return self.provisioners.of(pool).add_nodes(pool, count)

    def remove_nodes(self, pool: str, names: Sequence[str]) -> list[str]:
        return self.provisioners.of(pool).remove_nodes(pool, names)

    # --- worker fleets (ScalesFleet: a Deployment's /scale, fleet.py) -------------------------
    def fleet_replicas(self, fleet: Any) -> int:
        return DeploymentFleets(self.api, api_error).replicas(fleet)

    def scale_fleet(self, fleet: Any, replicas: int, busy: Iterable[str] = frozenset()) -> int:
        return DeploymentFleets(self.api, api_error).scale(fleet, replicas, frozenset(busy))

    # --- dispatch ---------------------------------------------------------------------------
    @property
    def identity(self) -> tuple[str, bool]:
        """The store's identity and whether it answers for unlabelled objects (``m.owned_by``),
        asked once, when first needed."""
        if self._identity is None:
            self._identity = self._installation() if self._installation is not None else ("", True)
        return self._identity

    def ours(self, obj: Mapping[str, Any]) -> bool:
        """Whether ``obj`` (a pod or Job crossdock made) is this store's, not an earlier store's."""
        return m.owned_by(_labels(obj), *self.identity)

    def manifest(self, job: Job, array_tasks: Sequence[Job] | None = None) -> dict[str, Any]:
        opts = m.Options(**{**self.options.__dict__, "gpu_products": self.gpu_products(),
                            "installation": self.identity[0]})
        try:
            return m.build(job, self.config, opts, array_tasks=array_tasks, owner_ids=owner_ids(job.spec.user))
        except ValueError as exc:
            raise SubmitFailed(str(exc)) from exc

    def _create(self, manifest: dict[str, Any], expect: Mapping[str, str], message: str | None = None) -> str:
        """Create the Job (``message``: its ``Submitted`` Event's)."""
        name = manifest["metadata"]["name"]
        ref = f"{self.namespace}/{name}"
        try:
            created = json.loads(body(self.batch.create_namespaced_job(self.namespace, manifest,
                                                                       _preload_content=False)) or b"{}")
            log.info("created Job %s", ref)
            if message is not None:
                self.events.record(name, (created.get("metadata") or {}).get("uid"), SUBMITTED, message)
            return ref
        except ApiException as exc:
            if exc.status != 409:
                raise api_error(exc, f"creating Job {ref}") from exc
        except Exception as exc:  # noqa: BLE001 - connection errors: maybe it was created; the retry finds it
            raise api_error(exc, f"creating Job {ref}") from exc
        try:
            existing = json.loads(body(self.batch.read_namespaced_job(name, self.namespace, _preload_content=False)))
        except Exception as exc:  # noqa: BLE001
            raise api_error(exc, f"reading Job {ref}") from exc
        labels = _labels(existing)
        if any(labels.get(k) != v for k, v in expect.items()) or not self.ours(existing):
            raise SubmitFailed(f"Job {ref} exists but is not this attempt's (labels {labels}); "
                               "delete it or use another namespace")
        log.info("Job %s already exists: replayed dispatch", ref)
        return ref

    def submit(self, job: Job, fresh: bool = False) -> str:
        """Create the Job; a replayed dispatch gets 409 and the existing Job, so ``fresh`` saves nothing."""
        manifest = self.manifest(job)
        ref = self._create(manifest, {m.LABEL_JOB_ID: str(job.id), m.LABEL_ATTEMPT: str(job.attempts)},
                           submitted_message(job))
        if job.spec.nodes > 1:
            self._create_service(job, manifest["metadata"]["name"])
        return ref

    def _create_service(self, job: Job, name: str) -> None:
        """The workers' headless Service (manifests.service), owned by the Job so it goes with it."""
        ref = f"{self.namespace}/{name}"
        try:
            uid = json.loads(body(self.batch.read_namespaced_job(name, self.namespace, _preload_content=False)))[
                "metadata"]["uid"]
            svc = m.service(job, m.Options(namespace=self.namespace), owner_uid=uid)
            body(self.core.create_namespaced_service(self.namespace, svc, _preload_content=False))
            log.info("created Service %s", ref)
        except ApiException as exc:
            if exc.status != 409:  # a replayed dispatch finds it made
                raise api_error(exc, f"creating Service {ref}") from exc
        except Exception as exc:  # noqa: BLE001 - connection errors: the retry finds the Job and makes it
            raise api_error(exc, f"creating Service {ref}") from exc

    def submit_array(self, tasks: Sequence[Job], throttle: int | None = None, fresh: bool = False) -> dict[int, str]:
        """``tasks`` of one array (same attempt) as one Indexed Job; returns job id → ref.

        Idempotent per group (the Job's name holds the array id, the attempt and the group's
        lowest task id). ``throttle`` (default: the spec's ``%max_running``) caps ``parallelism``;
        ``fresh`` changes nothing here (a create answers 409 for a Job that exists).
        crossdock's per-task node choice is not pinned: every pod of the Job may go to any node
        of the pool, where kube-scheduler honours the queue's placement (affinity or spread)."""
        if not tasks:
            return {}
        first = tasks[0]
        if first.array_job_id is None or any(t.array_job_id != first.array_job_id or t.attempts != first.attempts
                                             for t in tasks):
            raise SubmitFailed("submit_array: give tasks of one array with the same attempt")
        ordered = sorted(tasks, key=lambda t: t.array_task_id or 0)
        lead = ordered[0].model_copy(update={"nodes": [], "gpu_ids": []})
        manifest = self.manifest(lead, array_tasks=ordered)
        if throttle:
            manifest["spec"]["parallelism"] = min(len(ordered), throttle)
        ref = self._create(manifest, {m.LABEL_ARRAY_JOB: str(first.array_job_id), m.LABEL_ATTEMPT: str(first.attempts)},
                           submitted_message(first, len(ordered)))
        return {t.id: f"{ref}#{i}" for i, t in enumerate(ordered)}

    # --- stop -------------------------------------------------------------------------------
    def _call(self, what: str, fn: Any, *args: Any, missing_ok: bool = True, **kwargs: Any) -> bool:
        """Run one API call whose answer is not needed; False when the object was not there."""
        try:
            body(fn(*args, _preload_content=False, **kwargs))
            return True
        except ApiException as exc:
            if exc.status == 404 and missing_ok:
                return False
            raise api_error(exc, what) from exc
        except Exception as exc:  # noqa: BLE001 - connection errors
            raise api_error(exc, what) from exc

    def _mark(self, name: str, patch: dict[str, Any], what: str) -> str | None:
        """Patch the Job ``name``; its uid ("" if unnamed), None when it is not there."""
        try:
            raw = body(self.batch.patch_namespaced_job(name, self.namespace, patch, _preload_content=False))
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise api_error(exc, what) from exc
        except Exception as exc:  # noqa: BLE001 - connection errors
            raise api_error(exc, what) from exc
        try:
            return str((json.loads(raw or b"{}").get("metadata") or {}).get("uid") or "")
        except ValueError:
            return ""

    def _stop(self, job: Job, why: str, grace: int | None) -> None:
        """Mark the attempt's Job with why it stops, then delete it (in the foreground, so the
        Job stays visible until its pods are gone). ``grace`` overrides the pods' own period.

        One task of an array submitted as one Indexed Job stops alone: the Job is marked for
        that task (``crossdock.io/stop-<job id>``) and only its index's pod is deleted; with
        ``backoffLimitPerIndex: 0`` that index fails and the others go on."""
        name = m.job_name(job.id, job.attempts)
        patch = {"metadata": {"annotations": {m.ANNOTATION_STOP: why}}}
        uid = self._mark(name, patch, f"marking Job {name} {why}")
        if uid is not None:
            self.events.record(name, uid, PREEMPTING if why == "preempted" else CANCELLING,
                               stop_message(job, why, grace))
            if grace is not None:
                self._call(f"deleting the pods of Job {name}", self.core.delete_collection_namespaced_pod,
                           self.namespace, label_selector=f"job-name={name}", grace_period_seconds=grace)
            self._call(f"deleting Job {name}", self.batch.delete_namespaced_job, name, self.namespace,
                       propagation_policy="Foreground")
            log.info("job %s: %s Job %s/%s", job.id, why, self.namespace, name)
            return
        if job.array_job_id is None:
            return
        _, kjobs = self._objects()
        found = _array_tasks(kjobs).get((job.id, job.attempts))
        if found is None:
            return
        name, index = found
        patch = {"metadata": {"annotations": {f"{m.ANNOTATION_STOP}-{job.id}": why}}}
        uid = self._mark(name, patch, f"marking Job {name} {why}")
        if uid is None:
            return
        self.events.record(name, uid, PREEMPTING if why == "preempted" else CANCELLING, stop_message(job, why, grace))
        if index is not None:
            self._call(f"deleting task {job.id} of Job {name}", self.core.delete_collection_namespaced_pod,
                       self.namespace, label_selector=f"job-name={name},{COMPLETION_INDEX}={index}",
                       grace_period_seconds=grace)
            log.info("job %s: %s index %s of Job %s/%s", job.id, why, index, self.namespace, name)

    def cancel(self, job: Job) -> None:
        self._stop(job, "cancelled", None)

    def preempt(self, job: Job, grace_seconds: int) -> None:
        if self.store is not None:
            self.store.request_preempt(job.id, grace_seconds)
        self._stop(job, "preempted", grace_seconds)

    # --- evict (EvictsJobs, ReportsDisruptionBudgets: eviction.py) ----------------------------
    def _attempt_pods(self, job: Job) -> list[str]:
        """The names of the attempt's pods that are not terminating yet (an array task: its index's pod)."""
        try:
            pods, _ = list_all(lambda **kw: self.core.list_namespaced_pod(self.namespace, **kw),
                               label_selector=f"{m.LABEL_JOB_ID}={job.id},{m.LABEL_ATTEMPT}={job.attempts}")
            pods = [p for p in pods if self.ours(p)]
            if not pods and job.array_job_id is not None:
                _, kjobs = self._objects()
                found = _array_tasks(kjobs).get((job.id, job.attempts))
                if found is not None:
                    pods, _ = list_all(lambda **kw: self.core.list_namespaced_pod(self.namespace, **kw),
                                       label_selector=f"job-name={found[0]},{COMPLETION_INDEX}={found[1]}")
        except BackendError:
            raise
        except Exception as exc:  # noqa: BLE001
            raise api_error(exc, f"listing the pods of job {job.id}") from exc
        return sorted(p["metadata"]["name"] for p in pods if not p["metadata"].get("deletionTimestamp")
                      and (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed"))

    def evict(self, job: Job, grace_seconds: int) -> Eviction:
        """Evict the attempt's pods through the Eviction API. The Job is marked ``evicted`` first
        (so its end reads as an eviction even if its pods vanish unseen) and unmarked when a
        budget refuses; on success the store counts the capacity as terminating, as for a
        preemption, and the follower requeues the job as a new attempt."""
        pods = self._attempt_pods(job)
        if not pods:
            return Eviction.GONE
        name = m.job_name(job.id, job.attempts) if job.array_job_id is None else None
        mark = (lambda why: self._call(f"marking Job {name}", self.batch.patch_namespaced_job, name, self.namespace,
                                       {"metadata": {"annotations": {m.ANNOTATION_STOP: why}}})) if name else None
        if mark is not None:
            mark("evicted")
        outcome, why = eviction.evict_pods(self.core, self.namespace, pods, grace_seconds, api_error)
        if outcome is Eviction.REFUSED_BY_BUDGET:
            if mark is not None:
                mark(None)
            log.info("job %s: eviction refused: %s", job.id, why)
        elif outcome is Eviction.EVICTED:
            if self.store is not None:
                self.store.request_preempt(job.id, grace_seconds)
            log.info("job %s: evicted (%s)", job.id, why)
        return outcome

    def disruption_budgets(self) -> list[Any]:
        """The namespace's PodDisruptionBudgets, each covering the crossdock jobs its selector matches."""
        policy = client.PolicyV1Api(self.api)
        try:
            pdbs, _ = list_all(lambda **kw: policy.list_namespaced_pod_disruption_budget(self.namespace, **kw))
            out = []
            for pdb in pdbs:
                selector = eviction.selector_string((pdb.get("spec") or {}).get("selector"))
                if selector is None:
                    continue
                sel = ",".join(filter(None, [f"{m.LABEL_MANAGED_BY}={m.MANAGED_BY}", selector]))
                pods, _ = list_all(lambda **kw: self.core.list_namespaced_pod(self.namespace, **kw), label_selector=sel)
                budget = eviction.budget_of(pdb, eviction.job_ids_of([p for p in pods if self.ours(p)]))
                if budget is not None:
                    out.append(budget)
            return out
        except Exception as exc:  # noqa: BLE001
            raise api_error(exc, "reading PodDisruptionBudgets") from exc

    # --- follow -----------------------------------------------------------------------------
    def informers(self) -> tuple[Informer, Informer]:
        """Crossdock's pods and Jobs in the namespace, watched (started on first use)."""
        with self._lock:
            if self._informers is None:
                sel = f"{m.LABEL_MANAGED_BY}={m.MANAGED_BY}"
                pods = Informer(lambda **kw: self.core.list_namespaced_pod(self.namespace, **kw),
                                label_selector=sel, name="k8s-pods", on_event=self._pod_event)
                jobs = Informer(lambda **kw: self.batch.list_namespaced_job(self.namespace, **kw),
                                label_selector=sel, name="k8s-jobs")
                self._informers = (pods.start(), jobs.start())
                self._closed = threading.Event()
                threading.Thread(target=self._releaser, args=(pods, self._closed), daemon=True,
                                 name="k8s-once").start()
        pods, jobs = self._informers
        if not (pods.wait_synced(self.sync_timeout) and jobs.wait_synced(self.sync_timeout)):
            raise BackendUnavailable(f"no list of pods and Jobs in namespace {self.namespace} within "
                                     f"{self.sync_timeout:.0f}s", retryable=True)
        return pods, jobs

    def _pod_event(self, kind: str, pod: dict[str, Any]) -> None:
        if kind != "DELETED" and once.gated(pod):
            self._gated.set()

    def _releaser(self, pods: Informer, closed: threading.Event) -> None:
        """Let gated pods through as soon as the watch shows them (a start does not wait for the
        next status pass, which releases them too), a burst at a time."""
        while not closed.is_set():
            if not self._gated.wait(1.0):
                continue
            self._gated.clear()
            if pods.synced and not closed.is_set():
                self.release_once(pods.objects(with_tombstones=False), pods.tombstones())

    def close(self) -> None:
        self._closed.set()
        with self._lock:
            informers, self._informers = self._informers, None
        for inf in informers or ():
            inf.stop()

    def _objects(self) -> tuple[list[dict[str, Any]], dict[str, tuple[dict[str, Any], bool]]]:
        """(pods, Jobs by name with their deleted flag), from the informers or one list each."""
        if self.watch:
            pods_inf, jobs_inf = self.informers()
            jobs: dict[str, tuple[dict[str, Any], bool]] = {}
            for obj in jobs_inf.objects():
                name = obj["metadata"]["name"]
                if self.ours(obj):
                    jobs[name] = jobs_inf.get(self.namespace, name)  # type: ignore[assignment]
            return [p for p in pods_inf.objects() if self.ours(p)], jobs
        sel = f"{m.LABEL_MANAGED_BY}={m.MANAGED_BY}"
        try:
            pods, _ = list_all(lambda **kw: self.core.list_namespaced_pod(self.namespace, **kw), label_selector=sel)
            raw_jobs, _ = list_all(lambda **kw: self.batch.list_namespaced_job(self.namespace, **kw),
                                   label_selector=sel)
        except Exception as exc:  # noqa: BLE001
            raise api_error(exc, "listing crossdock's pods and Jobs") from exc
        return [p for p in pods if self.ours(p)], {j["metadata"]["name"]: (j, False) for j in raw_jobs if self.ours(j)}

    def status(self, jobs: Sequence[Job]) -> dict[int, BackendStatus]:
        pods, kjobs = self._objects()
        by_attempt: dict[tuple[int, int], list[dict[str, Any]]] = {}
        by_index: dict[tuple[str, str], dict[str, Any]] = {}
        for pod in pods:
            labels, ann = _labels(pod), _annotations(pod)
            if m.LABEL_JOB_ID in labels:
                try:
                    key = (int(labels[m.LABEL_JOB_ID]), int(labels.get(m.LABEL_ATTEMPT, "0")))
                except ValueError:
                    continue
                by_attempt.setdefault(key, []).append(pod)
            elif "job-name" in labels and COMPLETION_INDEX in ann:
                by_index[(labels["job-name"], ann[COMPLETION_INDEX])] = pod
        live, gone = self._pod_views(pods)
        self.release_once(live, gone)
        crowded = once.crowded(live, gone)
        waiting = [job for job in jobs if job.spec.nodes > 1 and
                   len({once.slot(p) for p in by_attempt.get((job.id, job.attempts), [])}) == job.spec.nodes and
                   any(gangs.gated(p) for p in by_attempt[(job.id, job.attempts)]) and
                   not any(once.slot(p) in crowded for p in by_attempt[(job.id, job.attempts)])]
        if waiting:
            self.release_gangs(waiting, by_attempt, {p["metadata"]["name"] for p in live})
        out: dict[int, BackendStatus] = {}
        tasks = _array_tasks(kjobs) if any(j.array_job_id is not None for j in jobs) else {}
        for job in jobs:
            st = self._status_of(job, by_attempt, by_index, kjobs, tasks)
            if st is not None:
                out[job.id] = st
        self._with_replica_status(out, jobs, by_attempt)
        unexplained = {i: st for i, st in out.items() if st.native_state == "job/Failed/BackoffLimitExceeded"
                       and not st.nodes}
        if unexplained:
            out.update(self._explain_from_events(unexplained))
        return out

    def _pod_views(self, pods: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """(live pods, deleted pods still in view) of ``pods``, the status pass's view."""
        if not self.watch or self._informers is None:
            return pods, []  # one list: only live pods
        gone = self._informers[0].tombstones()
        names = {p["metadata"]["name"] for p in gone}
        return [p for p in pods if p["metadata"]["name"] not in names], gone

    def release_once(self, live: Sequence[Mapping[str, Any]], gone: Sequence[Mapping[str, Any]] = ()) -> list[str]:
        """Lift ``crossdock.io/once`` from each pod that holds its slot alone (once.py); the names released."""
        ready = once.releasable(live, gone)

        def release(pod: Mapping[str, Any]) -> str | None:
            name = pod["metadata"]["name"]
            try:
                self._call(f"releasing pod {name}", self.core.patch_namespaced_pod, name, self.namespace, once.RELEASE)
                return name
            except BackendError as exc:  # released already (a stale view), or gone: the next pass sees
                log.debug("pod %s not released: %s", name, exc)
                return None

        if len(ready) > 1:
            with ThreadPoolExecutor(RELEASE_PARALLELISM) as pool:
                done = list(pool.map(release, ready))
        else:
            done = [release(p) for p in ready]
        return [n for n in done if n]

    def release_gangs(self, jobs: Sequence[Job], by_attempt: Mapping[tuple[int, int], list[dict[str, Any]]],
                      live: set[str] | None = None) -> list[int]:
        """Ungate every worker of each gang that fits whole now; returns the released job ids.

        Called from ``status`` (the reconcile loop is the gang's admission point). Gangs are
        taken in the given order and each one's workers count against the next one's room."""
        try:
            raw_nodes, _ = list_all(self.core.list_node)
            pods, _ = list_all(self.core.list_pod_for_all_namespaces, field_selector=nodes.BOUND_AND_ACTIVE)
        except Exception as exc:  # noqa: BLE001 - try again at the next status
            log.warning("gang release skipped: %s", exc)
            return []
        free = gangs.free_by_node(raw_nodes, pods)
        released = []
        for job in jobs:
            workers = [p for p in by_attempt[(job.id, job.attempts)] if gangs.gated(p)
                       and (live is None or p["metadata"]["name"] in live)]  # not a deleted excess's tombstone
            spec = workers[0]["spec"]
            room = gangs.fitting_nodes(spec, raw_nodes, free)
            if len(room) < len(workers):
                log.debug("gang %s waits: %d of %d workers fit", job.id, len(room), len(workers))
                continue
            for node in room[:len(workers)]:  # hold the room for the gangs after this one
                for name, amount in gangs.requests(spec).items():
                    free[node][name] = free[node].get(name, 0) - amount
            for pod in workers:
                name = pod["metadata"]["name"]
                try:
                    self._call(f"releasing worker {name}", self.core.patch_namespaced_pod, name, self.namespace,
                               [{"op": "remove", "path": "/spec/schedulingGates"}])
                except BackendError as exc:  # already released (a stale cache) or gone: nothing to undo
                    log.debug("gang %s: %s", job.id, exc)
            released.append(job.id)
            log.info("gang %s released: %d workers fit on %s", job.id, len(workers), ", ".join(room))
        return released

    def _explain_from_events(self, unexplained: Mapping[int, BackendStatus]) -> dict[int, BackendStatus]:
        """A failed Job whose pods are gone (not seen by this process's watch): the pod's
        Preempted/Evicted event, kept an hour by the API server, tells whether it was disrupted."""
        found: dict[int, BackendStatus] = {}
        for reason, (state, why) in (("Preempted", (JobState.PREEMPTED, "PreemptedByScheduler")),
                                      ("Evicted", (JobState.PREEMPTED, "Evicted"))):
            try:
                events, _ = list_all(lambda **kw: self.core.list_namespaced_event(self.namespace, **kw),
                                     field_selector=f"involvedObject.kind=Pod,reason={reason}")
            except Exception as exc:  # noqa: BLE001 - an explanation is optional
                log.debug("events unavailable: %s", exc)
                return found
            pods = {str((e.get("involvedObject") or {}).get("name", "")): str(e.get("message", "")) for e in events}
            for job_id, st in unexplained.items():
                prefix = st.ref.split("/", 1)[1] + "-"
                hit = next((msg for pod, msg in pods.items() if pod.startswith(prefix)), None)
                if hit is not None and job_id not in found:
                    found[job_id] = BackendStatus(st.ref, state, why, native_state=f"event/{reason}",
                                                  extra={"message": hit})
        return found

    def _array_pods(self, job: Job, kjobs: Mapping[str, tuple[dict[str, Any], bool]],
                    by_index: Mapping[tuple[str, str], dict[str, Any]],
                    tasks: Mapping[tuple[int, int], tuple[str, str]]) -> tuple[
                        str, tuple[dict[str, Any], bool] | None, list[dict[str, Any]]]:
        if job.array_job_id is None:
            return "", None, []
        found = tasks.get((job.id, job.attempts))
        if found is None:
            return m.array_name(job.array_job_id, job.attempts), None, []
        name, index = found
        pod = by_index.get((name, index))
        return name, kjobs[name], [pod] if pod is not None else []

    def _status_of(self, job: Job, by_attempt: Mapping[tuple[int, int], list[dict[str, Any]]],
                   by_index: Mapping[tuple[str, str], dict[str, Any]],
                   kjobs: Mapping[str, tuple[dict[str, Any], bool]],
                   tasks: Mapping[tuple[int, int], tuple[str, str]]) -> BackendStatus | None:
        name = m.job_name(job.id, job.attempts)
        entry = kjobs.get(name)
        pods = by_attempt.get((job.id, job.attempts), [])
        expected = max(job.spec.nodes, 1)
        if entry is None and not pods:
            name, entry, pods = self._array_pods(job, kjobs, by_index, tasks)
            expected = 1
        ref = f"{self.namespace}/{name}"
        if entry is None and not pods:
            return self._vanished(job, ref)
        translated = [states.translate_pod(p) for p in pods]
        state, reason = states.summarize(translated, expected)
        deciding = next((t for t in translated if t.state is state), None)
        native = deciding.signal if deciding else ""
        message = deciding.message if deciding else ""
        if entry is not None and not (state.terminal and state is not JobState.CANCELLED):
            kjob, deleted = entry
            stop = _annotations(kjob).get(m.ANNOTATION_STOP)
            task_stop = _annotations(kjob).get(f"{m.ANNOTATION_STOP}-{job.id}")  # one task of an array Job
            jt = states.translate_job(kjob)
            if task_stop:
                stop, deleted = task_stop, True
            if stop and (deleted or (kjob.get("metadata") or {}).get("deletionTimestamp") or jt.state.terminal):
                state = JobState.CANCELLED if stop == "cancelled" else JobState.PREEMPTED
                reason = {"cancelled": Reason.CANCELLED_BY_USER, "evicted": "Evicted"}.get(stop, Reason.PREEMPTED)
                native = f"job/{stop}"
            elif state is not JobState.PREEMPTED and (jt.state.terminal or jt.state is JobState.PREEMPTED):
                state, reason, native, message = jt.state, jt.reason, jt.signal, jt.message
            elif not pods:
                state, reason, native = jt.state, jt.reason, jt.signal
        code = sig = None
        finished = state.terminal or state is JobState.PREEMPTED
        if finished and deciding is not None:
            code, sig = deciding.exit_code, deciding.signal_number
        nodes = tuple(sorted({p["spec"]["nodeName"] for p in pods if (p.get("spec") or {}).get("nodeName")}))
        extra = {"message": message} if message else {}
        return BackendStatus(ref, state, str(reason), code, sig, nodes, native, extra)

    def _vanished(self, job: Job, ref: str) -> BackendStatus | None:
        """Nothing left in the cluster: a stop crossdock asked for explains it, else it is unknown."""
        if self.store is None:
            return None
        stop = self.store.stop_request(job.id)
        if stop is None:
            return None
        if stop.cancel:
            return BackendStatus(ref, JobState.CANCELLED, Reason.CANCELLED_BY_USER, native_state="job/cancelled")
        if stop.preempt:
            return BackendStatus(ref, JobState.PREEMPTED, Reason.PREEMPTED, native_state="job/preempted")
        return None

    # --- reconcile --------------------------------------------------------------------------
    def orphans(self, active: Iterable[Job]) -> list[Orphan]:
        """crossdock's unfinished Jobs that belong to no active attempt (left by a crash or a requeue)."""
        wanted = {(j.id, j.attempts) for j in active}
        arrays = {(j.array_job_id, j.attempts) for j in active if j.array_job_id is not None}
        _, kjobs = self._objects()
        out: list[Orphan] = []
        for name, (kjob, deleted) in sorted(kjobs.items()):
            if deleted or (kjob.get("metadata") or {}).get("deletionTimestamp"):
                continue
            if states.translate_job(kjob).state.terminal:
                continue
            labels = _labels(kjob)
            try:
                attempt = int(labels.get(m.LABEL_ATTEMPT, "-1"))
                if m.LABEL_JOB_ID in labels:
                    job_id = int(labels[m.LABEL_JOB_ID])
                    if (job_id, attempt) not in wanted:
                        out.append(Orphan(f"{self.namespace}/{name}", job_id, attempt, "no active attempt"))
                elif m.LABEL_ARRAY_JOB in labels:
                    array_id = int(labels[m.LABEL_ARRAY_JOB])
                    if (array_id, attempt) not in arrays:
                        out.append(Orphan(f"{self.namespace}/{name}", array_id, attempt, "no active array task"))
            except ValueError:
                continue
        return out

    def delete_orphans(self, active: Iterable[Job]) -> list[Orphan]:
        found = self.orphans(active)
        for o in found:
            name = o.ref.split("/", 1)[1]
            try:
                body(self.batch.delete_namespaced_job(name, self.namespace, propagation_policy="Background",
                                                      _preload_content=False))
                log.warning("deleted orphan Job %s (job %s attempt %s: %s)", o.ref, o.job_id, o.attempt, o.why)
            except ApiException as exc:
                if exc.status != 404:
                    raise api_error(exc, f"deleting orphan Job {o.ref}") from exc
        return found

    # --- priority classes and logs ----------------------------------------------------------
    def sync_priority_classes(self) -> list[str]:
        """Create or update a PriorityClass per configured class; returns their names.

        ``value`` and ``preemptionPolicy`` are immutable in Kubernetes: a changed class is
        deleted and created again (running pods keep the priority they were admitted with).
        """
        names = []
        for name, pc in self.config.priority_classes.items():
            pc_body = {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                    "metadata": {"name": m.priority_class_name(name), "labels": {m.LABEL_MANAGED_BY: m.MANAGED_BY}},
                    "value": pc.value, "preemptionPolicy": pc.preemption_policy, "globalDefault": False,
                    "description": pc.description or f"crossdock priority class {name}"}
            names.append(pc_body["metadata"]["name"])
            try:
                try:
                    body(self.scheduling.create_priority_class(pc_body, _preload_content=False))
                    continue
                except ApiException as exc:
                    if exc.status != 409:
                        raise
                current = json.loads(body(self.scheduling.read_priority_class(pc_body["metadata"]["name"],
                                                                              _preload_content=False)))
                if current.get("value") != pc.value or current.get("preemptionPolicy") != pc.preemption_policy:
                    body(self.scheduling.delete_priority_class(pc_body["metadata"]["name"], _preload_content=False))
                    body(self.scheduling.create_priority_class(pc_body, _preload_content=False))
                elif current.get("description") != pc_body["description"]:
                    body(self.scheduling.patch_priority_class(pc_body["metadata"]["name"],
                                                              {"description": pc_body["description"]},
                                                              _preload_content=False))
            except Exception as exc:  # noqa: BLE001
                raise api_error(exc, f"syncing PriorityClass {pc_body['metadata']['name']}") from exc
        return names

    def logs(self, job: Job, *, tail_lines: int | None = None, worker: int = 0) -> str:
        """The main container's output of one worker pod, through the API (the kubelet serves it)."""
        pods, _ = self._objects()
        mine = sorted((p for p in pods if _labels(p).get(m.LABEL_JOB_ID) == str(job.id)
                       and _labels(p).get(m.LABEL_ATTEMPT) == str(job.attempts)),
                      key=lambda p: int(_annotations(p).get(COMPLETION_INDEX, "0")))
        if len(mine) <= worker:
            raise BackendUnavailable(f"job {job.id}: no pod for worker {worker} of attempt {job.attempts}",
                                     retryable=True)
        pod = mine[worker]["metadata"]["name"]
        kwargs: dict[str, Any] = {"container": m.CONTAINER, "_preload_content": False}
        if tail_lines is not None:
            kwargs["tail_lines"] = tail_lines
        try:
            return body(self.core.read_namespaced_pod_log(pod, self.namespace, **kwargs)).decode(errors="replace")
        except Exception as exc:  # noqa: BLE001
            raise api_error(exc, f"reading the log of pod {self.namespace}/{pod}") from exc


def owner_ids(user: str) -> tuple[int, int] | None:
    """The (uid, gid) a job's pods run as: its owner's passwd entry here (the cluster's users are
    this machine's, as Slurm assumes), a bare uid as itself; None for a job with no owner."""
    try:
        entry = pwd.getpwnam(user)
        return entry.pw_uid, entry.pw_gid
    except KeyError:
        return (int(user), int(user)) if user.isdigit() else None
