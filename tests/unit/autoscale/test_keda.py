"""Queue-length scaling with KEDA's semantics: the backlog, activation, cooldown, 0 ↔ 1, 1 ↔ N."""

import pytest
from hpa_sim import Loop
from hypothesis import given, settings
from hypothesis import strategies as st

from crossdock.queue.autoscale import hpa, keda
from crossdock.queue.config import Elastic
from crossdock.queue.models import Job, JobSpec
from crossdock.queue.states import JobState, Reason


def job(i, state, queue="prep", *, hold=False, reason=Reason.NONE):
    return Job(id=i, spec=JobSpec(command=["true"], hold=hold), state=state, queue=queue, reason=reason)


def test_backlog_counts_eligible_and_running_work_of_the_queue():
    jobs = [
        job(1, JobState.PENDING), job(2, JobState.SCHEDULED), job(3, JobState.RUNNING),
        job(4, JobState.PENDING, reason=Reason.DEPENDENCY),     # runs without anyone acting: counted
        job(5, JobState.PENDING, hold=True, reason=Reason.JOB_HELD_USER),  # held: needs no replica
        job(6, JobState.PENDING, reason=Reason.JOB_HELD_ADMIN),
        job(7, JobState.COMPLETED), job(8, JobState.FAILED), job(9, JobState.PREEMPTED),
        job(10, JobState.RUNNING, queue="other"),
    ]
    assert keda.backlog(jobs, "prep") == 4
    assert keda.backlog(jobs, "other") == 1
    assert keda.backlog([], "prep") == 0


@pytest.mark.parametrize("jobs,desired,says", [
    ([job(1, JobState.PENDING, reason=Reason.RESOURCES), job(2, JobState.PENDING, reason=Reason.RESOURCES),
      job(3, JobState.RUNNING)], 3, "the 2 pending jobs wait on room the workers do not make (2 Resources)"),
    ([job(1, JobState.PENDING, reason=Reason.RESOURCES), job(2, JobState.PENDING, reason=Reason.PRIORITY)], 2,
     "(1 Priority, 1 Resources)"),
    ([job(1, JobState.PENDING, reason=Reason.RESOURCES)], 1, ""),  # one worker: nothing beyond it
    ([job(1, JobState.PENDING, reason=Reason.RESOURCES), job(2, JobState.PENDING)], 3, ""),  # one a cycle may place
    ([job(1, JobState.PENDING, reason=Reason.RESOURCES), job(2, JobState.SCHEDULED)], 3, ""),  # awaits dispatch
    ([job(1, JobState.RUNNING), job(2, JobState.PENDING, queue="other", reason=Reason.RESOURCES)], 3, ""),
], ids=["all-resources", "mixed-node-bound", "one-worker", "one-placeable", "one-to-dispatch", "other-queue"])
def test_no_capacity_says_when_more_workers_cannot_run_the_backlog(jobs, desired, says):
    note = keda.no_capacity(jobs, "prep", desired)
    assert (says in note and note.startswith("more workers add no capacity")) if says else note == ""


def step(**kw):
    args = dict(metric=0, per_replica=10, activation=0, cooldown_seconds=300, min_replicas=0, max_replicas=50,
                current_replicas=0, last_active=None, now=1000.0, behavior=None, recommendations=[],
                scale_up_events=[], scale_down_events=[]) | kw
    return keda.scale_pass(**args)


@pytest.mark.parametrize("kw,replicas,limited_by,active", [
    # 0 → max(min, 1) at once when active, whatever the backlog asks (scaleFromZeroOrIdle)
    ({"metric": 5000}, 1, "Activation", True),
    ({"metric": 5000, "min_replicas": 3}, 3, "Activation", True),
    ({"metric": 5}, 1, "", True),
    # at or below activation: idle (the metric alone would ask for 4)
    ({"metric": 40, "activation": 50}, 0, "Activation", False),
    ({"metric": 50, "activation": 50}, 0, "Activation", False),
    ({"metric": 51, "activation": 50}, 1, "Activation", True),
    ({"metric": 0}, 0, "", False),
    # scaled to zero behind crossdock's back with a floor: back to min (no idle count)
    ({"metric": 0, "min_replicas": 2}, 2, "TooFewReplicas", False),
], ids=["wake", "wake-to-min", "wake-exact", "below-activation", "at-activation", "above-activation", "idle",
        "back-to-min"])
def test_zero_to_one_is_keda_step(kw, replicas, limited_by, active):
    s = step(**kw)
    assert (s.replicas, s.limited_by, s.active) == (replicas, limited_by, active)


def test_one_to_n_is_the_hpa_with_average_value():
    # 5,000 tasks at 10 per replica on 1 replica: AverageValue asks ceil(5000 / 10) = 500; the legacy
    # HPA caps a pass at max(2 × 1, 4) = 4, the default behavior at max(1 + 4, 2 × 1) = 5
    legacy = step(metric=5000, current_replicas=1, recommendations=[(0.0, 1)])
    assert (legacy.recommended, legacy.replicas, legacy.limited_by) == (500, 4, "ScaleUpLimit")
    default = step(metric=5000, current_replicas=1, recommendations=[(0.0, 1)], behavior=hpa.default_behavior(None))
    assert (default.recommended, default.replicas, default.limited_by) == (500, 5, "ScaleUpLimit")
    capped = step(metric=5000, current_replicas=40, max_replicas=50)
    assert (capped.replicas, capped.limited_by) == (50, "TooManyReplicas")


def test_to_zero_only_after_the_cooldown():
    # idle since 200 s with a 300 s cooldown: the HPA (minReplicas max(0, 1) = 1) keeps one replica
    waiting = step(metric=0, current_replicas=3, last_active=800.0, now=1000.0)
    assert (waiting.replicas, waiting.limited_by) == (1, "Cooldown")
    # exactly at the end of the cooldown: not yet (LastActiveTime + cooldown must be Before now)
    assert step(metric=0, current_replicas=1, last_active=700.0, now=1000.0).replicas == 1
    after = step(metric=0, current_replicas=1, last_active=699.0, now=1000.0)
    assert (after.replicas, after.limited_by) == (0, "")
    # never active (scaled up outside): no cooldown to wait for
    assert step(metric=0, current_replicas=2, last_active=None).replicas == 0
    # below activation but not empty: zero after the cooldown, activation named
    below = step(metric=3, activation=5, current_replicas=2, last_active=0.0)
    assert (below.replicas, below.limited_by) == (0, "Activation")


def test_a_floor_above_zero_is_the_hpa_minimum():
    s = step(metric=0, current_replicas=5, min_replicas=2, last_active=0.0)
    assert (s.replicas, s.limited_by) == (2, "TooFewReplicas")


def test_elastic_block_drives_a_pass():
    el = Elastic(metric="queue_length", per_replica=10, min=0, max=50,
                 behavior={"scaleUp": {"policies": [{"type": "Pods", "value": 20, "periodSeconds": 60}]}})
    s = keda.elastic_pass(el, 5000, current_replicas=10, last_active=None, now=0.0, recommendations=[(0.0, 10)],
                          scale_up_events=[], scale_down_events=[])
    assert (s.recommended, s.replicas, s.limited_by) == (500, 30, "ScaleUpLimit")
    qps = Elastic(metric="qps", target=100, max=16)
    s = keda.elastic_pass(qps, 950.0, current_replicas=4, last_active=None, now=0.0, recommendations=[],
                          scale_up_events=[], scale_down_events=[])
    assert (s.recommended, s.replicas) == (10, 8)  # legacy cap max(2 × 4, 4)
    unbounded = Elastic(metric="queue_length", per_replica=1)
    s = keda.elastic_pass(unbounded, 10**6, current_replicas=90, last_active=None, now=0.0, recommendations=[],
                          scale_up_events=[], scale_down_events=[])
    assert (s.replicas, s.limited_by) == (keda.DEFAULT_MAX_REPLICAS, "TooManyReplicas")


def test_behavior_tolerance_reaches_the_recommendation():
    loose = hpa.default_behavior({"scaleUp": {"tolerance": 0.5}})
    # 140 on 10 replicas of 10 is a ratio of 1.4: inside a 50 % up tolerance, outside the default 10 %
    assert step(metric=140, current_replicas=10, behavior=loose).recommended == 10
    assert step(metric=140, current_replicas=10, behavior=hpa.default_behavior(None)).recommended == 14


@settings(max_examples=150, deadline=None)
@given(backlog=st.lists(st.one_of(st.just(0), st.integers(0, 3000)), min_size=5, max_size=80),
       dt=st.integers(5, 60), activation=st.integers(0, 20), cooldown=st.integers(0, 900),
       lo=st.integers(0, 3), span=st.integers(1, 60), per_replica=st.integers(1, 20), defaults=st.booleans())
def test_replicas_reach_zero_only_after_the_cooldown(backlog, dt, activation, cooldown, lo, span, per_replica,
                                                     defaults):
    loop = Loop(replicas=0, behavior=hpa.default_behavior(None) if defaults else None, min_replicas=lo,
                max_replicas=lo + span)
    for i, b in enumerate(backlog):
        now, before, last_active = float(i * dt), loop.replicas, loop.last_active
        s = loop.keda_pass(now, b, per_replica, activation, cooldown)
        assert lo <= s.replicas <= lo + span
        if before > 0 and s.replicas == 0:
            assert not s.active and lo == 0
            assert last_active is None or now - last_active > cooldown
        if before == 0 and s.active:
            assert s.replicas == max(lo, 1)
