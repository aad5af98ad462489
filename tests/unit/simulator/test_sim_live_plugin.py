"""The crossdock GPU score as a live-scheduler plugin: FGD·10 + packing tier on an inventory."""

from __future__ import annotations

from datetime import datetime

import numpy as np

from crossdock.queue.config import parse_config
from crossdock.queue.models import GpuRequest, Job, JobSpec
from crossdock.queue.scheduler.framework import CycleState
from crossdock.queue.scheduler.inventory import Inventory
from crossdock.queue.scheduler.plugins import gpu_frag
from crossdock.queue.scheduler.plugins.gpu_fragmentation import FragCache, typical_of
from crossdock.queue.scheduler.registry import create
from crossdock.queue.scheduler.request import build_request
from crossdock.queue.snapshot import Allocation, GpuDevice, Node

CFG = parse_config({"priority_classes": {"p": {"value": 1}}, "pools": {"gpu": {"backend": "k8s"}},
                    "queues": {"q": {"priority_class": "p", "pools": ["gpu"]}},
                    "scheduler": {"default_mem_per_cpu_mib": 0}})


def gpu_node(name: str) -> Node:
    return Node(name, "gpu", "k8s", 32_000, 64_000, tuple(GpuDevice(f"{name}-g{i}", i, "A100") for i in range(4)))


def test_crossdock_gpu_plugin_is_fgd_times_ten_plus_tier():
    nodes = [gpu_node("a"), gpu_node("b"), gpu_node("c")]
    inv = Inventory(nodes)
    inv.load([Allocation(7, "b", 4000, 1000, ("b-g0",))])
    state = CycleState(inv, CFG, datetime(2026, 1, 1))
    job = Job(id=1, spec=JobSpec(command=["true"], gpus=GpuRequest(count=1), cpus_per_task=4), queue="q")
    req = build_request(job, CFG)
    state.extra["frag"] = FragCache(inv, typical_of([req], inv.model_names),
                                    np.array([inv.model_names.index(m) if m else -1 for m in inv.model], np.int64))
    idx = np.arange(3)
    fgd = create("GpuFragmentation").score(state, req, idx)
    ours = create(gpu_frag.CROSSDOCK_PLUGIN).score(state, req, idx)
    assert ours.tolist() == (fgd * 10 + np.array([0, 1, 0])).tolist()  # only node b is in use
    assert int(np.argmax(ours)) == 1
