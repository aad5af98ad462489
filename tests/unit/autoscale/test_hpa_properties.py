"""Invariants of the HPA arithmetic: bounds, the policies' rate, the tolerance band, no flapping."""

import math
from fractions import Fraction

from hpa_sim import Loop, direction_changes
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from crossdock.queue.autoscale.hpa import default_behavior, normalize_explained, recommend

policy = st.fixed_dictionaries({"type": st.sampled_from(["Pods", "Percent"]), "value": st.integers(1, 500),
                                "periodSeconds": st.integers(1, 1800)})
direction_rules = st.one_of(st.none(), st.fixed_dictionaries({}, optional={
    "stabilizationWindowSeconds": st.integers(0, 3600),
    "selectPolicy": st.sampled_from(["Max", "Min", "Disabled"]),
    "policies": st.lists(policy, min_size=1, max_size=3),
    "tolerance": st.floats(0, 0.5),
}))
behaviors = st.one_of(st.none(), st.builds(lambda up, down: default_behavior({"scaleUp": up, "scaleDown": down}),
                                           direction_rules, direction_rules))
history = st.lists(st.tuples(st.floats(0, 4000), st.integers(0, 2000)), max_size=8)
events = st.lists(st.tuples(st.floats(0, 2000), st.integers(1, 200)), max_size=6)


@st.composite
def situations(draw, in_range=False, behavior=behaviors, scaling_up=False):
    """(current, recommended, min, max, behavior, recommendations, scale-up events, scale-down
    events); ``in_range``: current within [min, max] and above zero, the controller's normal case."""
    lo = draw(st.integers(0, 50))
    hi = draw(st.integers(max(lo, 1), 2000))
    current = draw(st.integers(max(lo, 1), hi) if in_range else st.integers(0 if lo == 0 else 1, 3000))
    recommended = draw(st.integers(current + 1, current + 10_000) if scaling_up else st.integers(0, 10_000))
    return current, recommended, lo, hi, draw(behavior), draw(history), draw(events), draw(events)


with_behavior = behaviors.filter(lambda b: b is not None)


def run(current, recommended, lo, hi, behavior, recs, ups, downs):
    return normalize_explained(current, recommended, min_replicas=lo, max_replicas=hi, behavior=behavior,
                               recommendations=recs, scale_up_events=ups, scale_down_events=downs)


@settings(max_examples=200, deadline=None)
@given(situations())
def test_result_is_within_min_and_max(s):
    replicas, reason = run(*s)
    lo, hi = s[2], s[3]
    assert lo <= replicas <= hi, reason


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 50), st.integers(0, 10_000), behaviors)
def test_a_target_at_zero_with_a_floor_is_left_alone(lo, recommended, behavior):
    # reconcileAutoscaler: spec.replicas 0 with minReplicas > 0 disables the HPA
    assert run(0, recommended, lo, lo + 10, behavior, [], [], []) == (0, "ScalingDisabled")


@settings(max_examples=200, deadline=None)
@given(situations(in_range=True, behavior=with_behavior))
def test_with_behavior_a_recommendation_never_moves_replicas_the_other_way(s):
    # stabilizeRecommendationWithBehaviors clamps around current; the legacy window does not (an
    # earlier, higher recommendation can raise a scale-down: test_legacy_window_can_raise_a_scale_down)
    current, recommended = s[:2]
    replicas, _ = run(*s)
    if recommended >= current:
        assert replicas >= current
    else:
        assert replicas <= current


def _scale_up_bound(current: int, rules: dict, ups, downs) -> int:
    """What the policies let a scale-up reach, in exact arithmetic (+1 for float64 rounding up)."""
    if rules["selectPolicy"] == "Disabled":
        return current
    bounds = []
    for p in rules["policies"]:
        start = (current - sum(c for a, c in ups if a < p["periodSeconds"])
                 + sum(c for a, c in downs if a < p["periodSeconds"]))
        if p["type"] == "Pods":
            bounds.append(start + p["value"])
        else:
            bounds.append(math.ceil(Fraction(start) * (100 + p["value"]) / 100) + 1)
    return max(current, max(bounds) if rules["selectPolicy"] == "Max" else min(bounds))


@settings(max_examples=200, deadline=None)
@given(situations(in_range=True, scaling_up=True))
def test_scale_up_never_exceeds_the_policy_limit(s):
    current, recommended, lo, hi, behavior, recs, ups, downs = s
    replicas, reason = run(*s)
    if behavior is None:
        assert replicas <= max(2 * current, 4), reason  # calculateScaleUpLimit
    else:
        assert replicas <= _scale_up_bound(current, behavior["scaleUp"], ups, downs), reason


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 5000), st.integers(1, 10**6), st.floats(0, 0.5), st.floats(0, 0.5), st.floats(0, 1),
       st.sampled_from(["Value", "AverageValue"]))
def test_tolerance_band_gives_no_change(current, target_milli, down, up, where, target_type):
    low, high = Fraction(1) - Fraction(down), Fraction(1) + Fraction(up)
    ratio = low + (high - low) * Fraction(where)
    per = current if target_type == "AverageValue" else 1
    usage_milli = round(ratio * target_milli * per)
    exact = Fraction(usage_milli, target_milli * per)
    assume(low + Fraction(1, 10**9) < exact < high - Fraction(1, 10**9))  # clear of float64 edges
    metric, target = usage_milli / 1000, target_milli / 1000
    assert recommend(current, metric, target, target_type=target_type, scale_down_tolerance=down,
                     scale_up_tolerance=up) == current


@settings(max_examples=60, deadline=None)
@given(level=st.integers(400, 3000), per_replica=st.sampled_from([1, 2, 5, 10]), start=st.integers(1, 4000),
       jitter=st.lists(st.floats(-0.05, 0.05), min_size=120, max_size=120),
       legacy=st.booleans())
def test_jitter_of_five_percent_does_not_flap(level, per_replica, start, jitter, legacy):
    """A backlog jittering ±5 % around a level, one pass every 15 s: the replica count turns
    direction at most once (towards the level, then never back)."""
    loop = Loop(replicas=start, behavior=None if legacy else default_behavior(None))
    series = [start]
    for i, j in enumerate(jitter):
        backlog = round(level * per_replica * (1 + j))
        series.append(loop.hpa_pass(15.0 * i, backlog, per_replica)[0])
    assert direction_changes(series) <= 1, series
