"""Service replicas in the scheduling cycle: spread one per node where possible, sharing a node
only when no other fits, never chosen as preemption victims (a property over random clusters,
whatever priority class the replica's queue has), and able to preempt training for room."""

from __future__ import annotations

from datetime import timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sched_builders import NOW, config, job, node, running

from crossdock.queue.assembly import allocations_of
from crossdock.queue.cycle import run_cycle
from crossdock.queue.models import Job, ServiceReplica
from crossdock.queue.snapshot import Allocation, Snapshot

pytestmark = pytest.mark.services
CFG = config()


def replica(job_id: int, ordinal: int, service: str = "chat", queue: str = "serve", cpus: int = 2) -> Job:
    built = job(job_id).queue(queue).cpus(cpus).build()
    return built.model_copy(update={"spec": built.spec.model_copy(
        update={"service": ServiceReplica(name=service, replica=ordinal)})})


def placed(result) -> dict[int, str]:
    return {p.job_id: p.nodes[0] for p in result.admitted}


def test_replicas_of_one_service_spread_one_per_node():
    nodes = [node(f"n{i}", cpus=16) for i in range(4)]
    r = run_cycle(Snapshot(nodes=tuple(nodes)), [replica(i, i) for i in range(1, 5)], CFG, NOW)
    assert sorted(placed(r).values()) == ["n0", "n1", "n2", "n3"]


def test_spread_counts_running_replicas_and_ignores_other_services():
    nodes = [node(f"n{i}", cpus=16) for i in range(3)]
    running_replica = Allocation(90, "n0", 2000, 0, service="chat", priority=1000, queue="serve")
    other = Allocation(91, "n1", 2000, 0, service="search", priority=1000, queue="serve")
    r = run_cycle(Snapshot(nodes=tuple(nodes), allocations=(running_replica, other)),
                  [replica(1, 1), replica(2, 2)], CFG, NOW)
    assert sorted(placed(r).values()) == ["n1", "n2"]


def test_a_second_replica_shares_a_node_when_no_other_fits():
    nodes = [node("big", cpus=16), node("tiny", cpus=1)]
    r = run_cycle(Snapshot(nodes=tuple(nodes)), [replica(1, 0), replica(2, 1)], CFG, NOW)
    assert placed(r) == {1: "big", 2: "big"}


def test_batch_jobs_ignore_replicas_on_nodes():
    nodes = [node(f"n{i}", cpus=16) for i in range(2)]
    busy = Allocation(90, "n0", 2000, 0, service="chat", priority=1000, queue="serve")
    with_replica = run_cycle(Snapshot(nodes=tuple(nodes), allocations=(busy,)), [job(1).queue("serve").cpus(2).build()],
                             CFG, NOW)
    plain = run_cycle(Snapshot(nodes=tuple(nodes), allocations=(Allocation(90, "n0", 2000, 0, priority=1000,
                                                                           queue="serve"),)),
                      [job(1).queue("serve").cpus(2).build()], CFG, NOW)
    assert placed(with_replica) == placed(plain)


def test_a_replica_preempts_training_to_make_room():
    nodes = [node("l4a", cpus=4)]
    training = running(50, "l4a", cpus=4, priority=100, preemptible=True)
    r = run_cycle(Snapshot(nodes=tuple(nodes), allocations=(training,)), [replica(1, 0, cpus=2)], CFG, NOW)
    assert [p.victim_id for p in r.preemptions] == [50]


def test_a_replica_job_is_never_preemptible_even_in_a_preemptible_queue():
    rep = replica(1, 0, queue="train").model_copy(update={"state": "RUNNING", "nodes": ["n0"], "preemptible": True})
    assert all(not a.preemptible and a.service == "chat" for a in allocations_of(rep, CFG))


@st.composite
def clusters_with_replicas(draw):
    nodes = [node(f"n{k}", cpus=draw(st.integers(1, 16)), gpus=draw(st.sampled_from([0, 1, 2, 4])))
             for k in range(draw(st.integers(1, 4)))]
    allocs: list[Allocation] = []
    free = {x.name: [x.cpu_milli, [g.id for g in x.gpus]] for x in nodes}
    for k in range(draw(st.integers(0, 8))):
        x = draw(st.sampled_from(nodes))
        f = free[x.name]
        cpu = draw(st.integers(0, f[0] // 1000)) * 1000
        ngpu = draw(st.integers(0, len(f[1])))
        gids, f[1] = tuple(f[1][:ngpu]), f[1][ngpu:]
        f[0] -= cpu
        is_replica = draw(st.booleans())
        # a replica in a low, "preemptible" class is the worst case: it must still never be a victim
        allocs.append(Allocation(500 + k, x.name, cpu, 0, gids, priority=draw(st.sampled_from([100, 500, 1000])),
                                 preemptible=not is_replica or draw(st.booleans()), queue="train",
                                 start_time=NOW - timedelta(minutes=draw(st.integers(1, 100))),
                                 time_limit_seconds=None if is_replica else 6000, grace_seconds=30,
                                 service="chat" if is_replica else None))
    pending = []
    for i in range(1, draw(st.integers(1, 4)) + 1):
        b = job(i).queue(draw(st.sampled_from(["serve", "batch", "train"]))).cpus(draw(st.integers(1, 8)))
        if draw(st.booleans()):
            b.gpus(draw(st.integers(1, 4)))
        pending.append(b.build())
    return nodes, allocs, pending


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(clusters_with_replicas())
def test_replicas_are_never_preemption_victims(case):
    nodes, allocs, pending = case
    r = run_cycle(Snapshot(nodes=tuple(nodes), allocations=tuple(allocs)), pending, CFG, NOW)
    replicas = {a.job_id for a in allocs if a.service is not None}
    assert not replicas & {p.victim_id for p in r.preemptions}


def test_the_spread_score_prefers_nodes_without_a_sibling():
    from crossdock.queue.scheduler.framework import CycleState
    from crossdock.queue.scheduler.inventory import Inventory
    from crossdock.queue.scheduler.plugins.service_spread import ServiceSpread
    from crossdock.queue.scheduler.request import build_request

    import numpy as np

    inv = Inventory([node(f"n{i}") for i in range(3)])
    inv.load([Allocation(90, "n0", 1000, 0, service="chat"), Allocation(91, "n0", 1000, 0, service="chat"),
              Allocation(92, "n1", 1000, 0, service="chat"), Allocation(93, "n2", 1000, 0, service="search")])
    state = CycleState(inv, CFG, NOW)
    scores = ServiceSpread().score(state, build_request(replica(1, 0), CFG), np.arange(3))
    assert scores.tolist() == [0, 50, 100]
    batch = ServiceSpread().score(state, build_request(job(2).build(), CFG), np.arange(3))
    assert len(set(batch.tolist())) == 1  # the same everywhere: no effect on a batch job
