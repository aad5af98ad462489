"""crossdock jobs → ``batch/v1`` Job manifests (plain dicts, the API's JSON). Pure: no I/O.

One crossdock job attempt is one Job named ``cd-<job id>-<attempt>``; the name is the
idempotency key (a replayed dispatch gets 409 AlreadyExists and finds the Job). A
multi-node job is one Indexed Job whose pods are a gang (label ``crossdock.io/group``) kept
one per node by required podAntiAffinity; a whole array submitted at once is one Indexed
Job whose completion index maps to the array's task ids.

Placement: the pool's node selector and tolerations, the GPU product (``nvidia.com/gpu.product``
values known for the requested models), and when crossdock chose the nodes a required
nodeAffinity on the nodes' names (``matchFields`` ``metadata.name``) so its binpack/spread decision holds. When it did
not, the queue's placement becomes a hard topology spread (``spread``) or a preferred pod
affinity to the job's own group (``binpack``), for kube-scheduler to honour.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from crossdock.backends.kubernetes import once, serving
from crossdock.queue.config import ClusterConfig, Pool
from crossdock.queue.models import Job
from crossdock.queue.sbatch_extras import constraint_terms
from crossdock.queue.cpu_share import cpu_milli
from crossdock.queue.slurm_env import batch_environment

LABEL_JOB_ID = "crossdock.io/job-id"
LABEL_ATTEMPT = "crossdock.io/attempt"
LABEL_QUEUE = "crossdock.io/queue"
LABEL_POOL = "crossdock.io/pool"
LABEL_GROUP = "crossdock.io/group"
"""Pods placed together or apart: a gang (``<job id>-<attempt>``) or an array (``a<array job id>``)."""
LABEL_ARRAY_JOB = "crossdock.io/array-job-id"
LABEL_ARRAY_TASK = "crossdock.io/array-task-id"
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
LABEL_INSTALLATION = "crossdock.io/installation"
"""The identity of the store whose job an object is (``JobStore.installation``): a store started
afresh in a namespace that still holds an earlier store's objects does not take them for its own."""
MANAGED_BY = "crossdock"
ANNOTATION_NAME = "crossdock.io/name"
ANNOTATION_USER = "crossdock.io/user"
ANNOTATION_ARRAY_JOBS = "crossdock.io/array-jobs"
"""On an array Job: ``<job id>:<task id>`` per completion index, comma-separated."""
ANNOTATION_GPU_IDS = "crossdock.io/gpu-ids"
"""On pods: the devices crossdock's scheduler assigned (Kubernetes itself only counts them)."""
ANNOTATION_STOP = "crossdock.io/stop"
"""Set before crossdock deletes a Job: ``cancelled`` or ``preempted``."""
# Read by the local control plane's kwok Stages (crossdock.dev.k8s); ignored by real kubelets.
ANNOTATION_RUN_SECONDS = "crossdock.io/run-seconds"
ANNOTATION_EXIT_CODE = "crossdock.io/exit-code"
SIMULATE_ENV = {"CROSSDOCK_SIMULATE_RUN_SECONDS": ANNOTATION_RUN_SECONDS,
                "CROSSDOCK_SIMULATE_EXIT_CODE": ANNOTATION_EXIT_CODE}
"""spec.env keys that become kwok annotations instead of container environment."""
IMAGE_ENV = "CROSSDOCK_IMAGE"
"""spec.env key naming the container image (else the backend's default image)."""

GANG_GATE = "crossdock.io/gang"
"""The scheduling gate a gang's pods are created with (see gangs.py)."""
LABEL_HOSTNAME = "kubernetes.io/hostname"
FIELD_NODE_NAME = "metadata.name"
LABEL_GPU_PRODUCT = "nvidia.com/gpu.product"
GPU_RESOURCE = "nvidia.com/gpu"
GPU_SHARED_RESOURCE = "nvidia.com/gpu.shared"
CONTAINER = "main"

# srun and scontrol first on the PATH: $CROSSDOCK_BIN, else where the image's crossdock has them.
_RUNTIME_PATH = ('[ -n "$CROSSDOCK_BIN" ] || CROSSDOCK_BIN=$("${CROSSDOCK_PYTHON:-python3}" -c '
                 '"import crossdock.jobtools as j; print(j.BIN_DIR)" 2>/dev/null); '
                 '[ -z "$CROSSDOCK_BIN" ] || PATH="$CROSSDOCK_BIN:$PATH"; export PATH; ')
# Runs a crossdock script: the text comes in $CROSSDOCK_SCRIPT (never spliced into a command
# line), is written out and executed with its own #! interpreter and the job's arguments.
_SCRIPT_RUNNER = (_RUNTIME_PATH + 'f="${TMPDIR:-/tmp}/crossdock-script-$$" && printf "%s" "$CROSSDOCK_SCRIPT" > "$f" '
                  '&& chmod +x "$f" && exec "$f" "$@"')
# Sets the task's SLURM_ARRAY_TASK_ID and job id from the completion index of an array Job, then runs "$@".
_ARRAY_RUNNER = ('i=0; for t in $CROSSDOCK_ARRAY_TASK_IDS; do [ "$i" = "$JOB_COMPLETION_INDEX" ] && '
                 'export SLURM_ARRAY_TASK_ID="$t"; i=$((i+1)); done; '
                 'i=0; for t in $CROSSDOCK_ARRAY_JOB_IDS; do [ "$i" = "$JOB_COMPLETION_INDEX" ] && '
                 'export SLURM_JOB_ID="$t" SLURM_JOBID="$t" CROSSDOCK_JOB_ID="$t"; i=$((i+1)); done; exec "$@"')
# sbatch's --signal: runs "$@" and sends signal $1 after $2 seconds (the time limit less sig_time),
# to the job's command alone with $3 = B, else to every process of the container (its process
# group: the container's first process leads its own, as runc makes it); SIGTERM from the kubelet
# (the deadline, a deletion) goes to them all as well; exits with the command's status. A shell,
# so that any image can run it.
_SIGNAL_RUNNER = (
    'sig=$1 after=$2 scope=$3; shift 3; read -r _ _ _ _ group _ < /proc/$$/stat || group=; trap : "$sig"; '
    '"$@" & job=$!; '
    '(trap \'kill "$s" 2>/dev/null; exit 0\' TERM; sleep "$after" & s=$!; wait "$s"; '
    'if [ "$scope" = B ] || [ "$group" != $$ ]; then kill -"$sig" "$job"; else kill -"$sig" 0; fi) 2>/dev/null & '
    'timer=$!; '
    'trap \'trap : TERM; if [ "$group" = $$ ]; then kill -TERM 0; else kill -TERM "$job"; fi\' TERM; '
    'while wait "$job"; rc=$?; kill -0 "$job" 2>/dev/null; do :; done; '
    'wait "$job" 2>/dev/null && rc=0 || { r=$?; [ "$r" = 127 ] || rc=$r; }; '
    'kill "$timer" 2>/dev/null; exit "$rc"')
PYTHON_RUNNER = ["python", "-m", "crossdock.workers.pyjob"]
"""A Python job's command: crossdock's runner (the pool's image carries crossdock) reads the call
from the store and stores the outcome there."""


def job_name(job_id: int, attempt: int) -> str:
    """The deterministic object name of one attempt."""
    return f"cd-{job_id}-{attempt}"


def array_name(array_job_id: int, attempt: int, first_task: int | None = None) -> str:
    """The Indexed Job of array tasks submitted together. ``first_task`` (the group's lowest task
    id) tells apart two groups of one array and attempt; it is left out when None (the group holds
    the array's first task, which no other group of that attempt can)."""
    base = f"cd-a{array_job_id}-{attempt}"
    return base if first_task is None else f"{base}-{first_task}"


def group_first_task(tasks: Sequence[Job]) -> int | None:
    """The lowest task id of a group of array tasks, or None when it is the array's first task."""
    lowest = min(t.array_task_id or 0 for t in tasks)
    spec = tasks[0].spec.array
    return None if spec is None or lowest == min(spec.task_ids) else lowest


def priority_class_name(name: str) -> str:
    """crossdock's PriorityClass objects are prefixed so they never collide with the cluster's own."""
    return f"crossdock-{_dns_label(name)}"


def _dns_label(text: str) -> str:
    return re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")[:50] or "x"


def _label_value(text: str) -> str:
    value = re.sub(r"[^A-Za-z0-9_.-]+", "-", text)[:63]
    return value.strip("-_.")


def gpu_model(product: str) -> str:
    """``NVIDIA-A100-SXM4-80GB`` → ``A100``; ``Tesla-T4`` → ``T4``; ``NVIDIA H200`` → ``H200``."""
    words = [w for w in re.split(r"[-_\s]+", product) if w and w.upper() not in ("NVIDIA", "TESLA", "GEFORCE")]
    return words[0] if words else product


@dataclass(frozen=True)
class Options:
    """What the backend decides once for every manifest."""

    namespace: str = "default"
    image: str = "python:3.11-slim"
    ttl_seconds_after_finished: int | None = 3600
    deadline_slack_seconds: int = 300
    """Added to the time limit for the Job-level deadline (the pod-level one is exact)."""
    default_grace_seconds: int = 30
    gpu_products: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    """Lower-case model → ``nvidia.com/gpu.product`` values seen on nodes (from the inventory)."""
    service_account: str | None = None
    installation: str = ""
    """The store's identity, labelled on every object ("": none, as before stores had one)."""


def owned_by(labels: Mapping[str, str], installation: str, legacy: bool) -> bool:
    """Whether an object with ``labels`` is the job of the store ``installation``: labelled with
    it, or with none when that store also answers for objects made before stores had one."""
    found = labels.get(LABEL_INSTALLATION)
    return found == installation if found is not None else legacy or not installation


def _quantity_cpu(milli: int) -> str:
    return f"{milli}m" if milli % 1000 else str(milli // 1000)


def resources(job: Job, cfg: ClusterConfig, opts: Options) -> dict[str, dict[str, str]]:
    """Requests and limits of one worker pod (one node's share of the job)."""
    spec = job.spec
    cpu_request, cpu_limit = cpu_milli(job, cfg)
    mem = spec.mem_per_node(cfg.scheduler.default_mem_per_cpu_mib * spec.cpus_per_node())
    requests = {"cpu": _quantity_cpu(cpu_request)}
    limits = {"cpu": _quantity_cpu(cpu_limit)}
    if mem:
        requests["memory"] = limits["memory"] = f"{mem}Mi"
    req = spec.gpu_request()
    if req is not None:
        if req.mig:
            name, count = f"nvidia.com/mig-{req.mig}", spec.gpus_per_node()
        elif req.share is not None:
            name, count = GPU_SHARED_RESOURCE, 1
        else:
            name, count = GPU_RESOURCE, spec.gpus_per_node()
        # Extended resources cannot be overcommitted: the request must equal the limit.
        requests[name] = limits[name] = str(count)
    return {"requests": requests, "limits": limits}


def _node_affinity(job: Job, pool: Pool, opts: Options) -> dict[str, Any] | None:
    # Nodes are named by metadata.name (matchFields), not by the hostname label: the two differ
    # on some clouds and on Karpenter's kwok nodes (hostname = the NodeClaim's name). A field
    # requirement takes one value, so each chosen node is a term of its own (terms are ORed).
    excluded = [{"key": FIELD_NODE_NAME, "operator": "NotIn", "values": [n]} for n in sorted(set(job.spec.exclude))]
    exprs: list[dict[str, Any]] = []
    req = job.spec.gpu_request()
    models = req.allowed_models() if req is not None else []
    products = sorted({p for m in models for p in opts.gpu_products.get(m.lower(), (m,))})
    if len(products) > 1:  # one product is a plain nodeSelector (below)
        exprs.append({"key": LABEL_GPU_PRODUCT, "operator": "In", "values": products})
    pinned = [[{"key": FIELD_NODE_NAME, "operator": "In", "values": [n]}] for n in sorted(set(job.nodes))]
    terms = [{k: v for k, v in (("matchExpressions", exprs), ("matchFields", fields + excluded)) if v}
             for fields in (pinned or [[]])]
    if terms == [{}]:
        return None
    return {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}


def _node_selector(job: Job, pool: Pool, opts: Options) -> dict[str, str]:
    selector = dict(pool.selector)
    req = job.spec.gpu_request()
    models = req.allowed_models() if req is not None else []
    products = {p for m in models for p in opts.gpu_products.get(m.lower(), (m,))}
    if len(products) == 1:
        selector[LABEL_GPU_PRODUCT] = products.pop()
    if job.spec.constraint and pool.features:
        # --constraint's and-ed features, as the pool maps them to labels: the pod lands on a node
        # that has them even where Kubernetes picks the node; or-ed ones rely on the nodes crossdock chose
        for term in constraint_terms(job.spec.constraint):
            if len(term) == 1 and term[0] in pool.features:
                selector.update(pool.features[term[0]])
    return selector


def _placement(job: Job, cfg: ClusterConfig) -> str:
    if job.spec.placement:
        return job.spec.placement
    queue = cfg.queues.get(job.queue)
    return queue.placement if queue is not None else "binpack"


def group_of(job: Job) -> str:
    if job.array_job_id is not None:
        return f"a{job.array_job_id}"
    return f"{job.id}-{job.attempts}"


def _affinity(job: Job, cfg: ClusterConfig, pool: Pool, opts: Options, group: str) -> dict[str, Any]:
    affinity: dict[str, Any] = {}
    node = _node_affinity(job, pool, opts)
    if node is not None:
        affinity["nodeAffinity"] = node
    same_group = {"labelSelector": {"matchLabels": {LABEL_GROUP: group}}, "topologyKey": LABEL_HOSTNAME}
    if job.spec.nodes > 1 or job.spec.anti_affinity:
        affinity["podAntiAffinity"] = {"requiredDuringSchedulingIgnoredDuringExecution": [same_group]}
    elif not job.nodes and _placement(job, cfg) in ("binpack", "most-requested"):
        affinity["podAffinity"] = {"preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 100, "podAffinityTerm": same_group}]}
    return affinity


def _spread(job: Job, cfg: ClusterConfig, group: str) -> list[dict[str, Any]]:
    if job.nodes or _placement(job, cfg) != "spread":
        return []
    return [{"maxSkew": 1, "topologyKey": LABEL_HOSTNAME, "whenUnsatisfiable": "DoNotSchedule",
             "labelSelector": {"matchLabels": {LABEL_GROUP: group}},
             "nodeAffinityPolicy": "Honor", "nodeTaintsPolicy": "Honor"}]


def _command(job: Job, array: bool) -> tuple[list[str], dict[str, str]]:
    """(argv, extra environment) for the main container."""
    spec = job.spec
    env: dict[str, str] = {}
    if spec.command is not None:
        argv = list(spec.command) + list(spec.args)
    elif spec.script is not None:
        env["CROSSDOCK_SCRIPT"] = spec.script
        argv = ["/bin/sh", "-c", _SCRIPT_RUNNER, "crossdock-script", *spec.args]
    elif spec.python is not None:
        argv = list(PYTHON_RUNNER)
    else:
        argv = []
    sig, limit = spec.kill_signal, spec.time_limit_seconds
    if sig is not None and limit and argv:
        argv = ["/bin/sh", "-c", _SIGNAL_RUNNER, "crossdock-signal", str(sig.number), str(max(0, limit - sig.seconds)),
                "B" if sig.batch_only else "", *argv]
    if array and argv:
        argv = ["/bin/sh", "-c", _ARRAY_RUNNER, "crossdock-array", *argv]
    return argv, env


COMPLETION_INDEX = "metadata.annotations['batch.kubernetes.io/job-completion-index']"


def worker_hostnames(job: Job) -> list[str]:
    """The stable hostnames of a multi-node job's workers: ``<Job name>-<index>``, resolvable
    through the headless Service of the same name (the pods' subdomain)."""
    name = job_name(job.id, job.attempts)
    return [f"{name}-{i}" for i in range(job.spec.nodes)]


def _environment(job: Job, extra: Mapping[str, str], *, indexed: bool,
                 owner_ids: tuple[int, int] | None) -> list[dict[str, Any]]:
    """The container's environment: the job's, then Slurm's (:mod:`crossdock.queue.slurm_env`).
    What only the pod knows comes first, from the downward API, and the rest refers to it with
    ``$(VAR)``, which Kubernetes expands from the variables defined before."""
    spec = job.spec
    first: list[dict[str, Any]] = [{"name": "CROSSDOCK_POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}]
    if indexed:
        first.append({"name": "CROSSDOCK_INDEX", "valueFrom": {"fieldRef": {"fieldPath": COMPLETION_INDEX}}})
    if spec.nodes > 1:
        hosts = worker_hostnames(job)
        node, node_id = f"{job_name(job.id, job.attempts)}-$(CROSSDOCK_INDEX)", "$(CROSSDOCK_INDEX)"
    else:
        hosts, node, node_id = ["$(CROSSDOCK_POD_NAME)"], "$(CROSSDOCK_POD_NAME)", 0
    env = {k: v for k, v in spec.env.items() if k not in SIMULATE_ENV and k != IMAGE_ENV}
    env.update(extra)
    env.update(batch_environment(job, nodes=hosts, node=node, node_id=node_id, submit_dir=spec.workdir or "",
                                 submit_host=spec.env.get("SLURM_SUBMIT_HOST", ""),
                                 uid=owner_ids[0] if owner_ids else None))
    env.pop("CUDA_VISIBLE_DEVICES", None)  # the device plugin sets it
    env.update({"CROSSDOCK_JOB_ID": str(job.id), "CROSSDOCK_ATTEMPT": str(job.attempts)})
    if spec.nodes > 1:
        env.update(rendezvous_environment(job))
    return first + [{"name": k, "value": v} for k, v in sorted(env.items())]


RENDEZVOUS_PORT = 29500
"""MASTER_PORT: PyTorch's default rendezvous port."""


def rendezvous_environment(job: Job) -> dict[str, str]:
    """What PyTorch reads to find the other workers, worker 0 being the master: MASTER_ADDR,
    MASTER_PORT, WORLD_SIZE and RANK for ``init_method="env://"`` with one process per worker;
    torchrun's ``PET_*`` defaults (``--nnodes``, ``--node-rank``, ``--master-addr``,
    ``--master-port``) for a torchrun per worker, which then sets RANK and WORLD_SIZE per process."""
    hosts, nnodes = worker_hostnames(job), str(job.spec.nodes)
    return {"MASTER_ADDR": hosts[0], "MASTER_PORT": str(RENDEZVOUS_PORT), "WORLD_SIZE": nnodes,
            "RANK": "$(CROSSDOCK_INDEX)", "NODE_RANK": "$(CROSSDOCK_INDEX)",
            "PET_NNODES": nnodes, "PET_NODE_RANK": "$(CROSSDOCK_INDEX)", "PET_MASTER_ADDR": hosts[0],
            "PET_MASTER_PORT": str(RENDEZVOUS_PORT)}


def _labels(job: Job, pool_name: str, group: str, installation: str = "") -> dict[str, str]:
    labels = {LABEL_MANAGED_BY: MANAGED_BY, LABEL_JOB_ID: str(job.id), LABEL_ATTEMPT: str(job.attempts),
              LABEL_GROUP: group, LABEL_POOL: _label_value(pool_name)}
    if installation:
        labels[LABEL_INSTALLATION] = installation
    if job.queue:
        labels[LABEL_QUEUE] = _label_value(job.queue)
    if job.array_job_id is not None:
        labels[LABEL_ARRAY_JOB] = str(job.array_job_id)
        if job.array_task_id is not None:
            labels[LABEL_ARRAY_TASK] = str(job.array_task_id)
    return labels


def pool_of(job: Job, cfg: ClusterConfig) -> tuple[str, Pool]:
    """The Kubernetes pool the job goes to: the scheduler's choice, else its first k8s pool."""
    names = [job.pool] if job.pool else list(job.pools)
    for name in names:
        pool = cfg.pools.get(name or "")
        if pool is not None and pool.backend == "k8s":
            return str(name), pool
    raise ValueError(f"job {job.id}: none of its pools ({', '.join(n for n in names if n) or 'none'}) "
                     "is a k8s pool; give --pool with a pool whose backend is k8s")


def security_context(owner_ids: tuple[int, int] | None) -> dict[str, Any] | None:
    """The pod runs as the job's owner (uid, gid), as slurmd runs a job as its submitter; a job
    owned by anyone but root may not run as root whatever its image says."""
    if owner_ids is None:
        return None
    uid, gid = owner_ids
    return {"runAsUser": uid, "runAsGroup": gid, "runAsNonRoot": uid != 0}


def build(job: Job, cfg: ClusterConfig, opts: Options = Options(), *,
          array_tasks: Sequence[Job] | None = None, owner_ids: tuple[int, int] | None = None) -> dict[str, Any]:
    """The ``batch/v1`` Job for ``job``'s current attempt (or for ``array_tasks`` as one Indexed Job);
    ``owner_ids``: the owner's (uid, gid) its pods run as."""
    spec = job.spec
    pool_name, pool = pool_of(job, cfg)
    array = array_tasks is not None and len(array_tasks) > 0
    group = group_of(job)
    labels = _labels(job, pool_name, group, opts.installation)
    if array:
        labels.pop(LABEL_JOB_ID)
        labels.pop(LABEL_ARRAY_TASK, None)
    annotations = {ANNOTATION_NAME: spec.display_name()}
    if spec.user:
        annotations[ANNOTATION_USER] = spec.user
    pod_annotations = dict(annotations)
    if job.gpu_ids and not array:
        pod_annotations[ANNOTATION_GPU_IDS] = ",".join(job.gpu_ids)
    for env_key, annotation in SIMULATE_ENV.items():
        if env_key in spec.env:
            pod_annotations[annotation] = spec.env[env_key]
    argv, extra_env = _command(job, array)
    if array:
        extra_env["CROSSDOCK_ARRAY_TASK_IDS"] = " ".join(str(t.array_task_id) for t in array_tasks or ())
        extra_env["CROSSDOCK_ARRAY_JOB_IDS"] = " ".join(str(t.id) for t in array_tasks or ())
    container: dict[str, Any] = {
        "name": CONTAINER,
        "image": spec.image or spec.env.get(IMAGE_ENV, opts.image),
        "env": _environment(job, extra_env, indexed=array or spec.nodes > 1, owner_ids=owner_ids),
        "resources": resources(job, cfg, opts),
    }
    if argv:
        container["command"] = argv
    if spec.workdir:
        container["workingDir"] = spec.workdir
    if array:
        container["env"] = [e for e in container["env"] if e["name"] != "SLURM_ARRAY_TASK_ID"]  # by index
    pc = cfg.priority_classes.get(job.priority_class)
    grace = pc.grace_seconds if pc is not None else opts.default_grace_seconds
    pod_spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": grace,
        "containers": [container],
        "nodeSelector": _node_selector(job, pool, opts),
        "tolerations": [dict(t) for t in pool.tolerations],
    }
    if job.priority_class and pc is not None:
        pod_spec["priorityClassName"] = priority_class_name(job.priority_class)
    affinity = _affinity(job, cfg, pool, opts, group)
    if affinity:
        pod_spec["affinity"] = affinity
    spread = _spread(job, cfg, group)
    if spread:
        pod_spec["topologySpreadConstraints"] = spread
    if opts.service_account:
        pod_spec["serviceAccountName"] = opts.service_account
    pod_labels = dict(labels)
    serving.decorate(job, pod_labels, container, pod_spec)  # a service replica's port, probe and labels
    security = security_context(owner_ids)
    if security:
        pod_spec["securityContext"] = security
    limit = spec.time_limit_seconds
    if limit:
        pod_spec["activeDeadlineSeconds"] = limit
    # Created gated; the backend lets one pod per run through (once.py), or a gang at once (gangs.py).
    pod_spec["schedulingGates"] = [{"name": GANG_GATE if spec.nodes > 1 and not array else once.GATE}]
    if not pod_spec["nodeSelector"]:
        del pod_spec["nodeSelector"]
    if not pod_spec["tolerations"]:
        del pod_spec["tolerations"]

    job_spec: dict[str, Any] = {
        # crossdock requeues per its own policy; Kubernetes never retries. (No podFailurePolicy:
        # with one, the Job controller waits for a deleted pod to reach phase Failed, which
        # kwok never reports; the pods' DisruptionTarget condition tells why anyway.)
        "backoffLimit": 0,
        "template": {"metadata": {"labels": pod_labels, "annotations": pod_annotations}, "spec": pod_spec},
    }
    if limit:
        job_spec["activeDeadlineSeconds"] = limit + opts.deadline_slack_seconds
    if opts.ttl_seconds_after_finished is not None:
        job_spec["ttlSecondsAfterFinished"] = opts.ttl_seconds_after_finished
    if array:
        tasks = list(array_tasks or ())
        job_spec.update(completionMode="Indexed", completions=len(tasks), backoffLimitPerIndex=0,
                        maxFailedIndexes=len(tasks))
        job_spec["parallelism"] = min(len(tasks), spec.array.max_running if spec.array and spec.array.max_running
                                      else len(tasks))
        del job_spec["backoffLimit"]
        annotations[ANNOTATION_ARRAY_JOBS] = ",".join(f"{t.id}:{t.array_task_id}" for t in tasks)
        name = array_name(job.array_job_id if job.array_job_id is not None else job.id, job.attempts,
                          group_first_task(tasks))
    else:
        if spec.nodes > 1:
            job_spec.update(completionMode="Indexed", completions=spec.nodes, parallelism=spec.nodes)
            # <name>-<index> resolves through the headless Service of the same name (service()).
            pod_spec["subdomain"] = job_name(job.id, job.attempts)
        name = job_name(job.id, job.attempts)
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": opts.namespace, "labels": labels, "annotations": annotations},
        "spec": job_spec,
    }


def service(job: Job, opts: Options = Options(), owner_uid: str | None = None) -> dict[str, Any]:
    """The headless Service that gives a multi-node job's workers their DNS names
    (``<Job name>-<index>.<Job name>``); owned by the Job (``owner_uid``), so it goes with it."""
    name = job_name(job.id, job.attempts)
    meta: dict[str, Any] = {"name": name, "namespace": opts.namespace,
                            "labels": {LABEL_MANAGED_BY: MANAGED_BY, LABEL_JOB_ID: str(job.id),
                                       LABEL_ATTEMPT: str(job.attempts)}}
    if owner_uid:
        meta["ownerReferences"] = [{"apiVersion": "batch/v1", "kind": "Job", "name": name, "uid": owner_uid,
                                    "controller": False, "blockOwnerDeletion": False}]
    return {"apiVersion": "v1", "kind": "Service", "metadata": meta,
            "spec": {"clusterIP": "None", "publishNotReadyAddresses": True,
                     "selector": {LABEL_GROUP: group_of(job)},
                     "ports": [{"name": "rendezvous", "port": RENDEZVOUS_PORT, "targetPort": RENDEZVOUS_PORT}]}}
