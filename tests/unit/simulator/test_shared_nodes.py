"""Shared nodes between a Slurm and a Kubernetes side: when a node moves (the pure plan), and what
moving them does over the trace's day (the simulator)."""

from __future__ import annotations

import pytest

from crossdock.queue.shared_nodes import Move, SharedNode, SideNeed, plan_moves
from crossdock.sim.day import trace_day
from crossdock.sim.shared import simulate, two_sides
from crossdock.sim.trace import DEFAULT_PODS, load_pods

NOW = 10_000.0
WAITING = SideNeed(8, NOW - 600)  # past settle_s
CALM = SideNeed(0, None)


def plan(nodes, needs, settle_s=300.0, hold_s=1800.0):
    return plan_moves(nodes, needs, NOW, settle_s=settle_s, hold_s=hold_s)


def node(name, side, used=0, **kw):
    return SharedNode(name, side, 8, used, home=kw.pop("home", side), **kw)


@pytest.mark.parametrize("nodes, needs, moves, drains, undrain", [
    pytest.param([node("a", "slurm")], {"slurm": CALM, "k8s": WAITING}, [("a", "slurm", "k8s")], [], [],
                 id="an-idle-node-of-a-calm-side-moves"),
    pytest.param([node("a", "slurm")], {"slurm": CALM, "k8s": SideNeed(8, NOW - 60)}, [], [], [],
                 id="a-wait-shorter-than-settle-moves-nothing"),
    pytest.param([node("a", "slurm", used=2), node("b", "slurm", used=6)], {"slurm": CALM, "k8s": WAITING}, [],
                 [("a", "slurm", "k8s")], [], id="a-busy-node-is-drained-the-least-used-first"),
    pytest.param([node("a", "slurm", moved_at=NOW - 60)], {"slurm": CALM, "k8s": WAITING}, [], [], [],
                 id="a-node-that-just-moved-stays"),
    pytest.param([node("a", "slurm"), node("b", "slurm", home="k8s")], {"slurm": WAITING, "k8s": WAITING},
                 [("b", "slurm", "k8s")], [], [], id="a-waiting-side-keeps-its-own-but-gives-back-a-borrowed-node"),
    pytest.param([node("a", "slurm"), node("b", "slurm")], {"slurm": CALM, "k8s": WAITING},
                 [("a", "slurm", "k8s")], [], [], id="only-as-many-gpus-as-wait"),
    pytest.param([node("a", "k8s", arriving=True), node("b", "slurm")], {"slurm": CALM, "k8s": WAITING}, [], [], [],
                 id="capacity-on-its-way-counts"),
    pytest.param([node("a", "slurm", draining_to="k8s")], {"slurm": CALM, "k8s": WAITING},
                 [("a", "slurm", "k8s")], [], [], id="a-drained-node-that-emptied-moves"),
    pytest.param([node("a", "slurm", used=4, draining_to="k8s")], {"slurm": CALM, "k8s": CALM}, [], [], ["a"],
                 id="a-drain-whose-target-stopped-waiting-is-called-off"),
    pytest.param([node("a", "slurm", used=4, draining_to="k8s")], {"slurm": WAITING, "k8s": WAITING}, [], [], ["a"],
                 id="a-side-that-starts-waiting-keeps-its-own"),
])
def test_the_plan(nodes, needs, moves, drains, undrain):
    p = plan(nodes, needs)
    assert [(m.node, m.source, m.target) for m in p.moves] == moves
    assert [(m.node, m.source, m.target) for m in p.drains] == drains
    assert p.undrain == undrain


def test_every_move_says_why():
    move, = plan([node("a", "slurm")], {"slurm": CALM, "k8s": WAITING}).moves
    assert move == Move("a", "slurm", "k8s", "k8s has waited 600 s for 8 GPUs; slurm waits for none")


@pytest.fixture(scope="module")
def day():
    return two_sides(trace_day(load_pods(DEFAULT_PODS)))


def test_moving_nodes_over_the_traces_day_idles_fewer_gpus_while_the_other_side_waits(day):
    fixed, shared = {"slurm": 9, "kubernetes": 9}, {"slurm": 6, "kubernetes": 6}
    still = simulate(day, fixed, shared, moving=False)
    moving = simulate(day, fixed, shared, moving=True)
    for result in (still, moving):  # every job ran (the simulator asserts no GPU is ever over-committed)
        assert all(s.started == s.jobs == len(day[name]) for name, s in result.sides.items())
    assert still.moves == [] and moving.moves
    assert moving.idle_gpu_hours_while_other_waited < 0.5 * still.idle_gpu_hours_while_other_waited
    assert max(s.p95_wait_s for s in moving.sides.values()) < max(s.p95_wait_s for s in still.sides.values())
    last: dict[str, float] = {}
    for at, move in moving.moves:  # hysteresis: no node moves twice within hold_s
        assert at - last.get(move.node, -1e9) >= 1800, move
        last[move.node] = at
