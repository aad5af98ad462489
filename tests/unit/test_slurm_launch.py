"""Which running Slurm attempts lost their batch launch (crossdock.backends.slurm.launch)."""

from __future__ import annotations

from crossdock.backends.slurm.cli import _CONFIG_LINE
from crossdock.backends.slurm.launch import CHECKS_PER_PASS, LAUNCH_GRACE_S, RECHECK_S, LaunchWatch, grace_s
from tests.clock import Clock


class Nodes:
    """The probe: what each node says of a job's batch step, and every question asked."""

    def __init__(self, answers: dict[str, bool | None]):
        self.answers, self.asked = answers, []

    def __call__(self, ref: str) -> bool | None:
        self.asked.append(ref)
        return self.answers[ref]


def test_an_attempt_is_lost_when_its_node_twice_has_no_batch_step_after_the_grace():
    nodes, clock = Nodes({"11": False, "12": True}), Clock(1000.0)
    watch = LaunchWatch(nodes, clock)
    running = {(1, 0): "11", (2, 0): "12"}
    assert watch.lost(running) == [] and nodes.asked == []  # just started: nobody is asked
    clock.now += LAUNCH_GRACE_S
    assert watch.lost(running) == [] and nodes.asked == ["11", "12"]  # "11" missing once
    clock.now += RECHECK_S / 2
    assert watch.lost(running) == [] and nodes.asked == ["11", "12"]  # too soon to ask again
    clock.now += RECHECK_S / 2
    assert watch.lost(running) == [(1, 0)]
    assert nodes.asked == ["11", "12", "11"]  # the launched one is not asked again


def test_no_answer_proves_nothing_and_starts_the_two_checks_over():
    nodes, clock = Nodes({"11": False}), Clock(1000.0)
    watch = LaunchWatch(nodes, clock)
    running = {(1, 0): "11"}
    watch.lost(running)
    clock.now += LAUNCH_GRACE_S
    assert watch.lost(running) == []
    nodes.answers["11"] = None  # the node stopped answering (slurmd down, munged away)
    clock.now += RECHECK_S
    assert watch.lost(running) == []
    nodes.answers["11"] = False
    clock.now += RECHECK_S
    assert watch.lost(running) == []  # a first "no such step" again, not a second
    clock.now += RECHECK_S
    assert watch.lost(running) == [(1, 0)]


def test_an_attempt_that_stops_running_is_forgotten_and_a_new_attempt_gets_its_own_grace():
    nodes, clock = Nodes({"11": False, "21": False}), Clock(1000.0)
    watch = LaunchWatch(nodes, clock)
    watch.lost({(1, 0): "11"})
    clock.now += LAUNCH_GRACE_S
    watch.lost({(1, 0): "11"})  # missing once
    watch.lost({})  # it ended (or was requeued)
    clock.now += RECHECK_S
    assert watch.lost({(1, 1): "21"}) == [] and nodes.asked == ["11"]
    clock.now += LAUNCH_GRACE_S
    watch.lost({(1, 1): "21"})
    clock.now += RECHECK_S
    assert watch.lost({(1, 1): "21"}) == [(1, 1)]


def test_one_pass_asks_a_bounded_number_of_nodes_and_the_next_pass_the_rest():
    n = CHECKS_PER_PASS + 5
    nodes, clock = Nodes({str(i): True for i in range(n)}), Clock(1000.0)
    watch = LaunchWatch(nodes, clock)
    running = {(i, 0): str(i) for i in range(n)}
    watch.lost(running)
    clock.now += LAUNCH_GRACE_S
    watch.lost(running)
    assert len(nodes.asked) == CHECKS_PER_PASS
    watch.lost(running)
    assert sorted(nodes.asked, key=int) == [str(i) for i in range(n)]
    watch.lost(running)
    assert len(nodes.asked) == n  # all launched: nobody is asked again


def test_the_grace_is_twice_what_slurm_allows_a_launch_and_at_least_a_minute():
    assert grace_s(20) == LAUNCH_GRACE_S  # Slurm's defaults: BatchStartTimeout 10 s + MessageTimeout 10 s
    assert grace_s(310) == 620  # a site with a long prolog raised BatchStartTimeout to 300 s
    config = "BatchStartTimeout       = 300 sec\nBcastExclude            = /lib,/usr/lib\nMessageTimeout          = 10 sec\n"
    assert dict(_CONFIG_LINE.findall(config)) == {"BatchStartTimeout": "300", "MessageTimeout": "10"}


def test_a_longer_grace_waits_longer():
    nodes, clock = Nodes({"11": False}), Clock(1000.0)
    watch = LaunchWatch(nodes, clock, grace=grace_s(310))
    watch.lost({(1, 0): "11"})
    clock.now += LAUNCH_GRACE_S
    assert watch.lost({(1, 0): "11"}) == [] and nodes.asked == []
    clock.now += 620 - LAUNCH_GRACE_S
    watch.lost({(1, 0): "11"})
    assert nodes.asked == ["11"]
