"""plan(): the fleets of elastic queues (KEDA's activation and cooldown, HPA's arithmetic) and their state."""

from __future__ import annotations

import random

import pytest
from as_builders import T0, config, job

from crossdock.queue.autoscale.plan import AutoscaleState, Inputs, fleet_queues, plan
from crossdock.queue.snapshot import Snapshot
from crossdock.queue.states import JobState


def cfg(**elastic):
    block = {"metric": "queue_length", "per_replica": 10, "max": 50, "fleet": {"backend": "local"}, **elastic}
    return config(queues={"batch": {"elastic": block},
                          "serve": {"elastic": {"metric": "qps", "target": 5, "fleet": {"backend": "local"}}}})


def run(c, backlog, current, state=None, now=T0, running=0):
    jobs = [job(i) for i in range(backlog)]
    jobs += [job(10_000 + i, state=JobState.RUNNING, on=("n",)) for i in range(running)]
    out = plan(Inputs(Snapshot(()), jobs, fleets={"batch": current, "serve": 1}), state or AutoscaleState(), c, now)
    return {d.queue: d for d in out.fleets}.get("batch"), out.state


def test_only_queue_length_queues_with_a_fleet_scale():
    c = cfg()
    assert fleet_queues(c) == ["batch"]
    no_fleet = config(queues={"batch": {"elastic": {"metric": "queue_length", "per_replica": 10}}})
    assert fleet_queues(no_fleet) == []


@pytest.mark.parametrize("elastic, backlog, running, current, want, limited", [
    ({}, 95, 0, 1, 4, "ScaleUpLimit"),                    # legacy cap max(2×1, 4)
    ({}, 30, 10, 4, 4, ""),                               # 40 jobs, 10 per replica: 4
    ({}, 1000, 0, 40, 50, "TooManyReplicas"),
    ({"behavior": {}}, 95, 0, 1, 5, "ScaleUpLimit"),      # default behavior: max(+4 pods, +100 %) per 15 s
    ({}, 25, 0, 0, 1, "Activation"),                      # KEDA wakes a fleet at zero to max(min, 1)
    ({"activation": 5}, 3, 0, 0, 0, "Activation"),        # at or below the activation threshold: kept at 0
], ids=["legacy-cap", "steady", "max", "behavior", "wake", "below-activation"])
def test_fleet_decisions(elastic, backlog, running, current, want, limited):
    d, _ = run(cfg(**elastic), backlog, current, running=running)
    assert (d.desired, d.limited_by) == (want, limited)
    assert d.backlog == backlog + running


def test_zero_only_after_the_cooldown():
    c = cfg(cooldown_seconds=300)
    _, state = run(c, 20, 2)
    assert state.last_active == {"batch": T0}
    d, state = run(c, 0, 2, state, now=T0 + 299)
    assert d.desired == 2 and d.limited_by == "ScaleDownStabilized"  # the HPA's 300 s window, then KEDA's cooldown
    d, _ = run(c, 0, 2, state, now=T0 + 301)
    assert d.desired == 0 and d.limited_by == ""


def test_state_keeps_recommendations_and_events_for_the_next_pass():
    c = cfg(behavior={})
    d, state = run(c, 95, 1)
    assert state.recommendations["batch"][-1] == (T0, 10) and state.scale_events["batch"] == [(T0, 4)]
    d, state = run(c, 95, 5, state, now=T0 + 5)  # within the 15 s period: the +4 already made counts (1 + 4 = 5)
    assert (d.desired, d.limited_by) == (5, "ScaleUpLimit")
    d, state = run(c, 95, 5, state, now=T0 + 15)  # the period has passed: max(+4, +100 %) = 10
    assert d.desired == 10
    assert state.scale_events["batch"] == [(T0, 4), (T0 + 15, 5)]  # the +4 is not older than the period yet
    _, later = run(c, 95, 10, state, now=T0 + 2000)
    assert later.scale_events["batch"] == state.scale_events["batch"]  # no scale step: the slots stay
    d, later = run(c, 150, 10, later, now=T0 + 2001)
    # as the controller's storeScaleEvent: the last outdated slot of the direction is reused
    assert d.desired == 15 and later.scale_events["batch"] == [(T0, 4), (T0 + 2001, 5)]
    assert min(t for t, _ in later.recommendations["batch"]) >= T0 + 2000 - 300


def test_no_flapping_under_five_percent_jitter():
    c = cfg(behavior={})
    rnd, state, current, changes = random.Random(7), None, 1, []
    for k in range(200):
        backlog = round(200 * (1 + rnd.uniform(-0.05, 0.05)))
        d, state = run(c, backlog, current, state, now=T0 + 15 * k)
        if k > 20 and d.desired != current:
            changes.append((k, current, d.desired))
        current = d.desired
    assert current == 20 and changes == []
