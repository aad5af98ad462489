"""Scale-down: which nodes are unneeded, when they may go, and what never goes."""

from __future__ import annotations

from as_builders import NOW, T0, config, node, running
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from crossdock.queue.autoscale.capacity import World
from crossdock.queue.autoscale.scaledown import unneeded
from crossdock.queue.ports import NodeGroup
from crossdock.queue.snapshot import Snapshot

CFG = config()
LONG_AGO = T0 - 3600


def down(nodes, placed=(), cfg=CFG, *, since=None, requested=None, last_up=None, now=T0, starting=(), pool="cpu",
         may_remove=True):
    jobs = {j.id: j for j, _ in placed}
    snap = Snapshot(tuple(nodes), tuple(a for _, a in placed))
    group = NodeGroup(pool, ready=tuple(n.name for n in nodes if n.pool == pool), starting=tuple(starting))
    return unneeded(pool, group, World(snap, cfg, NOW), jobs, cfg,
                    since={n.name: LONG_AGO for n in nodes} if since is None else since,
                    requested=requested or {}, last_scale_up=last_up, now=now, may_remove=may_remove)


def test_an_empty_node_goes_after_the_unneeded_time():
    first = down([node("a")], since={})
    assert first.unneeded == {"a": T0} and first.remove == () and first.limited_by == "Unneeded"
    assert down([node("a")], since={"a": T0 - 599}).remove == ()
    assert down([node("a")], since={"a": T0 - 600}).remove == ("a",)


def test_delay_after_add():
    assert down([node("a")], last_up=T0 - 300).limited_by == "DelayAfterAdd"
    assert down([node("a")], last_up=T0 - 300).remove == ()
    assert down([node("a")], last_up=T0 - 600).remove == ("a",)


def test_a_node_above_the_threshold_is_needed():
    placed = [running(1, "a", cpus=4)]  # 4/8 = 0.5, not below 0.5
    assert down([node("a"), node("b")], placed).unneeded.keys() == {"b"}


def test_never_a_node_with_non_preemptible_work():
    placed = [running(1, "a", cpus=1, queue="serve")]
    d = down([node("a"), node("b")], placed)
    assert "a" not in d.remove and d.blocked["a"].startswith("NonPreemptible")


def test_preemptible_work_is_drained_when_it_fits_elsewhere():
    placed = [running(1, "a", cpus=1), running(2, "b", cpus=3)]
    d = down([node("a"), node("b"), node("c", cpus=8)], placed)
    assert "a" in d.remove and 1 in d.drain
    assert set(d.remove) <= {"a", "b", "c"}


def test_at_most_one_node_with_work_per_pass_and_empty_ones_in_bulk():
    placed = [running(1, "a", cpus=1), running(2, "b", cpus=1)]
    d = down([node("a"), node("b"), node("c"), node("d"), node("e", cpus=64)], placed)
    busy = [n for n in d.remove if n in ("a", "b")]
    assert len(busy) == 1 and {"c", "d"} <= set(d.remove)


def test_work_that_fits_nowhere_keeps_its_node():
    placed = [running(1, "a", cpus=3), running(2, "b", cpus=6)]
    d = down([node("a"), node("b")], placed)
    assert d.remove == () and "fits no other node" in d.blocked["a"]


def test_min_nodes():
    cfg = config(pools={"cpu": {"min_nodes": 2}})
    d = down([node("a"), node("b"), node("c")], cfg=cfg)
    assert len(d.remove) == 1 and d.limited_by == "MinNodes"


def test_gpu_nodes_are_judged_on_their_gpus():
    nodes = [node("g1", "gpu", cpus=64, mem=512000, gpus=8), node("g2", "gpu", cpus=64, mem=512000, gpus=8)]
    placed = [running(1, "g1", cpus=60, gpus=1),   # CPUs 94 % used, GPUs 1/8: unneeded on the GPU ratio
              running(2, "g2", cpus=1, gpus=4)]    # GPUs 4/8 = 0.5: needed, though its CPUs are idle
    d = down(nodes, placed, pool="gpu")
    assert d.unneeded.keys() == {"g1"} and d.drain == (1,)


def test_a_starting_node_past_the_provision_time_is_given_up():
    d = down([node("a")], [running(1, "a", cpus=8)], starting=("s1", "s2"),
             requested={"s1": T0 - 900, "s2": T0 - 899})
    assert d.failed == ("s1",) and d.remove == ("s1",)


def test_a_snapshot_will_do_for_the_world():
    snap = Snapshot((node("a"),))
    d = unneeded("cpu", NodeGroup("cpu", ready=("a",)), snap, {}, CFG, since={"a": LONG_AGO}, requested={},
                 last_scale_up=None, now=T0)
    assert d.remove == ("a",)


def test_a_growing_pool_removes_nothing():
    d = down([node("a")], may_remove=False)
    assert d.remove == () and d.unneeded == {"a": LONG_AGO}


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.lists(st.tuples(st.integers(1, 4), st.booleans()), max_size=3), min_size=1, max_size=6),
       st.integers(0, 4))
def test_never_non_preemptible_work_never_below_min_nodes(layout, min_nodes):
    cfg = config(pools={"cpu": {"min_nodes": min_nodes}})
    nodes = [node(f"n{i}") for i in range(len(layout))]
    placed, k = [], 0
    for i, jobs in enumerate(layout):
        used = 0
        for cpus, critical in jobs:
            if used + cpus <= 8:
                placed.append(running(k, f"n{i}", cpus=cpus, queue="serve" if critical else "batch"))
                used += cpus
                k += 1
    d = down(nodes, placed, cfg)
    critical_nodes = {a.node for _, a in placed if not a.preemptible}
    assert not critical_nodes & set(d.remove)
    assert len(nodes) - len(d.remove) >= min(min_nodes, len(nodes))
    drained = {a.job_id for _, a in placed if a.node in d.remove}
    assert set(d.drain) == drained
    assert all(j.preemptible for j, _ in placed if j.id in drained)
