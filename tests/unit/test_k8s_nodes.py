"""Kubernetes Node objects as crossdock inventory nodes."""

from __future__ import annotations

from crossdock.backends.kubernetes.nodes import node_of
from crossdock.queue.config import parse_config

CFG = parse_config({"priority_classes": {"p": {"value": 1}},
                    "pools": {"l4": {"backend": "k8s", "selector": {"crossdock.io/pool": "l4"}}},
                    "queues": {"q": {"priority_class": "p", "pools": ["l4"]}}})


def raw(allocatable: dict[str, str]) -> dict:
    return {"metadata": {"name": "n1", "labels": {"crossdock.io/pool": "l4", "nvidia.com/gpu.product": "NVIDIA-L4"}},
            "spec": {},
            "status": {"allocatable": allocatable, "conditions": [{"type": "Ready", "status": "True"}]}}


def test_allocatable_pods_becomes_the_node_pod_limit():
    node = node_of(raw({"cpu": "16", "memory": "64Gi", "nvidia.com/gpu": "4", "pods": "110"}), "l4", CFG)
    assert (node.cpu_milli, node.memory_mib, len(node.gpus), node.max_pods) == (16_000, 65_536, 4, 110)
    assert node.schedulable


def test_a_node_without_allocatable_pods_has_no_pod_limit():
    assert node_of(raw({"cpu": "500m", "memory": "1Gi"}), "l4", CFG).max_pods is None
