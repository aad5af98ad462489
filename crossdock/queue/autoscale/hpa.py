"""Kubernetes HPA's arithmetic, as pure functions equal to kube-controller-manager's.

Transcribed from ``kubernetes/kubernetes`` (autoscaling/v2, 1.33+ with per-direction tolerances):

- ``pkg/controller/podautoscaler/replica_calculator.go``: ``Tolerances.isWithin``,
  ``GetExternalMetricReplicas`` → ``getUsageRatioReplicaCount`` (target type ``Value``) and
  ``GetExternalPerPodMetricReplicas`` (``AverageValue``) → :func:`recommend`.
- ``pkg/controller/podautoscaler/horizontal.go``: ``reconcileAutoscaler``'s limits,
  ``normalizeDesiredReplicas`` (``stabilizeRecommendation``, ``convertDesiredReplicasWithRules``,
  ``calculateScaleUpLimit``) without ``behavior``; ``normalizeDesiredReplicasWithBehaviors``
  (``stabilizeRecommendationWithBehaviors``, ``convertDesiredReplicasWithBehaviorRate``,
  ``calculateScaleUpLimitWithScalingRules``, ``calculateScaleDownLimitWithBehaviors``,
  ``getReplicasChangePerPeriod``) with it → :func:`normalize_explained`, :func:`normalize`.
- ``pkg/apis/autoscaling/v2/defaults.go``: ``GenerateHPAScaleUpRules``/``GenerateHPAScaleDownRules``
  → :func:`default_behavior`.

The controller keeps its history in memory with timestamps; here the caller hands it in as ages:
``recommendations`` are ``(age_seconds, replicas)`` of earlier passes (upstream seeds the first pass
with ``(0, current)`` in ``recordInitialRecommendation``; so must the caller), events are
``(age_seconds, replicas added)`` and ``(age_seconds, replicas removed)``. After a pass the caller
records ``(0, recommended)`` and, when it scaled, the change — what ``storeScaleEvent`` does.
Time comparisons follow Go's: a recommendation or event counts in a window when its age is strictly
below it (``timestamp.After(cutoff)``); the legacy window also counts one exactly at its edge
(``!timestamp.Before(cutoff)``).
"""

from __future__ import annotations

import copy
import math
from decimal import ROUND_CEILING, Decimal
from typing import TYPE_CHECKING, Iterable

if TYPE_CHECKING:
    from crossdock.queue.config import Behavior

MAX_INT32 = 2**31 - 1
MIN_INT32 = -(2**31)
DEFAULT_TOLERANCE = 0.1
"""``--horizontal-pod-autoscaler-tolerance``."""
DOWNSCALE_STABILIZATION_SECONDS = 300
"""``--horizontal-pod-autoscaler-downscale-stabilization``: the legacy window, and the scale-down
window ``behavior`` gets when it sets none (``maybeInitScaleDownStabilizationWindow``)."""
SCALE_UP_LIMIT_FACTOR = 2.0
SCALE_UP_LIMIT_MINIMUM = 4.0
TARGET_TYPES = ("Value", "AverageValue")
SELECT_POLICIES = ("Max", "Min", "Disabled")

_DEFAULT_RULES = {
    # defaults.go: "These constants repeats previous HPA behavior"
    "scaleUp": {"stabilizationWindowSeconds": 0, "selectPolicy": "Max", "tolerance": DEFAULT_TOLERANCE,
                "policies": [{"type": "Pods", "value": 4, "periodSeconds": 15},
                             {"type": "Percent", "value": 100, "periodSeconds": 15}]},
    "scaleDown": {"stabilizationWindowSeconds": DOWNSCALE_STABILIZATION_SECONDS, "selectPolicy": "Max",
                  "tolerance": DEFAULT_TOLERANCE,
                  "policies": [{"type": "Percent", "value": 100, "periodSeconds": 15}]},
}


def _milli(value: float, name: str) -> int:
    """``resource.Quantity.MilliValue()``: the value in thousandths, rounded up. Metrics and targets
    reach the controller as quantities, so ratios are taken between these integers."""
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
        raise ValueError(f"{name}: {value!r} is not a finite number; pass the metric as a number")
    return int((Decimal(repr(value)) * 1000).to_integral_value(rounding=ROUND_CEILING))


def _int32(x: float) -> int:
    return MAX_INT32 if x > MAX_INT32 else int(x)


def _is_within(ratio: float, scale_down: float, scale_up: float) -> bool:
    """``Tolerances.isWithin``: ``1 - scaleDown <= ratio <= 1 + scaleUp`` (false for NaN)."""
    return (1.0 - scale_down) <= ratio <= (1.0 + scale_up)


def recommend(current_replicas: int, metric: float, target: float, *, target_type: str,
              ready_replicas: int | None = None, tolerance: float = DEFAULT_TOLERANCE,
              scale_up_tolerance: float | None = None, scale_down_tolerance: float | None = None) -> int:
    """The replicas one External metric asks for, before normalization.

    ``Value`` (``GetExternalMetricReplicas`` → ``getUsageRatioReplicaCount``):
    ``ratio = metric / target``; from zero replicas ``ceil(ratio)`` with no tolerance (scale from
    zero); otherwise ``current`` within the tolerance, else ``ceil(ratio × ready)``, where ready
    (Running and Ready pods) defaults to ``current_replicas``.

    ``AverageValue`` (``GetExternalPerPodMetricReplicas``): ``ratio = metric / (target × current)``
    (the scale's status replicas); ``current`` within the tolerance, else ``ceil(metric / target)``.

    Both sides are taken as milli-quantities (``MilliValue``, rounded up) as the controller gets
    them; results are capped at MaxInt32 as upstream caps them. ``scale_up_tolerance`` and
    ``scale_down_tolerance`` (``behavior.scaleUp|scaleDown.tolerance``) override ``tolerance``.
    """
    if target_type not in TARGET_TYPES:
        raise ValueError(f"target_type: {target_type!r} is not one of {', '.join(TARGET_TYPES)}")
    if current_replicas < 0:
        raise ValueError(f"current_replicas: {current_replicas} must be ≥ 0")
    usage, goal = _milli(metric, "metric"), _milli(target, "target")
    if goal <= 0:
        raise ValueError(f"target: {target!r} must be > 0 (at least 0.001); the HPA divides by it")
    up = tolerance if scale_up_tolerance is None else scale_up_tolerance
    down = tolerance if scale_down_tolerance is None else scale_down_tolerance
    if target_type == "Value":
        ratio = float(usage) / float(goal)
        if current_replicas == 0:
            return _int32(math.ceil(ratio))  # "Scale to zero or n pods depending on usageRatio"
        if _is_within(ratio, down, up):
            return current_replicas
        ready = current_replicas if ready_replicas is None else ready_replicas
        return _int32(math.ceil(ratio * float(ready)))
    if current_replicas == 0:  # Go: x/0.0 is +Inf (or NaN for 0/0); neither is within the tolerance
        ratio = math.inf if usage > 0 else math.nan
    else:
        ratio = float(usage) / (float(goal) * float(current_replicas))
    if _is_within(ratio, down, up):
        return current_replicas
    return _int32(math.ceil(float(usage) / float(goal)))


def default_behavior(behavior: dict | None, *, downscale_stabilization: float = DOWNSCALE_STABILIZATION_SECONDS,
                     tolerance: float = DEFAULT_TOLERANCE) -> dict:
    """``behavior`` with every unset (absent or None) field filled as upstream fills it: first the
    API server (``defaults.go`` ``copyHPAScalingRules`` over ``defaultHPAScaleUpRules``/
    ``defaultHPAScaleDownRules``: a missing direction gets the whole default, a set field wins whole,
    a ``policies`` list replaces the default list), then the controller, for the two fields the API
    server leaves nil: the scale-down window becomes ``downscale_stabilization``
    (``maybeInitScaleDownStabilizationWindow``, the flag's 300 s) and a tolerance ``tolerance``
    (``tolerancesForHpa``, the flag's 0.1). None or ``{}`` gives the full defaults — what
    ``behavior: {}`` means; pass ``behavior=None`` to :func:`normalize` itself for the legacy path.
    Filling a filled behavior changes nothing."""
    out = copy.deepcopy(_DEFAULT_RULES)
    out["scaleDown"]["stabilizationWindowSeconds"] = downscale_stabilization
    for rules in out.values():
        rules["tolerance"] = tolerance
    for direction, rules in (behavior or {}).items():
        if direction not in out:
            raise ValueError(f"behavior.{direction}: unknown direction; use scaleUp or scaleDown")
        for key, value in (rules or {}).items():
            if key not in out[direction]:
                raise ValueError(f"behavior.{direction}.{key}: unknown field; use stabilizationWindowSeconds,"
                                 " selectPolicy, policies or tolerance")
            if value is not None:
                out[direction][key] = copy.deepcopy(value)
    return out


def _filled(behavior: dict, downscale_stabilization: float) -> dict:
    """``behavior`` itself when every field is set (the usual, already defaulted case), else
    :func:`default_behavior` of it: the HPA as the API server stores it has no scale-down window."""
    for direction, defaults in _DEFAULT_RULES.items():
        rules = behavior.get(direction)
        if not rules or any(rules.get(key) is None for key in defaults):
            return default_behavior(behavior, downscale_stabilization=downscale_stabilization)
    return behavior


def behavior_dict(behavior: "Behavior | None") -> dict | None:
    """An ``Elastic.behavior`` config model as the defaulted dict :func:`normalize` takes; None stays
    None (the HPA's legacy path, as for an HPA without ``behavior``)."""
    if behavior is None:
        return None
    return default_behavior(behavior.model_dump(exclude_none=True))


def _change_in_period(period_seconds: float, events: Iterable[tuple[float, int]]) -> int:
    """``getReplicasChangePerPeriod``: replicas changed by events younger than the period."""
    return sum(abs(change) for age, change in events if age < period_seconds)


def _scale_up_limit(current: int, up_events, down_events, rules: dict) -> int:
    """``calculateScaleUpLimitWithScalingRules``."""
    select = rules["selectPolicy"]
    if select == "Disabled":
        return current
    pick, result = (min, MAX_INT32) if select == "Min" else (max, MIN_INT32)
    for policy in rules["policies"]:
        start = (current - _change_in_period(policy["periodSeconds"], up_events)
                 + _change_in_period(policy["periodSeconds"], down_events))
        if policy["type"] == "Pods":
            proposed = start + policy["value"]
        else:  # rounded up, "because the proposed change might not increase the replica count"
            proposed = _int32(math.ceil(float(start) * (1 + float(policy["value"]) / 100)))
        result = pick(result, proposed)
    return result


def _scale_down_limit(current: int, up_events, down_events, rules: dict) -> int:
    """``calculateScaleDownLimitWithBehaviors``; a Percent policy truncates the count that stays."""
    select = rules["selectPolicy"]
    if select == "Disabled":
        return current
    pick, result = (max, MIN_INT32) if select == "Min" else (min, MAX_INT32)
    for policy in rules["policies"]:
        start = (current - _change_in_period(policy["periodSeconds"], up_events)
                 + _change_in_period(policy["periodSeconds"], down_events))
        if policy["type"] == "Pods":
            proposed = start - policy["value"]
        else:
            proposed = int(float(start) * (1 - float(policy["value"]) / 100))  # Go int32(): toward zero
        result = pick(result, proposed)
    return result


def _stabilize_with_behavior(current: int, desired: int, behavior: dict,
                             recommendations: Iterable[tuple[float, int]]) -> tuple[int, str]:
    """``stabilizeRecommendationWithBehaviors``: clamp ``current`` between the lowest recommendation
    of the scale-up window and the highest of the scale-down window (both include ``desired``)."""
    up_window = behavior["scaleUp"]["stabilizationWindowSeconds"]
    down_window = behavior["scaleDown"]["stabilizationWindowSeconds"]
    up, down = desired, desired
    for age, replicas in recommendations:
        if age < up_window:
            up = min(replicas, up)
        if age < down_window:
            down = max(replicas, down)
    stabilized = min(max(current, up), down)
    return stabilized, "ScaleUpStabilized" if desired >= current else "ScaleDownStabilized"


def _convert_with_behavior_rate(current: int, desired: int, min_replicas: int, max_replicas: int,
                                behavior: dict, up_events, down_events) -> tuple[int, str]:
    """``convertDesiredReplicasWithBehaviorRate``: the policies' rate, then min/max, per direction."""
    if desired > current:
        limit = max(_scale_up_limit(current, up_events, down_events, behavior["scaleUp"]), current)
        allowed, reason = (limit, "ScaleUpLimit") if max_replicas > limit else (max_replicas, "TooManyReplicas")
        if desired > allowed:
            return allowed, reason
    elif desired < current:
        limit = min(_scale_down_limit(current, up_events, down_events, behavior["scaleDown"]), current)
        allowed, reason = (limit, "ScaleDownLimit") if min_replicas < limit else (min_replicas, "TooFewReplicas")
        if desired < allowed:
            return allowed, reason
    return desired, "DesiredWithinRange"


def _stabilize_legacy(desired: int, recommendations: Iterable[tuple[float, int]], window: float) -> int:
    """``stabilizeRecommendation``: the highest recommendation of the downscale window."""
    return max([desired] + [r for age, r in recommendations if not age > window])


def _convert_with_rules(current: int, desired: int, min_replicas: int, max_replicas: int) -> tuple[int, str]:
    """``convertDesiredReplicasWithRules`` with ``calculateScaleUpLimit`` = max(2 × current, 4)."""
    scale_up_limit = int(max(SCALE_UP_LIMIT_FACTOR * float(current), SCALE_UP_LIMIT_MINIMUM))
    if max_replicas > scale_up_limit:
        allowed, reason = scale_up_limit, "ScaleUpLimit"
    else:
        allowed, reason = max_replicas, "TooManyReplicas"
    if desired < min_replicas:
        return min_replicas, "TooFewReplicas"
    if desired > allowed:
        return allowed, reason
    return desired, "DesiredWithinRange"


def normalize_explained(current_replicas: int, recommended: int, *, min_replicas: int, max_replicas: int,
                        behavior: dict | None, recommendations: list[tuple[float, int]],
                        scale_up_events: list[tuple[float, int]],
                        scale_down_events: list[tuple[float, int]],
                        downscale_stabilization: float = DOWNSCALE_STABILIZATION_SECONDS) -> tuple[int, str]:
    """:func:`normalize`'s replicas and the condition reason of the step that changed
    ``recommended``: "" when none did, else ``ScaleUpStabilized``/``ScaleDownStabilized`` (the
    stabilization window), ``ScaleUpLimit``/``ScaleDownLimit`` (the rate: a policy, or the legacy
    max(2 × current, 4)), ``TooManyReplicas``/``TooFewReplicas`` (max/min). The last step that
    changed the number names it.

    ``reconcileAutoscaler`` runs first: a target at zero with ``min_replicas > 0`` is not scaled
    (``ScalingDisabled``, replicas stay 0); one above max goes to max, one below min to min,
    without stabilization or policies.

    ``downscale_stabilization`` is the controller's ``--horizontal-pod-autoscaler-downscale-stabilization``:
    the legacy window, and the scale-down window of a ``behavior`` that sets none.
    """
    if not 0 <= min_replicas <= max_replicas:
        raise ValueError(f"min_replicas, max_replicas: {min_replicas}, {max_replicas} need 0 ≤ min ≤ max")
    if current_replicas == 0 and min_replicas != 0:
        return 0, "ScalingDisabled"
    if current_replicas > max_replicas:
        return max_replicas, "TooManyReplicas"
    if current_replicas < min_replicas:
        return min_replicas, "TooFewReplicas"
    if behavior is None:
        stabilized = _stabilize_legacy(recommended, recommendations, downscale_stabilization)
        stab_reason = "ScaleDownStabilized"
        desired, limit_reason = _convert_with_rules(current_replicas, stabilized, min_replicas, max_replicas)
    else:
        behavior = _filled(behavior, downscale_stabilization)
        stabilized, stab_reason = _stabilize_with_behavior(current_replicas, recommended, behavior, recommendations)
        desired, limit_reason = _convert_with_behavior_rate(current_replicas, stabilized, min_replicas, max_replicas,
                                                            behavior, scale_up_events, scale_down_events)
    if desired != stabilized:
        return desired, limit_reason
    return desired, stab_reason if stabilized != recommended else ""


def normalize(current_replicas: int, recommended: int, *, min_replicas: int, max_replicas: int,
              behavior: dict | None, recommendations: list[tuple[float, int]],
              scale_up_events: list[tuple[float, int]], scale_down_events: list[tuple[float, int]],
              downscale_stabilization: float = DOWNSCALE_STABILIZATION_SECONDS) -> int:
    """The replicas the HPA sets for ``recommended``: stabilization over earlier recommendations,
    then the ``behavior`` policies with ``selectPolicy`` (or, with ``behavior`` None, the legacy
    downscale window and scale-up cap max(2 × current, 4)), then min/max. ``behavior`` uses the
    autoscaling/v2 field names; unset fields are filled as upstream fills them
    (:func:`default_behavior`), so the HPA's behavior as the API server stores it can be passed. See
    :func:`normalize_explained` for which step limited it."""
    return normalize_explained(current_replicas, recommended, min_replicas=min_replicas, max_replicas=max_replicas,
                               behavior=behavior, recommendations=recommendations,
                               scale_up_events=scale_up_events, scale_down_events=scale_down_events,
                               downscale_stabilization=downscale_stabilization)[0]


def record_scale_event(events: list[tuple[float, int]], now: float, change: int,
                       behavior: dict | None) -> list[tuple[float, int]]:
    """``storeScaleEvent``: the scale events ``(timestamp, replicas changed: + added, − removed)``
    after a pass at ``now`` that changed the scale by ``change``, in upstream's slot order.

    As upstream keeps them: the legacy path (``behavior`` None) keeps none; otherwise the event
    takes the slot of the last event of its direction older than that direction's longest policy
    period (``markScaleEventsOutdated``), else a new one. So an old event stays until one of its
    own direction reuses its slot, and the periods of the *other* direction see only what stayed:
    with scale-down policies of 2 s, a scale-up's 15 s period counts at most the last scale-down
    or two, not every one of the 15 s. The list stays as short as upstream's (no pruning, which
    would change which slot is reused). ``behavior`` may be the HPA's as stored (unset fields are
    filled as upstream fills them)."""
    if behavior is None or change == 0:
        return list(events)
    rules = _filled(behavior, DOWNSCALE_STABILIZATION_SECONDS)["scaleUp" if change > 0 else "scaleDown"]
    longest = max([float(p["periodSeconds"]) for p in rules.get("policies") or ()] or [0.0])
    out = list(events)
    outdated = [i for i, (t, c) in enumerate(out) if (c > 0) == (change > 0) and now - t > longest]
    if outdated:
        out[outdated[-1]] = (now, change)
    else:
        out.append((now, change))
    return out


def event_ages(events: list[tuple[float, int]], now: float) -> dict[str, list[tuple[float, int]]]:
    """``events`` as kept by :func:`record_scale_event`, as :func:`normalize` takes them at ``now``:
    ``scale_up_events`` and ``scale_down_events``, ``(age, replicas)`` each."""
    return {"scale_up_events": [(now - t, c) for t, c in events if c > 0],
            "scale_down_events": [(now - t, -c) for t, c in events if c < 0]}


def recommendation_window(behavior: dict | None) -> float:
    """How long a recommendation matters: the longest stabilization window of a filled
    ``behavior``; the legacy path's downscale window without one."""
    if behavior is None:
        return float(DOWNSCALE_STABILIZATION_SECONDS)
    return max(float(r.get("stabilizationWindowSeconds") or 0) for r in (behavior["scaleUp"], behavior["scaleDown"]))


def tolerances(behavior: dict | None, tolerance: float = DEFAULT_TOLERANCE) -> tuple[float, float]:
    """(scale-up, scale-down) tolerance of ``behavior`` (``tolerancesForHpa``): a direction's own
    when it sets one, else the controller's ``tolerance`` (``--horizontal-pod-autoscaler-tolerance``)."""
    def own(direction: str) -> float:
        value = ((behavior or {}).get(direction) or {}).get("tolerance")
        return tolerance if value is None else value

    return own("scaleUp"), own("scaleDown")
