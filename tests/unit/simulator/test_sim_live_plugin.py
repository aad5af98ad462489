"""The crossdock GPU score as a live-scheduler plugin, against the simulator's policy."""

from __future__ import annotations

from datetime import datetime

import numpy as np

import pytest
from sim_builders import nodes as sim_nodes
from sim_builders import pod as sim_pod
from sim_builders import state as sim_state
from sim_builders import typical

from crossdock.sim.policies import crossdock_scores
from crossdock.queue.config import parse_config
from crossdock.queue.models import GpuRequest, Job, JobSpec
from crossdock.queue.scheduler.framework import CycleState
from crossdock.queue.scheduler.inventory import Inventory
from crossdock.queue.scheduler.plugins import gpu_frag
from crossdock.queue.scheduler.plugins.gpu_fragmentation import FragCache, typical_of
from crossdock.queue.scheduler.registry import create
from crossdock.queue.scheduler.request import build_request
from crossdock.queue.snapshot import Allocation, GpuDevice, Node

CFG = parse_config({"priority_classes": {"p": {"value": 1}}, "pools": {"gpu": {"backend": "k8s", "gpu": {"sharing": True}}},
                    "queues": {"q": {"priority_class": "p", "pools": ["gpu"]}},
                    "scheduler": {"default_mem_per_cpu_mib": 0}})


def gpu_node(name: str) -> Node:
    return Node(name, "gpu", "k8s", 32_000, 64_000, tuple(GpuDevice(f"{name}-g{i}", i, "A100") for i in range(4)))


def live_state(nodes: list[Node], allocations: list[Allocation], typical: gpu_frag.TypicalPods) -> CycleState:
    inv = Inventory(nodes)
    inv.load(allocations)
    state = CycleState(inv, CFG, datetime(2026, 1, 1))
    state.extra["frag"] = FragCache(inv, typical, np.array([inv.model_names.index(m) if m else -1 for m in inv.model],
                                                           np.int64))
    return state


def request(cpus: int, gpus: int = 0, share: float | None = None):
    gres = GpuRequest(count=1, share=share) if share else GpuRequest(count=gpus) if gpus else None
    spec = JobSpec(command=["true"], gpus=gres, cpus_per_task=cpus)
    return build_request(Job(id=1, spec=spec, queue="q"), CFG)


def test_crossdock_gpu_plugin_is_fgd_times_ten_plus_tier_when_model_demand_competes():
    nodes = [gpu_node("a"), gpu_node("b"), gpu_node("c")]
    work = typical((4000, 1000, 1, 1.0), spec=[0b1])  # accepts only the cluster's one model: pressure > 0
    state = live_state(nodes, [Allocation(7, "b", 4000, 1000, ("b-g0",))], work)
    req = request(4, gpus=1)
    idx = np.arange(3)
    fgd = create("GpuFragmentation").score(state, req, idx)
    ours = create(gpu_frag.CROSSDOCK_PLUGIN).score(state, req, idx)
    assert ours.tolist() == (fgd * 10 + np.array([0, 1, 0])).tolist()  # only node b is in use
    assert int(np.argmax(ours)) == 1


@pytest.mark.parametrize("cpus,gpus,best", [
    (4, 1, "b"),  # joins the node in use; on c (6 free cores) it would leave 3 GPUs without CPU
    (8, 0, "a"),  # CPU only: on b it would leave too few cores for b's GPUs
    (2, 2, "c"),  # GPU-heavy, CPU-light: takes GPUs that c's CPU could not feed anyway
])
def test_crossdock_gpu_plugin_scores_as_the_simulator_policy(cpus, gpus, best):
    """Same nodes, allocations and typical pods: the live plugin's scores equal the
    simulator's ``crossdock`` scores, CPU-aware term included."""
    work = typical((4000, 1000, 1, 0.6), (12000, 1000, 1, 0.2), (2000, 0, 0, 0.2))
    nodes = [gpu_node("a"), gpu_node("b"), gpu_node("c")]
    allocations = [Allocation(7, "b", 4000, 1000, ("b-g0",)), Allocation(8, "c", 26000, 1000, ())]
    live = create(gpu_frag.CROSSDOCK_PLUGIN).score(live_state(nodes, allocations, work), request(cpus, gpus),
                                                   np.arange(3))
    sim = sim_state(sim_nodes((32_000, 64_000, 4, "T4"), (32_000, 64_000, 4, "T4"), (32_000, 64_000, 4, "T4")), work,
                    gpu_left=[[1000] * 4, [0, 1000, 1000, 1000], [1000] * 4], cpu_left=[32_000, 28_000, 6_000])
    scores = crossdock_scores(sim, sim_pod(cpu=cpus * 1000, milli=1000 if gpus else 0, num=gpus), np.arange(3))
    assert live.tolist() == scores.astype(np.int64).tolist()
    assert "abc"[int(np.argmax(live))] == best




def test_a_share_goes_where_common_shares_can_still_fill_its_gpu():
    """Free shares of 350 (a), 530 (b) and a whole GPU (c): a 320-milli share leaves 30 on a
    (what 650 + 320 leaves anyway), 210 on b (no common share fits 210: +150 of fill waste)
    and 680 on c (+30). Live plugin and simulator agree and both pick a."""
    work = typical((4000, 320, 1, 0.3), (4000, 470, 1, 0.3), (4000, 650, 1, 0.2), (4000, 1000, 1, 0.2))
    nodes = [gpu_node("a"), gpu_node("b"), gpu_node("c")]
    allocations = [Allocation(7, "a", 4000, 1000, (), gpu_share={"a-g0": 0.65}),
                   Allocation(8, "b", 4000, 1000, (), gpu_share={"b-g0": 0.47})]
    live = create(gpu_frag.CROSSDOCK_PLUGIN).score(live_state(nodes, allocations, work), request(4, share=0.32),
                                                   np.arange(3))
    sim = sim_state(sim_nodes((32_000, 64_000, 4, "T4"), (32_000, 64_000, 4, "T4"), (32_000, 64_000, 4, "T4")), work,
                    gpu_left=[[350, 1000, 1000, 1000], [530, 1000, 1000, 1000], [1000] * 4],
                    cpu_left=[28_000, 28_000, 32_000])
    scores = crossdock_scores(sim, sim_pod(cpu=4000, milli=320, num=1), np.arange(3))
    assert live.tolist() == scores.astype(np.int64).tolist()
    assert (live // 10_000_000).tolist() == [1000 - 0, 1000 - 150, 1000 - 30]
    assert int(np.argmax(live)) == 0
