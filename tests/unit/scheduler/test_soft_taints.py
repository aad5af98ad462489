"""PreferNoSchedule taints: a node with one the job does not tolerate is taken last, never refused."""

from __future__ import annotations

import pytest
from sched_builders import NOW, config, job, node, running

from crossdock.queue.cycle import run_cycle
from crossdock.queue.snapshot import DELETION_CANDIDATE, Snapshot

SOFT = (DELETION_CANDIDATE,)


def placed(nodes, jobs, allocations=(), cfg=None):
    r = run_cycle(Snapshot(nodes=tuple(nodes), allocations=tuple(allocations)), [j.build() for j in jobs],
                  cfg or config(), NOW)
    return {p.job_id: p.nodes[0] for p in r.admitted}


@pytest.mark.parametrize("placement", ["binpack", "spread", "most-requested", "balanced"])
def test_every_placement_takes_a_soft_tainted_node_last(placement):
    cfg = config(queues={"batch": {"priority_class": "mid", "pools": ["gpu"], "placement": placement}})
    # the soft-tainted node is the one each resource score would pick: the fuller one (binpack,
    # most-requested) and, for spread and balanced, the emptier one, so both orders are tried
    fuller = [running(50, "soft", cpus=8)]
    for allocs in (fuller, [running(50, "plain", cpus=8)]):
        got = placed([node("soft", taints=SOFT), node("plain")], [job(1).queue("batch").cpus(2)], allocs, cfg)
        assert got == {1: "plain"}, (placement, allocs)


def test_a_soft_tainted_node_still_takes_what_fits_nowhere_else():
    got = placed([node("soft", cpus=16, taints=SOFT), node("plain", cpus=4)],
                 [job(1).queue("batch").cpus(8), job(2).queue("batch").cpus(2)])
    assert got == {1: "soft", 2: "plain"}


def test_a_job_that_tolerates_the_taint_scores_the_node_as_any_other():
    tolerant = {"key": "crossdock.io/deletion-candidate", "operator": "Exists", "effect": "PreferNoSchedule"}
    allocs = [running(50, "soft", cpus=8)]  # binpack prefers the fuller node
    jobs = [job(1).queue("batch").cpus(2).set(tolerations=[tolerant])]
    assert placed([node("soft", taints=SOFT), node("plain")], jobs, allocs) == {1: "soft"}
    hard_only = {**tolerant, "effect": "NoSchedule"}  # a toleration of another effect does not count
    jobs = [job(1).queue("batch").cpus(2).set(tolerations=[hard_only])]
    assert placed([node("soft", taints=SOFT), node("plain")], jobs, allocs) == {1: "plain"}


def test_a_pools_tolerations_count_for_its_nodes():
    cfg = config(pools={"gpu": {"backend": "k8s", "tolerations": [{"key": "maint", "operator": "Exists"}]}})
    got = placed([node("soft", taints=("maint:PreferNoSchedule",)), node("plain")],
                 [job(1).queue("batch").cpus(2)], [running(50, "soft", cpus=8)], cfg)
    assert got == {1: "soft"}


def test_tainted_and_plain_nodes_in_one_state_score_apart():
    # equal shape and use share a score cache entry unless the taint is part of the node's shape
    nodes = [node(f"n{i}", taints=SOFT if i % 2 == 0 else ()) for i in range(6)]
    got = placed(nodes, [job(i).queue("batch").cpus(16) for i in range(1, 5)])
    assert len(got) == 4 and {"n1", "n3", "n5"} <= set(got.values()), got
