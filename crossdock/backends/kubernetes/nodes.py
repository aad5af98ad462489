"""Kubernetes Nodes and pods → crossdock's inventory (``Node``, ``Allocation``). Pure.

A Node belongs to the first k8s pool whose selector its labels match; nodes of no pool are
left out (crossdock never places there). Its GPUs are ``nvidia.com/gpu`` allocatable, of the
model read from ``nvidia.com/gpu.product`` (``NVIDIA-A100-SXM4-80GB`` → ``A100``), and one
pseudo-device per MIG profile whose slices are the ``nvidia.com/mig-<profile>`` count. It is
schedulable when Ready, not cordoned, and every NoSchedule/NoExecute taint is tolerated by
its pool.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from types import MappingProxyType
from typing import Any

from kubernetes.utils import parse_quantity

from crossdock.backends.kubernetes import gangs
from crossdock.backends.kubernetes import manifests as m
from crossdock.queue.config import ClusterConfig
from crossdock.queue.snapshot import Allocation, GpuDevice, Node

GPU_MEMORY_LABEL = "nvidia.com/gpu.memory"
"""MiB per GPU, as NVIDIA's GPU feature discovery labels nodes."""
BOUND_AND_ACTIVE = "spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed"
"""Field selector of the pods that hold capacity on a node."""


def _milli(q: Any) -> int:
    return int(parse_quantity(q) * 1000)


def _mib(q: Any) -> int:
    return int(parse_quantity(q) / (1024 * 1024))


def _labels(obj: Mapping[str, Any]) -> dict[str, str]:
    return dict((obj.get("metadata") or {}).get("labels") or {})


def pool_of(labels: Mapping[str, str], config: ClusterConfig) -> str | None:
    for name, pool in config.pools.items():
        if pool.backend == "k8s" and all(labels.get(k) == v for k, v in pool.selector.items()):
            return name
    return None


def node_of(raw: Mapping[str, Any], pool_name: str, config: ClusterConfig, kind: str = "k8s") -> Node:
    pool = config.pools[pool_name]
    meta, spec, status = raw["metadata"], raw.get("spec") or {}, raw.get("status") or {}
    name, labels = meta["name"], dict(meta.get("labels") or {})
    alloc = status.get("allocatable") or {}
    product = labels.get(m.LABEL_GPU_PRODUCT, "")
    model = m.gpu_model(product) if product else (pool.gpu.model or "GPU")
    memory = int(labels.get(GPU_MEMORY_LABEL, "0") or 0)
    whole = int(parse_quantity(alloc.get(m.GPU_RESOURCE, 0)))
    gpus = [GpuDevice(f"{name}:{i}", i, model, memory) for i in range(whole)]
    for key, value in sorted(alloc.items()):
        if key.startswith("nvidia.com/mig-"):
            profile = key.removeprefix("nvidia.com/mig-")
            gpus.append(GpuDevice(f"{name}:mig-{profile}", -1, model, 0, mig=(profile,) * int(parse_quantity(value))))
    taints = spec.get("taints") or []
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])
    blocking = [t for t in taints if t.get("effect") in ("NoSchedule", "NoExecute")
                and not gangs.tolerated(t, pool.tolerations)]
    return Node(name=name, pool=pool_name, backend=kind, cpu_milli=_milli(alloc.get("cpu", 0)),
                memory_mib=_mib(alloc.get("memory", 0)), gpus=tuple(gpus), labels=MappingProxyType(labels),
                taints=tuple(f"{t.get('key')}={t.get('value') or ''}:{t.get('effect')}" for t in taints),
                gpu_sharing=pool.gpu.sharing,
                schedulable=ready and not spec.get("unschedulable") and not blocking,
                max_pods=int(parse_quantity(alloc["pods"])) if "pods" in alloc else None)


def pool_nodes(raw_nodes: Iterable[Mapping[str, Any]], config: ClusterConfig, kind: str = "k8s") -> tuple[Node, ...]:
    found = []
    for raw in raw_nodes:
        pool = pool_of(_labels(raw), config)
        if pool is not None:
            found.append(node_of(raw, pool, config, kind))
    return tuple(sorted(found, key=lambda n: n.name))


def gpu_products(raw_nodes: Iterable[Mapping[str, Any]]) -> dict[str, tuple[str, ...]]:
    """Lower-case GPU model → the ``nvidia.com/gpu.product`` values nodes carry for it."""
    products: dict[str, set[str]] = {}
    for raw in raw_nodes:
        product = _labels(raw).get(m.LABEL_GPU_PRODUCT)
        if product:
            products.setdefault(m.gpu_model(product).lower(), set()).add(product)
    return {k: tuple(sorted(v)) for k, v in products.items()}


def is_crossdock_pod(pod: Mapping[str, Any]) -> bool:
    labels = _labels(pod)
    return m.LABEL_JOB_ID in labels or m.LABEL_ARRAY_JOB in labels


def foreign_allocations(pods: Iterable[Mapping[str, Any]], nodes: Sequence[Node]) -> list[Allocation]:
    """Capacity held by pods crossdock did not create (``pods``: bound and unfinished).

    Kubernetes does not say which GPU a pod holds, so foreign pods get the devices crossdock's
    own pods do not claim (``crossdock.io/gpu-ids``), from the top: crossdock packs from the
    bottom, so the two rarely meet."""
    pods = list(pods)
    devices = {n.name: [g.id for g in n.gpus if not g.mig] for n in nodes}
    taken: dict[str, set[str]] = {}
    for pod in pods:
        if is_crossdock_pod(pod):
            ids = (pod.get("metadata") or {}).get("annotations", {}).get(m.ANNOTATION_GPU_IDS, "")
            taken.setdefault(pod["spec"]["nodeName"], set()).update(g for g in ids.split(",") if g)
    out: list[Allocation] = []
    for pod in pods:
        node = pod["spec"]["nodeName"]
        if is_crossdock_pod(pod) or node not in devices:
            continue
        asked = gangs.requests(pod["spec"])
        gpu = asked.get(m.GPU_RESOURCE, 0) // 1000
        free = [g for g in devices[node] if g not in taken.get(node, set())]
        ids = tuple(free[-gpu:]) if gpu else ()
        taken.setdefault(node, set()).update(ids)
        meta = pod["metadata"]
        out.append(Allocation(None, node, asked.get("cpu", 0), asked.get("memory", 0) // (1024 * 1024 * 1000), ids,
                              priority=int(pod["spec"].get("priority") or 0),
                              queue=f"k8s:{meta.get('namespace')}", user=str(meta.get("name")),
                              terminating=bool(meta.get("deletionTimestamp"))))
    return out
