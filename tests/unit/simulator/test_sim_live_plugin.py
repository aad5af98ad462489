"""The crossdock GPU score as a live-scheduler plugin, against the simulator's policy (which calls
the plugin's functions on its own arrays: both must read their state alike)."""

from __future__ import annotations

from datetime import datetime

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
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
from crossdock.queue.scheduler.plugins.gpu_fragmentation import FragCache
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


SHAPES = [(4000, 1000, 1), (12000, 1000, 1), (2000, 0, 0), (8000, 1000, 2), (4000, 470, 1), (6000, 250, 1),
          (16000, 1000, 4)]
USED = [0, 250, 470, 500, 650, 1000]  # milli-GPU taken on one GPU


@st.composite
def clusters(draw):
    """Up to 8 four-GPU nodes, each GPU partly or wholly used, some CPU used; typical pods drawn
    from a few shapes, one of them sometimes limited to the cluster's model."""
    n = draw(st.integers(1, 8))
    used = [[draw(st.sampled_from(USED)) for _ in range(4)] for _ in range(n)]
    cpu_used = [draw(st.integers(0, 30)) * 1000 for _ in range(n)]
    rows = draw(st.lists(st.sampled_from(SHAPES), min_size=1, max_size=len(SHAPES), unique=True))
    freq = draw(st.lists(st.integers(1, 9), min_size=len(rows), max_size=len(rows)))
    spec = [gpu_frag.ANY_MODEL] * len(rows)
    if draw(st.booleans()):
        spec[0] = 0b1  # model-constrained demand: the CPU-aware term is off for GPU jobs
    work = typical(*[(*r, f / sum(freq)) for r, f in zip(rows, freq)], spec=spec)
    return used, cpu_used, work


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cluster=clusters(), shape=st.sampled_from([(4, 0, None), (8, 1, None), (2, 2, None), (1, 4, None),
                                                   (4, 0, 0.47), (2, 0, 0.25), (6, 0, 0.5)]), data=st.data())
def test_live_plugin_and_simulator_score_random_nodes_alike(cluster, shape, data):
    """Any nodes, allocations, typical pods and job: the plugin's numpy path (more than
    ``FEW_NODES`` nodes) and its Python-int path (a few) equal the simulator's scores."""
    used, cpu_used, work = cluster
    n = len(used)
    names = [f"n{i}" for i in range(n)]
    allocations = []
    for i, name in enumerate(names):
        whole = tuple(f"{name}-g{g}" for g, u in enumerate(used[i]) if u == 1000)
        shares = {f"{name}-g{g}": u / 1000 for g, u in enumerate(used[i]) if 0 < u < 1000}
        if cpu_used[i] or whole or shares:
            allocations.append(Allocation(i, name, cpu_used[i], 0, whole, gpu_share=shares))
    sim = sim_state(sim_nodes(*[(32_000, 64_000, 4, "A10")] * n), work,
                    gpu_left=[[1000 - u for u in row] for row in used], cpu_left=[32_000 - c for c in cpu_used])
    cpus, gpus, share = shape
    pod = sim_pod(cpu=cpus * 1000, milli=1000 if gpus else round((share or 0) * 1000), num=gpus or (1 if share else 0))
    cand = sim.feasible(pod)
    if len(cand) == 0:
        return
    want = crossdock_scores(sim, pod, cand).astype(np.int64).tolist()
    plugin = create(gpu_frag.CROSSDOCK_PLUGIN)
    state = live_state([gpu_node(name) for name in names], allocations, work)
    assert plugin.score(state, request(cpus, gpus, share), cand).tolist() == want
    few = np.array(data.draw(st.lists(st.sampled_from(range(len(cand))), min_size=1, max_size=3, unique=True)))
    assert plugin.score(state, request(cpus, gpus, share), cand[few]).tolist() == [want[k] for k in few]
