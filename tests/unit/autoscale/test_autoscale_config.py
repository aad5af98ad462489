"""An elastic queue's config: HPA ``behavior`` fields checked as the API server checks them, each
error one line with its path and the fix, and the model handed to the arithmetic defaulted."""

import copy

import pytest

from crossdock.queue.autoscale.hpa import behavior_dict, normalize
from crossdock.queue.config import parse_config
from crossdock.queue.errors import ConfigError

BASE = {
    "priority_classes": {"batch": {"value": 100}},
    "pools": {"cpu": {"backend": "k8s", "selector": {"pool": "cpu"}}},
    "queues": {"prep": {"priority_class": "batch", "pools": ["cpu"],
                        "elastic": {"metric": "queue_length", "per_replica": 10, "max": 50}}},
}
ELASTIC = "queues.prep.elastic"


def with_elastic(**fields):
    data = copy.deepcopy(BASE)
    data["queues"]["prep"]["elastic"].update(fields)
    return data


def errors_of(data) -> list[str]:
    with pytest.raises(ConfigError) as exc:
        parse_config(data)
    return exc.value.errors


POLICY = {"type": "Pods", "value": 4, "periodSeconds": 15}


@pytest.mark.parametrize("fields,line", [
    ({"behavior": {"scaleUp": {"policies": [POLICY | {"periodSeconds": 1801}]}}},
     f"{ELASTIC}.behavior.scaleUp.policies.0.periodSeconds: must be ≤ 1800"),
    ({"behavior": {"scaleDown": {"policies": [POLICY | {"periodSeconds": 0}]}}},
     f"{ELASTIC}.behavior.scaleDown.policies.0.periodSeconds: must be > 0"),
    ({"behavior": {"scaleDown": {"stabilizationWindowSeconds": 3601}}},
     f"{ELASTIC}.behavior.scaleDown.stabilizationWindowSeconds: must be ≤ 3600"),
    ({"behavior": {"scaleUp": {"stabilizationWindowSeconds": -1}}},
     f"{ELASTIC}.behavior.scaleUp.stabilizationWindowSeconds: must be ≥ 0"),
    ({"behavior": {"scaleUp": {"policies": [POLICY | {"value": 0}]}}},
     f"{ELASTIC}.behavior.scaleUp.policies.0.value: must be > 0"),
    ({"behavior": {"scaleUp": {"policies": [POLICY | {"type": "Nodes"}]}}},
     f"{ELASTIC}.behavior.scaleUp.policies.0.type: must be one of 'Pods' or 'Percent'"),
    ({"behavior": {"scaleDown": {"selectPolicy": "Maximum"}}},
     f"{ELASTIC}.behavior.scaleDown.selectPolicy: must be one of 'Max', 'Min' or 'Disabled'"),
    ({"behavior": {"scaleUp": {"policies": []}}},
     f"{ELASTIC}.behavior.scaleUp.policies: must specify at least one policy"),
    ({"behavior": {"scaleUp": {"tolerance": -0.1}}}, f"{ELASTIC}.behavior.scaleUp.tolerance: must be ≥ 0"),
    ({"behavior": {"scaleSideways": {}}}, f"{ELASTIC}.behavior.scaleSideways: unknown field"),
    ({"per_replica": None}, f"{ELASTIC}: per_replica: required for metric queue_length"),
    ({"metric": "qps", "per_replica": None}, f"{ELASTIC}: target: required for metric qps"),
    ({"min": 60}, f"{ELASTIC}: min: 60 is above max 50; lower min or raise max"),
], ids=["period-max", "period-zero", "window-max", "window-negative", "value-zero", "policy-type", "select-policy",
        "no-policies", "tolerance", "direction", "per-replica", "qps-target", "min-above-max"])
def test_elastic_errors_are_one_line_with_path_and_fix(fields, line):
    errors = errors_of(with_elastic(**fields))
    assert [e for e in errors if e.startswith(line)], errors
    assert len(errors) == 1, errors  # one problem, one line (no echo from the elastic: none branch)


def test_limits_themselves_are_accepted():
    cfg = parse_config(with_elastic(behavior={
        "scaleUp": {"stabilizationWindowSeconds": 3600, "policies": [POLICY | {"periodSeconds": 1800}]}}))
    assert cfg.queues["prep"].elastic.behavior.scaleUp.stabilizationWindowSeconds == 3600


def test_config_behavior_reaches_normalize_defaulted():
    cfg = parse_config(with_elastic(behavior={"scaleDown": {"stabilizationWindowSeconds": 60,
                                                            "policies": [{"type": "Pods", "value": 2,
                                                                          "periodSeconds": 60}]}}))
    behavior = behavior_dict(cfg.queues["prep"].elastic.behavior)
    assert behavior["scaleUp"]["policies"] == [{"type": "Pods", "value": 4, "periodSeconds": 15},
                                               {"type": "Percent", "value": 100, "periodSeconds": 15}]
    assert behavior["scaleDown"]["stabilizationWindowSeconds"] == 60
    # the user's Pods 2 / 60 s policy limits a scale-down from 10 to 8
    assert normalize(10, 1, min_replicas=0, max_replicas=50, behavior=behavior, recommendations=[],
                     scale_up_events=[], scale_down_events=[]) == 8
    assert behavior_dict(None) is None
