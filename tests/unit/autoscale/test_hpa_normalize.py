"""normalize() against kube-controller-manager's own tests (kubernetes/kubernetes
pkg/controller/podautoscaler/horizontal_test.go); each id names the upstream test and case.

Upstream timestamps become ages: ``time.Now().Add(-2 * time.Minute)`` is age 120. An upstream
``DesiredWithinRange`` is "" here (nothing limited the recommendation).
"""

import copy

import pytest

from crossdock.queue.autoscale.hpa import default_behavior, normalize, normalize_explained, recommend, tolerances


def uniform(raw: list[int], period: int) -> list[tuple[float, int]]:
    """``generateEventsUniformDistribution``: events centred in equal segments of the last
    ``period`` seconds, oldest first (its float seconds truncate through ``time.Duration``)."""
    seg = period / len(raw)
    return [(float(int(period - seg * (i + 1) + seg / 2)), change) for i, change in enumerate(raw)]


def rules(pods: int, pods_period: int, percent: int, percent_period: int, window: int) -> dict:
    """``generateScalingRules``."""
    policies = []
    if pods:
        policies.append({"type": "Pods", "value": pods, "periodSeconds": pods_period})
    if percent:
        policies.append({"type": "Percent", "value": percent, "periodSeconds": percent_period})
    return {"stabilizationWindowSeconds": window, "selectPolicy": "Max", "policies": policies}


def explained(current, desired, lo, hi, behavior, recs=(), up=(), down=()):
    return normalize_explained(current, desired, min_replicas=lo, max_replicas=hi, behavior=behavior,
                               recommendations=list(recs), scale_up_events=list(up), scale_down_events=list(down))


# TestNormalizeDesiredReplicas (stabilizeRecommendation, the legacy 5-minute window):
# (name, recommendations, prenormalized, expected stabilized)
LEGACY_STABILIZATION = [
    ("empty log", [], 5, 5),
    ("stabilize", [(120, 4), (60, 5)], 3, 5),
    ("no stabilize", [(120, 1), (60, 2)], 3, 3),
    ("no stabilize - old recommendations", [(600, 10), (540, 9)], 3, 3),
    ("stabilize - old recommendations", [(600, 10), (60, 4), (120, 5), (540, 9)], 3, 5),
]


@pytest.mark.parametrize("recs,desired,expected", [c[1:] for c in LEGACY_STABILIZATION],
                         ids=[f"TestNormalizeDesiredReplicas/{c[0]}" for c in LEGACY_STABILIZATION])
def test_legacy_stabilization(recs, desired, expected):
    replicas, reason = explained(10, desired, 1, 100, None, recs)
    assert replicas == expected
    assert reason == ("ScaleDownStabilized" if expected != desired else "")


def test_legacy_window_can_raise_a_scale_down():
    # stabilizeRecommendation takes the max of the window without clamping to current: an earlier
    # recommendation of 2 (capped then) turns a recommendation of 0 on 1 replica into 2
    assert explained(1, 0, 0, 2, None, [(0.0, 2)]) == (2, "ScaleDownStabilized")


def test_legacy_window_counts_a_recommendation_at_its_edge():
    # stabilizeRecommendation drops only what is Before(cutoff): age 300 is still in the window
    assert explained(10, 3, 1, 100, None, [(300, 8)]) == (8, "ScaleDownStabilized")
    assert explained(10, 3, 1, 100, None, [(300.5, 8)]) == (3, "")


# TestConvertDesiredReplicasWithRules: (annotation, current, desired, min, max, expected, condition)
CONVERSION = [
    ("prenormalized desired replicas within range", 5, 7, 3, 8, 7, "DesiredWithinRange"),
    ("prenormalized desired replicas < minReplicas", 3, 1, 2, 8, 2, "TooFewReplicas"),
    ("prenormalized desired zeroed replicas within range", 1, 0, 0, 10, 0, "DesiredWithinRange"),
    ("maxReplicas is the limit because maxReplicas < scaleUpLimit", 20, 1000, 1, 10, 10, "TooManyReplicas"),
    ("scaleUpLimit is the limit because scaleUpLimit < maxReplicas", 3, 1000, 1, 2000, 6, "ScaleUpLimit"),
]


@pytest.mark.parametrize("current,desired,lo,hi,expected,condition", [c[1:] for c in CONVERSION],
                         ids=[f"TestConvertDesiredReplicasWithRules/{c[0]}" for c in CONVERSION])
def test_legacy_conversion(current, desired, lo, hi, expected, condition):
    assert explained(current, desired, lo, hi, None) == (expected, "" if condition == "DesiredWithinRange" else condition)


# TestNormalizeDesiredReplicasWithBehavior (stabilizeRecommendationWithBehaviors):
# (name, recommendations, current, prenormalized, expected, up window, down window)
BEHAVIOR_STABILIZATION = [
    ("empty recommendations for scaling down", [], 100, 5, 5, 0, 0),
    ("simple scale down stabilization", [(120, 4), (60, 5)], 100, 3, 5, 0, 180),
    ("simple scale up stabilization", [(120, 4), (60, 5)], 1, 7, 4, 300, 0),
    ("no scale down stabilization", [(120, 1), (60, 2)], 100, 3, 3, 300, 0),
    ("no scale up stabilization", [(120, 4), (60, 5)], 1, 3, 3, 0, 300),
    ("no scale down stabilization, reuse recommendation element", [(600, 10), (540, 9)], 100, 3, 3, 0, 0),
    ("no scale up stabilization, reuse recommendation element", [(600, 10), (540, 9)], 1, 100, 100, 0, 0),
    ("scale down stabilization, reuse one of obsolete recommendation element",
     [(600, 10), (60, 4), (120, 5), (540, 9)], 100, 3, 5, 0, 180),
    ("scale up stabilization, reuse one of obsolete recommendation element",
     [(6000, 10), (60, 6), (120, 5), (180, 9)], 1, 100, 5, 300, 0),
    ("scale up and down stabilization, do not scale up when prenormalized rec goes down",
     [(6000, 2), (180, 3)], 2, 1, 2, 300, 300),
    ("scale up and down stabilization, do not scale down when prenormalized rec goes up",
     [(6000, 2), (180, 1)], 2, 3, 2, 300, 300),
]


@pytest.mark.parametrize("recs,current,desired,expected,up_window,down_window",
                         [c[1:] for c in BEHAVIOR_STABILIZATION],
                         ids=[f"TestNormalizeDesiredReplicasWithBehavior/{c[0]}" for c in BEHAVIOR_STABILIZATION])
def test_behavior_stabilization(recs, current, desired, expected, up_window, down_window):
    # policies wide enough that only the stabilization acts
    wide = [{"type": "Pods", "value": 100000, "periodSeconds": 15}]
    behavior = default_behavior({"scaleUp": {"stabilizationWindowSeconds": up_window, "policies": wide},
                                 "scaleDown": {"stabilizationWindowSeconds": down_window, "policies": wide}})
    replicas, reason = explained(current, desired, 0, 1000, behavior, recs)
    assert replicas == expected
    direction = "ScaleUpStabilized" if desired >= current else "ScaleDownStabilized"
    assert reason == (direction if expected != desired else "")


# TestScalingWithRules (convertDesiredReplicasWithBehaviorRate over GenerateHPAScale{Up,Down}Rules):
# (name, current, desired, min, max, scaleUp rules, scaleDown rules, up events, down events, expected, condition)
U = uniform
SCALING_WITH_RULES = [
    ("prenormalized desired replicas within range", 5, 7, 3, 8, None, None, [], [], 7, "DesiredWithinRange"),
    ("prenormalized desired replicas < minReplicas", 3, 1, 2, 8, None, None, [], [], 2, "TooFewReplicas"),
    ("prenormalized desired replicas within range when minReplicas is 0", 1, 0, 0, 10, None, None, [], [], 0,
     "DesiredWithinRange"),
    ("maxReplicas is the limit because maxReplicas < scaleUpLimit", 20, 1000, 1, 10, None, None, [], [], 10,
     "TooManyReplicas"),
    ("desired replica count is more than the maximum replica count", 100, 1000, 100, 150, None, None, [], [], 150,
     "TooManyReplicas"),
    ("scaleUpLimit is the limit because scaleUpLimit < maxReplicas with user policies", 3, 1000, 1, 2000,
     rules(0, 0, 1, 60, 0), None, [], [], 4, "ScaleUpLimit"),
    ("scaleDownLimit is the limit because scaleDownLimit > minReplicas with user defined policies", 1000, 3, 3, 2000,
     None, rules(20, 60, 0, 0, 0), [], [], 980, "ScaleDownLimit"),
    ("scaleUp with default behavior", 10, 50, 1, 1000, None, None, [], [], 20, "ScaleUpLimit"),
    ("scaleUp with pods policy larger than percent policy", 10, 500, 1, 1000, rules(100, 60, 100, 60, 0), None,
     [], [], 110, "ScaleUpLimit"),
    ("scaleUp with percent policy larger than pods policy", 10, 500, 1, 1000, rules(2, 60, 100, 60, 0), None,
     [], [], 20, "ScaleUpLimit"),
    ("scaleUp with spec MaxReplicas limitation with large pod policy", 10, 50, 1, 1000, rules(100, 60, 0, 0, 0),
     None, [], [], 50, "DesiredWithinRange"),
    ("scaleUp with spec MaxReplicas limitation with large percent policy", 10, 50, 1, 1000,
     rules(10000, 60, 0, 0, 0), None, [], [], 50, "DesiredWithinRange"),
    ("scaleUp with pod policy limitation", 10, 50, 1, 1000, rules(30, 60, 0, 0, 0), None, [], [], 40, "ScaleUpLimit"),
    ("scaleUp with percent policy limitation", 10, 50, 1, 1000, rules(0, 0, 200, 60, 0), None, [], [], 30,
     "ScaleUpLimit"),
    ("scaleDown with percent policy larger than pod policy", 100, 2, 1, 1000, None, rules(20, 60, 1, 60, 300),
     [], [], 80, "ScaleDownLimit"),
    ("scaleDown with pod policy larger than percent policy", 100, 2, 1, 1000, None, rules(2, 60, 1, 60, 300),
     [], [], 98, "ScaleDownLimit"),
    ("scaleDown with spec MinReplicas=nil limitation with large pod policy", 10, 0, 1, 1000, None,
     rules(100, 60, 0, 0, 300), [], [], 1, "TooFewReplicas"),
    ("scaleDown with spec MinReplicas limitation with large percent policy", 10, 2, 5, 1000, None,
     rules(0, 0, 100, 60, 300), [], [], 5, "TooFewReplicas"),
    ("scaleDown with pod policy limitation", 10, 2, 1, 1000, None, rules(5, 60, 0, 0, 300), [], [], 5,
     "ScaleDownLimit"),
    ("scaleDown with percent policy limitation", 10, 5, 1, 1000, None, rules(0, 0, 50, 60, 300), [], [], 5,
     "DesiredWithinRange"),
    ("scaleUp with spec MaxReplicas limitation with large pod policy and events", 100, 500, 1, 200,
     rules(300, 60, 0, 0, 0), None, U([1, 5, 9], 120), [], 200, "TooManyReplicas"),
    ("scaleUp with spec MaxReplicas limitation with large percent policy and events", 100, 500, 1, 200,
     rules(0, 0, 10000, 60, 0), None, U([1, 5, 9], 120), [], 200, "TooManyReplicas"),
    ("scaleUp with currentReplicas limitation with rate.PeriodSeconds with a lot of recent scale up events",
     100, 500, 1, 1000, rules(5, 120, 0, 0, 0), None, U([1, 5, 9], 120), [], 100, "ScaleUpLimit"),
    ("scaleUp with pod policy and previous scale up events", 100, 500, 1, 1000, rules(150, 120, 0, 0, 0), None,
     U([1, 5, 9], 120), [], 235, "ScaleUpLimit"),
    ("scaleUp with percent policy and previous scale up events", 100, 500, 1, 1000, rules(0, 0, 200, 120, 0), None,
     U([1, 5, 9], 120), [], 255, "ScaleUpLimit"),
    ("scaleUp with percent policy and previous scale up and down events", 6, 24, 1, 1000,
     rules(0, 0, 300, 300, 0), None, U([4], 120), U([2], 120), 16, "ScaleUpLimit"),
    ("scaleDown with default policy and previous events", 10, 5, 1, 1000, None, None, [], U([1, 5, 9], 120), 5,
     "DesiredWithinRange"),
    ("scaleDown with spec MinReplicas=nil limitation with large pod policy and previous events", 100, 0, 1, 1000,
     None, rules(115, 120, 0, 0, 300), [], U([1, 5, 9], 120), 1, "TooFewReplicas"),
    ("scaleDown with spec MinReplicas limitation with large pod policy and previous events", 100, 0, 5, 1000,
     None, rules(130, 120, 0, 0, 300), [], U([1, 5, 9], 120), 5, "TooFewReplicas"),
    ("scaleDown with spec MinReplicas limitation with large percent policy and previous events", 100, 2, 5, 1000,
     None, rules(0, 0, 100, 120, 300), [], U([1, 5, 9], 120), 5, "TooFewReplicas"),
    ("scaleDown with pod policy limitation and previous events", 100, 2, 1, 1000, None, rules(5, 120, 0, 0, 300),
     [], U([1, 5, 9], 120), 100, "ScaleDownLimit"),
    ("scaleDown with percent policy limitation and previous events", 100, 0, 1, 1000, None,
     rules(0, 0, 50, 120, 300), [], U([2, 4, 6], 120), 56, "ScaleDownLimit"),
    ("scaleDown with percent policy and previous scale up and down events", 10, 1, 1, 1000, None,
     rules(0, 0, 50, 180, 0), U([2], 120), U([4], 120), 6, "ScaleDownLimit"),
    ("scaleDown with previous events preventing further scale down", 100, 0, 1, 1000, None,
     rules(0, 0, 10, 120, 300), [], U([10, 10, 10], 120), 100, "ScaleDownLimit"),
    ("scaleDown with with previous events still allowing more scale down", 10, 5, 1, 1000, None,
     rules(0, 0, 1000, 120, 300), [], U([10, 10, 10], 120), 5, "DesiredWithinRange"),
    ("check 'outdated' flag for events for one behavior for up", 100, 200, 1, 1000, rules(1000, 60, 0, 0, 0), None,
     U([8, 12, 9, 11], 120), [], 200, "DesiredWithinRange"),
    ("check that events were not marked 'outdated' for two different policies in the behavior for up", 100, 200, 1,
     1000, rules(1000, 120, 100, 60, 0), None, U([8, 12, 9, 11], 120), [], 200, "DesiredWithinRange"),
    ("check that events were marked 'outdated' for two different policies in the behavior for up", 100, 200, 1,
     1000, rules(1000, 30, 100, 60, 0), None, U([8, 12, 9, 11], 120), [], 200, "DesiredWithinRange"),
    ("check 'outdated' flag for events for one behavior for down", 100, 5, 1, 1000, None, rules(1000, 60, 0, 0, 300),
     [], U([8, 12, 9, 11], 120), 5, "DesiredWithinRange"),
    ("check that events were not marked 'outdated' for two different policies in the behavior for down", 100, 5, 1,
     1000, None, rules(1000, 120, 100, 60, 300), [], U([8, 12, 9, 11], 120), 5, "DesiredWithinRange"),
    ("check that events were marked 'outdated' for two different policies in the behavior for down", 100, 5, 1,
     1000, None, rules(1000, 30, 100, 60, 300), [], U([8, 12, 9, 11], 120), 5, "DesiredWithinRange"),
]


@pytest.mark.parametrize("current,desired,lo,hi,up_rules,down_rules,up,down,expected,condition",
                         [c[1:] for c in SCALING_WITH_RULES],
                         ids=[f"TestScalingWithRules/{c[0]}" for c in SCALING_WITH_RULES])
def test_scaling_with_rules(current, desired, lo, hi, up_rules, down_rules, up, down, expected, condition):
    behavior = default_behavior({"scaleUp": up_rules, "scaleDown": down_rules})
    # no earlier recommendations: stabilization passes ``desired`` through, as the test bypasses it
    replicas, reason = explained(current, desired, lo, hi, behavior, [], up, down)
    assert (replicas, reason) == (expected, "" if condition == "DesiredWithinRange" else condition)


def test_windows_and_periods_end_strictly():
    # getReplicasChangePerPeriod and stabilizeRecommendationWithBehaviors keep what is After(now - period):
    # an event or a recommendation exactly one period old no longer counts
    pods = default_behavior({"scaleUp": {"policies": [{"type": "Pods", "value": 4, "periodSeconds": 60}]}})
    assert explained(10, 100, 1, 1000, pods, up=[(60.0, 4)]) == (14, "ScaleUpLimit")
    assert explained(10, 100, 1, 1000, pods, up=[(59.9, 4)]) == (10, "ScaleUpLimit")
    window = default_behavior({"scaleDown": {"stabilizationWindowSeconds": 60}})
    assert explained(10, 3, 1, 100, window, [(60.0, 8)]) == (3, "")
    assert explained(10, 3, 1, 100, window, [(59.9, 8)]) == (8, "ScaleDownStabilized")


def test_select_policy_min_takes_the_smallest_change():
    # TestCalculateScaleUpLimitWithScalingRules: Pods 2 and Percent 50 from 1 replica, Min → 2
    both = [{"type": "Pods", "value": 2, "periodSeconds": 60}, {"type": "Percent", "value": 50, "periodSeconds": 60}]
    up = default_behavior({"scaleUp": {"stabilizationWindowSeconds": 300, "selectPolicy": "Min", "policies": both}})
    assert explained(1, 10, 1, 100, up) == (2, "ScaleUpLimit")
    # TestCalculateScaleDownLimitWithBehaviors: the same policies from 5 replicas, Min → 3 (int32(2.5) = 2 < 3)
    down = default_behavior({"scaleDown": {"stabilizationWindowSeconds": 300, "selectPolicy": "Min", "policies": both}})
    assert explained(5, 0, 0, 100, down) == (3, "ScaleDownLimit")


def test_disabled_direction_never_moves():
    off = default_behavior({"scaleUp": {"selectPolicy": "Disabled"}, "scaleDown": {"selectPolicy": "Disabled"}})
    assert explained(4, 40, 1, 100, off) == (4, "ScaleUpLimit")
    assert explained(4, 1, 1, 100, off) == (4, "ScaleDownLimit")


def test_percent_rounding_follows_float64():
    # ceil(50 * (1 + 10/100)) is ceil(55.00000000000001) = 56 in float64, as in Go (exactly: 55)
    ten_percent = default_behavior({"scaleUp": {"policies": [{"type": "Percent", "value": 10, "periodSeconds": 60}]}})
    assert explained(50, 100, 1, 1000, ten_percent) == (56, "ScaleUpLimit")
    # scale-down Percent truncates the count that stays: 80 at 10 % → int32(72.0) = 72, 75 → int32(67.5) = 67,
    # and 10 at 80 % → int32(1.9999999999999996) = 1 (exactly: 2)
    def down(percent):
        return default_behavior({"scaleDown": {"stabilizationWindowSeconds": 0,
                                               "policies": [{"type": "Percent", "value": percent, "periodSeconds": 60}]}})
    assert explained(80, 0, 0, 1000, down(10)) == (72, "ScaleDownLimit")
    assert explained(75, 0, 0, 1000, down(10)) == (67, "ScaleDownLimit")
    assert explained(10, 0, 0, 1000, down(80)) == (1, "ScaleDownLimit")


def test_reconcile_limits_come_before_normalization():
    # TestTooFewReplicas / TestTooManyReplicas: current outside [min, max] goes to the bound directly
    assert explained(2, 2, 3, 5, None) == (3, "TooFewReplicas")
    assert explained(10, 10, 3, 5, None) == (5, "TooManyReplicas")
    # TestZeroReplicas: a target at zero with minReplicas > 0 is not scaled (ScalingDisabled)
    assert explained(0, 4, 3, 5, None) == (0, "ScalingDisabled")


# horizontal_test.go, the External metric cases through the whole controller path (recommend, then
# the legacy normalization; ``recommendations: nil`` seeds (0, current), ``[]`` seeds nothing)
CONTROLLER = [
    ("TestScaleUpCMExternal", 2, 6, 3, 8.6, 6.666, "Value", True, 4),
    ("TestScaleUpPerPodCMExternal", 2, 6, 3, 8.6, 2.222, "AverageValue", True, 4),
    ("TestScaleDownCMExternal", 2, 6, 5, 8.6, 14.4, "Value", False, 3),
    ("TestScaleDownToZeroCMExternal", 0, 6, 5, 0, 14.4, "Value", False, 0),
    ("TestScaleDownPerPodCMExternal", 2, 6, 5, 8.6, 3.0, "AverageValue", False, 3),
    ("TestToleranceCMExternal", 2, 6, 4, 8.6, 8.666, "Value", True, 4),
    ("TestTolerancePerPodCMExternal", 2, 6, 4, 8.6, 2.2, "AverageValue", True, 4),
]


@pytest.mark.parametrize("lo,hi,current,metric,target,target_type,seeded,expected", [c[1:] for c in CONTROLLER],
                         ids=[c[0] for c in CONTROLLER])
def test_controller_external_cases(lo, hi, current, metric, target, target_type, seeded, expected):
    recommended = recommend(current, metric, target, target_type=target_type)
    recs = [(0.0, current)] if seeded else []
    assert normalize(current, recommended, min_replicas=lo, max_replicas=hi, behavior=None, recommendations=recs,
                     scale_up_events=[], scale_down_events=[]) == expected


def test_scale_down_stabilize_initial_size():
    # TestScaleDownStabilizeInitialSize: the seeded (0, current) holds a scale-down for the window
    assert explained(5, 3, 2, 6, None, [(0.0, 5)]) == (5, "ScaleDownStabilized")


@pytest.mark.parametrize("given,expected", [
    (None, {"scaleUp": (0, "Max", [("Pods", 4, 15), ("Percent", 100, 15)], 0.1),
            "scaleDown": (300, "Max", [("Percent", 100, 15)], 0.1)}),
    ({"scaleUp": {"stabilizationWindowSeconds": 120}},
     {"scaleUp": (120, "Max", [("Pods", 4, 15), ("Percent", 100, 15)], 0.1),
      "scaleDown": (300, "Max", [("Percent", 100, 15)], 0.1)}),
    ({"scaleDown": {"policies": [{"type": "Pods", "value": 1, "periodSeconds": 60}], "tolerance": 0.05}},
     {"scaleUp": (0, "Max", [("Pods", 4, 15), ("Percent", 100, 15)], 0.1),
      "scaleDown": (300, "Max", [("Pods", 1, 60)], 0.05)}),
], ids=["empty", "window-only", "policies-replace-whole"])
def test_default_behavior_fills_what_is_unset(given, expected):
    # defaults.go GenerateHPAScaleUpRules / GenerateHPAScaleDownRules (copyHPAScalingRules)
    got = default_behavior(given)
    for direction, (window, select, policies, tolerance) in expected.items():
        r = got[direction]
        assert r["stabilizationWindowSeconds"] == window and r["selectPolicy"] == select
        assert [(p["type"], p["value"], p["periodSeconds"]) for p in r["policies"]] == policies
        assert r["tolerance"] == tolerance


def test_default_behavior_refuses_unknown_fields():
    with pytest.raises(ValueError, match="behavior.scaleUp.window"):
        default_behavior({"scaleUp": {"window": 3}})
    with pytest.raises(ValueError, match="behavior.up"):
        default_behavior({"up": {}})


# The behavior as the API server stores it (defaults.go fills all but scaleDown's window and the
# tolerances), or as written, with fields missing: normalize() fills each one as upstream does.
STORED_UP = {"stabilizationWindowSeconds": 0, "selectPolicy": "Max",
             "policies": [{"type": "Pods", "value": 4, "periodSeconds": 15},
                          {"type": "Percent", "value": 100, "periodSeconds": 15}]}
STORED_DOWN = {"selectPolicy": "Max", "policies": [{"type": "Percent", "value": 100, "periodSeconds": 15}]}
PODS_1_AND_3 = [{"type": "Pods", "value": 1, "periodSeconds": 15}, {"type": "Pods", "value": 3, "periodSeconds": 15}]
# (name, behavior, current, desired, recommendations, expected (replicas, reason))
MISSING_FIELDS = [
    ("stored: scaleDown window unset is the flag's 300 s", {"scaleUp": STORED_UP, "scaleDown": STORED_DOWN},
     10, 5, [(299.0, 10)], (10, "ScaleDownStabilized")),
    ("stored: the 300 s window ends strictly", {"scaleUp": STORED_UP, "scaleDown": STORED_DOWN},
     10, 5, [(300.0, 10)], (5, "")),
    ("scaleDown window None", {"scaleDown": {"stabilizationWindowSeconds": None}},
     10, 5, [(299.0, 10)], (10, "ScaleDownStabilized")),
    ("scaleDown absent", {"scaleUp": STORED_UP}, 10, 5, [(299.0, 10)], (10, "ScaleDownStabilized")),
    ("scaleDown None", {"scaleUp": STORED_UP, "scaleDown": None}, 10, 5, [(299.0, 10)], (10, "ScaleDownStabilized")),
    ("scaleUp window unset is 0", {"scaleUp": {"selectPolicy": "Max"}, "scaleDown": STORED_DOWN},
     2, 6, [(0.0, 2)], (6, "")),
    ("scaleUp absent: default policies, max(current + 4, 2 × current)", {"scaleDown": STORED_DOWN},
     10, 100, [], (20, "ScaleUpLimit")),
    ("scaleUp policies unset", {"scaleUp": {"stabilizationWindowSeconds": 0}}, 3, 100, [], (7, "ScaleUpLimit")),
    ("scaleUp policies None", {"scaleUp": {"policies": None}}, 3, 100, [], (7, "ScaleUpLimit")),
    ("scaleUp selectPolicy unset is Max", {"scaleUp": {"policies": PODS_1_AND_3}}, 2, 10, [], (5, "ScaleUpLimit")),
    ("scaleDown selectPolicy unset is Max (the larger drop)",
     {"scaleDown": {"stabilizationWindowSeconds": 0, "policies": PODS_1_AND_3}}, 10, 1, [], (7, "ScaleDownLimit")),
    ("scaleDown policies unset: 100 % per 15 s", {"scaleDown": {"stabilizationWindowSeconds": 0}},
     10, 1, [], (1, "")),
    ("empty behavior", {}, 10, 5, [(299.0, 10)], (10, "ScaleDownStabilized")),
]


@pytest.mark.parametrize("behavior,current,desired,recs,expected", [c[1:] for c in MISSING_FIELDS],
                         ids=[c[0] for c in MISSING_FIELDS])
def test_normalize_fills_unset_behavior_fields_as_upstream(behavior, current, desired, recs, expected):
    given = copy.deepcopy(behavior)
    assert explained(current, desired, 1, 1000, behavior, recs) == expected
    assert behavior == given  # filled in a copy
    assert explained(current, desired, 1, 1000, default_behavior(behavior), recs) == expected


def test_an_unset_scale_down_window_is_the_controllers_flag():
    stored = {"scaleUp": STORED_UP, "scaleDown": STORED_DOWN}
    short = normalize_explained(10, 5, min_replicas=1, max_replicas=20, behavior=stored,
                                recommendations=[(6.0, 10)], scale_up_events=[], scale_down_events=[],
                                downscale_stabilization=5)
    assert short == (5, "")
    held = normalize_explained(10, 5, min_replicas=1, max_replicas=20, behavior=stored,
                               recommendations=[(4.0, 10)], scale_up_events=[], scale_down_events=[],
                               downscale_stabilization=5)
    assert held == (10, "ScaleDownStabilized")
    # a window the HPA sets wins over the flag
    own = {"scaleUp": STORED_UP, "scaleDown": {**STORED_DOWN, "stabilizationWindowSeconds": 0}}
    assert normalize(10, 5, min_replicas=1, max_replicas=20, behavior=own, recommendations=[(4.0, 10)],
                     scale_up_events=[], scale_down_events=[], downscale_stabilization=5) == 5


def test_the_legacy_window_is_the_controllers_flag():
    assert explained(10, 5, 1, 20, None, [(6.0, 10)]) == (10, "ScaleDownStabilized")
    assert normalize(10, 5, min_replicas=1, max_replicas=20, behavior=None, recommendations=[(6.0, 10)],
                     scale_up_events=[], scale_down_events=[], downscale_stabilization=5) == 5


@pytest.mark.parametrize("behavior,flag,expected", [
    (None, 0.1, (0.1, 0.1)),
    ({"scaleUp": STORED_UP, "scaleDown": STORED_DOWN}, 0.1, (0.1, 0.1)),
    ({"scaleUp": {"tolerance": 0.05}}, 0.1, (0.05, 0.1)),
    ({"scaleDown": {"tolerance": 0.2}, "scaleUp": None}, 0.1, (0.1, 0.2)),
    ({"scaleDown": {"tolerance": None}}, 0.3, (0.3, 0.3)),
    ({"scaleUp": {"tolerance": 0.0}}, 0.3, (0.0, 0.3)),
], ids=["legacy", "stored-unset", "up-only", "down-only-up-none", "none-is-the-flag", "zero-is-set"])
def test_an_unset_tolerance_is_the_controllers_flag(behavior, flag, expected):
    assert tolerances(behavior, flag) == expected
    assert tolerances(default_behavior(behavior, tolerance=flag)) == expected
