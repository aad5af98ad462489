"""recommend() against kube-controller-manager's own tests.

Cases transcribed from kubernetes/kubernetes pkg/controller/podautoscaler/replica_calculator_test.go
(``replicaCalcTestCase``: levels and targets there are milli-values; here they are divided by 1000)
and horizontal_test.go (``testCase`` with an External metric; ``reportedLevels`` are milli-values).
Each id names the upstream test.
"""

import math

import pytest

from crossdock.queue.autoscale.hpa import MAX_INT32, recommend

MAX_INT64_MILLI = (2**63 - 1) / 1000

# (id, current, metric, target, target_type, ready, (scale_down_tol, scale_up_tol) or None, expected)
CASES = [
    # replica_calculator_test.go
    ("TestReplicaCalcScaleUpCMExternalIgnoresUnreadyPods", 3, 8.6, 4.4, "Value", 1, None, 2),
    ("TestReplicaCalcScaleUpPerPodCMExternal", 3, 8.6, 2.15, "AverageValue", None, None, 4),
    ("TestReplicaCalcScaleDownCMExternal", 5, 8.6, 14.334, "Value", None, None, 3),
    ("TestReplicaCalcScaleDownPerPodCMExternal", 5, 8.6, 2.867, "AverageValue", None, None, 3),
    ("TestReplicaCalcToleranceCMExternal", 3, 8.6, 8.888, "Value", None, None, 3),
    ("TestReplicaCalcTolerancePerPodCMExternal", 3, 8.6, 2.9, "AverageValue", None, None, 3),
    ("TestReplicaCalcConfigurableToleranceCMExternal", 3, 8.9, 8.8, "Value", None, (0.1, 0.01), 4),
    ("TestReplicaCalcConfigurableTolerancePerPodCMExternal", 3, 8.6, 2.8, "AverageValue", None, (0.1, 0.01), 4),
    ("TestExternalPerPodMetricReplicaOverflow", 1, MAX_INT64_MILLI, 0.001, "AverageValue", None, None, MAX_INT32),
    ("TestExternalPerPodMetricUsageOverflow", 1, MAX_INT64_MILLI, MAX_INT64_MILLI, "AverageValue", None, None, 1),
    # horizontal_test.go (the External cases; all pods ready)
    ("TestScaleUpCMExternal", 3, 8.6, 6.666, "Value", None, None, 4),
    ("TestScaleUpPerPodCMExternal", 3, 8.6, 2.222, "AverageValue", None, None, 4),
    ("TestScaleDownCMExternal", 5, 8.6, 14.4, "Value", None, None, 3),
    ("TestScaleDownToZeroCMExternal", 5, 0, 14.4, "Value", None, None, 0),
    ("TestScaleDownPerPodCMExternal", 5, 8.6, 3.0, "AverageValue", None, None, 3),
    ("TestToleranceCMExternal", 4, 8.6, 8.666, "Value", None, None, 4),
    ("TestTolerancePerPodCMExternal", 4, 8.6, 2.2, "AverageValue", None, None, 4),
    # getUsageRatioReplicaCount: from zero replicas, ceil(ratio) and no tolerance
    ("getUsageRatioReplicaCount-from-zero", 0, 8.6, 4.4, "Value", None, None, 2),
    ("getUsageRatioReplicaCount-from-zero-within-tolerance", 0, 1.05, 1.0, "Value", None, None, 2),
    ("getUsageRatioReplicaCount-zero-stays-zero", 0, 0, 4.4, "Value", None, None, 0),
    # GetExternalPerPodMetricReplicas with status replicas 0: usage/0 is +Inf, outside any tolerance
    ("GetExternalPerPodMetricReplicas-from-zero", 0, 5000, 10, "AverageValue", None, None, 500),
    ("GetExternalPerPodMetricReplicas-zero-over-zero", 0, 0, 10, "AverageValue", None, None, 0),
]


@pytest.mark.parametrize("current,metric,target,target_type,ready,tols,expected",
                         [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_recommend_matches_upstream(current, metric, target, target_type, ready, tols, expected):
    kwargs = {} if tols is None else {"scale_down_tolerance": tols[0], "scale_up_tolerance": tols[1]}
    assert recommend(current, metric, target, target_type=target_type, ready_replicas=ready, **kwargs) == expected


@pytest.mark.parametrize("tolerance,expected", [(0.1, 3), (0.0, 4)], ids=["default-band", "zero-tolerance"])
def test_plain_tolerance_applies_both_ways(tolerance, expected):
    # TestReplicaCalcConfigurableTolerance "Outside of a 0% tolerance": ratio 1.01 scales only without a band
    assert recommend(3, 10.1, 10, target_type="Value", tolerance=tolerance) == expected


def test_one_direction_tolerance_overrides_only_its_side():
    # "Within a 36% scale-down tolerance" / "Outside a 34% scale-down tolerance": ratio 0.65 on 3 replicas
    assert recommend(3, 6.5, 10, target_type="Value", scale_down_tolerance=0.36) == 3
    assert recommend(3, 6.5, 10, target_type="Value", scale_down_tolerance=0.34) == 2
    # the up tolerance does not widen the down side
    assert recommend(3, 6.5, 10, target_type="Value", scale_up_tolerance=2.0) == 2


def test_metrics_are_milli_quantities_rounded_up():
    # Quantity.MilliValue() rounds up: 0.0001 is 1m, so 1 replica's worth of a 0.001 target
    assert recommend(0, 0.0001, 0.001, target_type="AverageValue") == 1
    # 0.07 / 0.01 is 7.000000000000001 in floats; as quantities it is 70m / 10m = 7
    assert recommend(0, 0.07, 0.01, target_type="AverageValue") == 7


@pytest.mark.parametrize("kwargs,message", [
    ({"target_type": "Utilization"}, "target_type"),
    ({"target_type": "Value", "target": 0}, "target"),
    ({"target_type": "Value", "metric": math.nan}, "metric"),
    ({"target_type": "Value", "current_replicas": -1}, "current_replicas"),
], ids=["type", "zero-target", "nan", "negative"])
def test_bad_input_names_the_argument(kwargs, message):
    args = {"current_replicas": 1, "metric": 1.0, "target": 1.0} | kwargs
    with pytest.raises(ValueError, match=message):
        recommend(args.pop("current_replicas"), args.pop("metric"), args.pop("target"), **args)
