"""A fragmented GPU pool on kwok nodes of its own, built the same way for crossdock and for the
upstream descheduler: the descheduler's integration tests and ``bench/bench_descheduler.py``.

The pool: ``count`` 8-GPU kwok nodes named ``<pool>-<i>`` (a name no one else uses; the plane is
shared), labelled ``crossdock.io/pool=<pool>`` and tainted as GPU nodes. Fragmented: node ``i``
left with ``used[i]`` of its GPUs held by low-priority single-GPU work, e.g. 6/7/7/7/7/7/7/7 — 9
GPUs free in the pool, at most 2 on one node, so an 8-GPU job fits nowhere until some node is
emptied (the fewest moves: the least-used node's jobs, to the free GPUs of the others).

- crossdock: every GPU filled with one-GPU ``training`` jobs (binpack packs them 8 per node),
  then, per node, the jobs beyond ``used[i]`` cancelled (:func:`fragment_crossdock`).
- upstream: one Deployment with a replica per GPU (each pod asks for one GPU), then the pods
  beyond ``used[i]`` on each node given the lowest ``controller.kubernetes.io/pod-deletion-cost``
  and the Deployment scaled down to ``sum(used)``: its ReplicaSet deletes exactly those
  (:func:`fragment_upstream`). Evicted pods come back through the ReplicaSet, as upstream expects.
"""

from __future__ import annotations

import contextlib
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from kubernetes import client
from kubernetes.client.rest import ApiException

from crossdock.dev.k8s.nodes import GPU_RESOURCE, LABEL_POOL, NodePool

GPU_TOLERATION = {"key": GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}
LOW, HIGH, INFERENCE = 100, 1000, 5000
"""Priorities of the fill (preemptible training), of the blocked 8-GPU job and of inference (never moved)."""


def wait_until(what: str, fn: Callable[[], Any], timeout: float = 120.0, interval: float = 0.25) -> Any:
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = fn()
        if last:
            return last
        time.sleep(interval)
    raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what} (last: {last!r})")


@contextlib.contextmanager
def own_nodes(api: client.ApiClient, pool: NodePool) -> Iterator[list[str]]:
    """The pool's nodes, Ready, while the context lasts; deleted (with their pods) after."""
    core = client.CoreV1Api(api)
    names = [n["metadata"]["name"] for n in pool.nodes()]
    try:
        for node in pool.nodes():
            core.create_node(node)

        def ready() -> bool:
            return all(any(c.type == "Ready" and c.status == "True" for c in (core.read_node(n).status.conditions or []))
                       for n in names)

        wait_until(f"nodes of {pool.name} Ready", ready)
        yield names
    finally:
        for name in names:
            with contextlib.suppress(ApiException):
                core.delete_node(name)


def gpu_pool(name: str, count: int = 8, gpus: int = 8) -> NodePool:
    return NodePool(name, count, cpu="96", memory="1000Gi", gpus=gpus, gpu_product="NVIDIA-A100-SXM4-80GB")


def crossdock_config(pool: str, descheduler: dict[str, Any] | None = None) -> dict[str, Any]:
    """crossdock with ``pool`` as its one Kubernetes pool: ``training`` (preemptible, the fill),
    ``urgent`` (the blocked job; ``preemption_policy: Never``, so only the descheduler makes room) and
    ``inference`` (never preempted, never moved)."""
    return {
        "priority_classes": {
            "inference": {"value": INFERENCE, "preemptible": False, "grace_seconds": 0},
            "urgent": {"value": HIGH, "preemptible": False, "preemption_policy": "Never", "grace_seconds": 0},
            "training": {"value": LOW, "preemptible": True, "grace_seconds": 0},
        },
        "pools": {pool: {"backend": "k8s", "selector": {LABEL_POOL: pool}, "gpu": {"model": "A100"},
                         "tolerations": [GPU_TOLERATION]}},
        "queues": {name: {"priority_class": name, "pools": [pool], "placement": "binpack"}
                   for name in ("training", "urgent", "inference")},
        "default_queue": "training",
        "scheduler": {"interval_seconds": 0.3, "lease_seconds": 2},
        "descheduler": descheduler or {"enabled": True, "interval_seconds": 0.5},
    }


def gpu_use(api: client.ApiClient, nodes: Sequence[str]) -> dict[str, int]:
    """GPUs requested by the pods bound to each of ``nodes`` that are not terminating or done."""
    core = client.CoreV1Api(api)
    used = Counter({n: 0 for n in nodes})
    for pod in core.list_pod_for_all_namespaces(field_selector="status.phase!=Succeeded,status.phase!=Failed").items:
        if pod.spec.node_name in used and pod.metadata.deletion_timestamp is None:
            used[pod.spec.node_name] += sum(int((c.resources.requests or {}).get(GPU_RESOURCE, 0))
                                            for c in pod.spec.containers if c.resources)
    return dict(used)


# --- crossdock ---------------------------------------------------------------------------------


def fragment_crossdock(rt: Any, cancel: Callable[[list[int]], Any], nodes: Sequence[str], used: Sequence[int],
                       gpus: int | Sequence[int] = 8, timeout: float = 240.0, exact: bool = True) -> dict[str, list[int]]:
    """Fill ``nodes`` (``gpus`` each, or per node) with one-GPU training jobs, then cancel those beyond
    ``used[i]`` on node ``i``; returns the kept job ids by the node they were on. ``exact``: wait until
    the Kubernetes pool holds exactly ``used`` (False on other backends, or where a descheduler
    strategy already acts on the way there)."""
    from crossdock import service
    from crossdock.queue.models import GpuRequest, JobSpec
    from crossdock.queue.states import JobState

    total = gpus * len(nodes) if isinstance(gpus, int) else sum(gpus)
    specs = [JobSpec(command=["sleep", "3600"], queue="training", gpus=GpuRequest(count=1)) for _ in range(total)]
    ids = [j.id for j in service.submit(rt, specs)]
    try:
        jobs = wait_until("the fill running", lambda: (js := rt.store.get_many(ids)) and all(
            j.state is JobState.RUNNING for j in js) and js, timeout)
    except TimeoutError as err:
        states = Counter(f"{j.state.value}/{j.reason}" for j in rt.store.get_many(ids))
        raise TimeoutError(f"{err}: {dict(states)}") from err
    by_node: dict[str, list[int]] = {n: [] for n in nodes}
    for job in jobs:
        by_node[job.nodes[0]].append(job.id)
    drop = [i for node, want in zip(nodes, used) for i in sorted(by_node[node])[want:]]
    cancel(drop)
    wait_until("the cancelled jobs' GPUs free", lambda: all(j.state.terminal for j in rt.store.get_many(drop)) and (
        not exact or gpu_use(rt_api(rt), nodes) == dict(zip(nodes, used))), timeout)
    return {node: sorted(by_node[node])[:want] for node, want in zip(nodes, used)}


def rt_api(rt: Any) -> client.ApiClient:
    return rt.backends("k8s").api


# --- upstream ----------------------------------------------------------------------------------


def priority_classes(api: client.ApiClient, prefix: str) -> dict[str, str]:
    """A low (preemptible fill), a high (``preemptionPolicy: Never``) and an inference PriorityClass;
    names by role."""
    scheduling = client.SchedulingV1Api(api)
    names = {"low": f"{prefix}-low", "high": f"{prefix}-high", "inference": f"{prefix}-inference"}
    for role, value, policy in (("low", LOW, "PreemptLowerPriority"), ("high", HIGH, "Never"),
                                ("inference", INFERENCE, "Never")):
        scheduling.create_priority_class({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                                          "metadata": {"name": names[role]}, "value": value,
                                          "preemptionPolicy": policy})
    return names


def delete_priority_classes(api: client.ApiClient, names: dict[str, str]) -> None:
    for name in names.values():
        with contextlib.suppress(ApiException):
            client.SchedulingV1Api(api).delete_priority_class(name)


def gpu_pod_spec(pool: str, gpus: int, priority_class: str, scheduler: str | None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "nodeSelector": {LABEL_POOL: pool}, "tolerations": [GPU_TOLERATION], "priorityClassName": priority_class,
        "terminationGracePeriodSeconds": 0,
        "containers": [{"name": "work", "image": "busybox", "resources": {
            "requests": {GPU_RESOURCE: str(gpus), "cpu": "1"}, "limits": {GPU_RESOURCE: str(gpus)}}}],
    }
    if scheduler:
        spec["schedulerName"] = scheduler
    return spec


def fragment_upstream(api: client.ApiClient, namespace: str, pool: str, nodes: Sequence[str], used: Sequence[int],
                      priority_class: str, scheduler: str | None, gpus: int = 8, timeout: float = 240.0) -> str:
    """The same fragmentation from a Deployment ``fill`` of one-GPU pods; returns its name."""
    apps, core = client.AppsV1Api(api), client.CoreV1Api(api)
    labels = {"app": "fill"}
    total = gpus * len(nodes)
    apps.create_namespaced_deployment(namespace, {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "fill"},
        "spec": {"replicas": total, "selector": {"matchLabels": labels},
                 "template": {"metadata": {"labels": labels},
                              "spec": gpu_pod_spec(pool, 1, priority_class, scheduler)}}})

    def running() -> list[Any]:
        pods = [p for p in core.list_namespaced_pod(namespace, label_selector="app=fill").items
                if p.status.phase == "Running" and p.metadata.deletion_timestamp is None]
        return pods

    pods = wait_until("the fill running", lambda: len(p := running()) == total and p, timeout)
    by_node: dict[str, list[str]] = {n: [] for n in nodes}
    for pod in pods:
        by_node[pod.spec.node_name].append(pod.metadata.name)
    for node, want in zip(nodes, used):
        for name in sorted(by_node[node])[want:]:
            core.patch_namespaced_pod(name, namespace, {"metadata": {"annotations": {
                "controller.kubernetes.io/pod-deletion-cost": "-1000"}}})
    apps.patch_namespaced_deployment_scale("fill", namespace, {"spec": {"replicas": sum(used)}})
    wait_until("the fill fragmented", lambda: gpu_use(api, nodes) == dict(zip(nodes, used)), timeout)
    return "fill"


def pin_inference(api: client.ApiClient, namespace: str, pool: str, node: str, priority_class: str,
                  scheduler: str | None, timeout: float = 120.0) -> None:
    """One one-GPU inference pod (a Deployment's, above every eviction threshold) on ``node``."""
    labels = {"app": "inference"}
    spec = gpu_pod_spec(pool, 1, priority_class, scheduler)
    spec["nodeSelector"]["kubernetes.io/hostname"] = node
    client.AppsV1Api(api).create_namespaced_deployment(namespace, {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "inference"},
        "spec": {"replicas": 1, "selector": {"matchLabels": labels},
                 "template": {"metadata": {"labels": labels}, "spec": spec}}})
    core = client.CoreV1Api(api)
    wait_until("the inference pod running", lambda: any(
        p.status.phase == "Running" for p in core.list_namespaced_pod(namespace, label_selector="app=inference").items),
        timeout)
