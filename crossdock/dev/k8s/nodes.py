"""The fake nodes kwok plays the kubelet for: pools of identical Nodes with fake GPUs."""

from __future__ import annotations

import dataclasses
from typing import Any

LABEL_POOL = "crossdock.io/pool"
LABEL_GPU_PRODUCT = "nvidia.com/gpu.product"
GPU_RESOURCE = "nvidia.com/gpu"


@dataclasses.dataclass(frozen=True)
class NodePool:
    """``count`` identical fake nodes named ``<name>-<i>``."""

    name: str
    count: int
    cpu: str
    memory: str
    gpus: int = 0
    gpu_product: str | None = None
    pods: str = "110"
    instance_type: str | None = None

    def nodes(self) -> list[dict[str, Any]]:
        return [self.node(i) for i in range(self.count)]

    def node(self, index: int) -> dict[str, Any]:
        name = f"{self.name}-{index}"
        labels = {
            "kubernetes.io/hostname": name,
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64",
            "type": "kwok",
            LABEL_POOL: self.name,
        }
        if self.instance_type:
            labels["node.kubernetes.io/instance-type"] = self.instance_type
        resources = {"cpu": self.cpu, "memory": self.memory, "pods": self.pods}
        taints: list[dict[str, str]] = []
        if self.gpus:
            resources[GPU_RESOURCE] = str(self.gpus)
            labels["nvidia.com/gpu.present"] = "true"
            labels["nvidia.com/gpu.count"] = str(self.gpus)
            if self.gpu_product:
                labels[LABEL_GPU_PRODUCT] = self.gpu_product
            taints.append({"key": GPU_RESOURCE, "value": "present", "effect": "NoSchedule"})
        return {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": name,
                "labels": labels,
                "annotations": {"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
            },
            "spec": {"taints": taints} if taints else {},
            "status": {"capacity": dict(resources), "allocatable": dict(resources)},
        }


DEFAULT_POOLS: tuple[NodePool, ...] = (
    NodePool("a100", 4, cpu="96", memory="1000Gi", gpus=8,
             gpu_product="NVIDIA-A100-SXM4-80GB", instance_type="a100-80gb-x8"),
    NodePool("l4", 2, cpu="48", memory="192Gi", gpus=4,
             gpu_product="NVIDIA-L4", instance_type="l4-x4"),
    NodePool("cpu", 2, cpu="64", memory="256Gi", instance_type="cpu-64"),
)
