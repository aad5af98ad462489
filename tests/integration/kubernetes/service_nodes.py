"""What the services tests on Kubernetes share: kwok nodes of their own (an ``l4`` and a ``cpu``
pool under unique names and labels, since other tests share the control plane, removed
afterwards) and the addresses behind a Service."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from contextlib import contextmanager

from kubernetes import client
from kubernetes.client.rest import ApiException

from crossdock.dev.k8s.nodes import NodePool
from k8s_helpers import wait_for

TOLERATE_GPU = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]


@contextmanager
def service_pools(api: client.ApiClient, *, l4: int, cpu: int, cpus: int = 8) -> Iterator[dict[str, list[str]]]:
    """``{"l4": [node names], "cpu": [...], "tag": [the pools' label prefix]}``; each pool's nodes carry
    ``crossdock.io/pool=<tag>-l4`` / ``<tag>-cpu``; the L4 nodes have one L4 GPU each."""
    tag = f"sv{secrets.token_hex(3)}"
    pools = {"l4": NodePool(f"{tag}-l4", l4, cpu=str(cpus), memory="64Gi", gpus=1, gpu_product="NVIDIA-L4"),
             "cpu": NodePool(f"{tag}-cpu", cpu, cpu=str(cpus), memory="64Gi")}
    core = client.CoreV1Api(api)
    made: list[str] = []
    try:
        for pool in pools.values():
            for node in pool.nodes():
                core.create_node(node)
                made.append(node["metadata"]["name"])

        def all_ready() -> bool:
            for name in made:
                conds = core.read_node(name).status.conditions or []
                if not any(c.type == "Ready" and c.status == "True" for c in conds):
                    return False
            return True

        wait_for("the services' kwok nodes Ready", all_ready, timeout=60)
        yield {"tag": [tag], **{k: [n["metadata"]["name"] for n in p.nodes()] for k, p in pools.items()}}
    finally:
        for name in made:
            try:
                core.delete_node(name)
            except ApiException as exc:
                if exc.status != 404:
                    raise


def pool_config(tag: str) -> dict[str, dict]:
    """The ``pools:`` of a crossdock config over these nodes."""
    return {"l4": {"backend": "k8s", "selector": {"crossdock.io/pool": f"{tag}-l4"}, "gpu": {"model": "L4"},
                   "tolerations": TOLERATE_GPU},
            "cpu": {"backend": "k8s", "selector": {"crossdock.io/pool": f"{tag}-cpu"}}}


def endpoint_ips(api: client.ApiClient, namespace: str, service: str) -> set[str]:
    """The ready addresses the EndpointSlice controller lists behind Service ``service``."""
    slices = client.DiscoveryV1Api(api).list_namespaced_endpoint_slice(
        namespace, label_selector=f"kubernetes.io/service-name={service}").items
    return {a for s in slices for e in s.endpoints or [] if e.conditions and e.conditions.ready for a in e.addresses}
