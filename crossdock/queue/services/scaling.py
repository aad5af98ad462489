"""How many replicas a service wants: Kubernetes HPA's arithmetic over its traffic.

One proposal per metric, each :func:`crossdock.queue.autoscale.hpa.recommend`:

- ``qps``: ``AverageValue`` with ``target_qps`` per replica → ``ceil(qps / target_qps)`` outside
  the tolerance;
- ``p95``: ``Value`` with the ``p95_ms`` objective → ``ceil(p95 / objective × ready)``;

the recommendation is the largest proposal (the HPA's rule for several metrics), then
:func:`~crossdock.queue.autoscale.hpa.normalize_explained` applies the stabilization windows
(the spec's ``scale_up/down_stabilization_seconds``), the default rate policies (scale up by
max(4 pods, 100 %) per 15 s, down by up to 100 % per 15 s) and ``min/max_replicas``. A manual
override wins over all of it until cleared. No traffic sample (or a stale one): the replicas stay.
"""

from __future__ import annotations

from dataclasses import dataclass

from crossdock.queue.autoscale import hpa
from crossdock.queue.serving import ServiceMetrics, ServiceSpec, ServiceStatus

STALE_SAMPLE_SECONDS = 60.0
"""A traffic sample older than this is no sample: the source is away, the replicas stay."""


@dataclass(frozen=True)
class Scale:
    recommended: int
    desired: int
    limited_by: str
    """The HPA step that changed the recommendation ("" none; ``Override``; ``NoMetrics``; …)."""
    message: str
    recommendations: list[tuple[float, int]]
    scale_events: list[tuple[float, int]]


def behavior(spec: ServiceSpec) -> dict:
    return hpa.default_behavior({"scaleUp": {"stabilizationWindowSeconds": spec.scale_up_stabilization_seconds},
                                 "scaleDown": {"stabilizationWindowSeconds": spec.scale_down_stabilization_seconds}})


def current_replicas(spec: ServiceSpec, status: ServiceStatus) -> int:
    """The scale the last pass set (the HPA's ``spec.replicas``); a new service starts at its minimum."""
    current = status.desired if status.updated_at else spec.min_replicas
    return spec.min_replicas if current == 0 and spec.min_replicas > 0 else current


def proposals(spec: ServiceSpec, metrics: ServiceMetrics, current: int, ready: int, rules: dict) -> dict[str, int]:
    up, down = hpa.tolerances(rules)
    out: dict[str, int] = {}
    if spec.target_qps is not None:
        out["qps"] = hpa.recommend(current, metrics.qps, spec.target_qps, target_type="AverageValue",
                                   scale_up_tolerance=up, scale_down_tolerance=down)
    if spec.p95_ms is not None and metrics.p95_seconds is not None:
        out["p95"] = hpa.recommend(current, metrics.p95_seconds * 1000, spec.p95_ms, target_type="Value",
                                   ready_replicas=ready or current, scale_up_tolerance=up, scale_down_tolerance=down)
    return out


def desired_replicas(spec: ServiceSpec, status: ServiceStatus, metrics: ServiceMetrics | None, override: int | None,
                     ready: int, now: float) -> Scale:
    rules = behavior(spec)
    window = hpa.recommendation_window(rules)
    current = current_replicas(spec, status)
    history = [(t, r) for t, r in status.recommendations if now - t <= window]
    events = list(status.scale_events)
    if override is not None:
        return Scale(override, override, "Override", f"set to {override} by hand (scale --auto clears it)",
                     history, events)
    fresh = metrics is not None and now - metrics.at <= STALE_SAMPLE_SECONDS
    if not spec.autoscaled() or not fresh:
        desired = min(max(current, spec.min_replicas), spec.max_replicas)
        why = "no traffic target" if not spec.autoscaled() else "no recent traffic sample"
        return Scale(current, desired, "NoMetrics" if spec.autoscaled() else "",
                     f"{why}: {desired} replica(s) (min {spec.min_replicas}, max {spec.max_replicas})", history, events)
    assert metrics is not None
    asked = proposals(spec, metrics, current, ready, rules)
    recommended = max(asked.values()) if asked else current
    seeded = history or [(now, current)]  # upstream seeds the first pass with the current scale
    desired, limited = hpa.normalize_explained(
        current, recommended, min_replicas=spec.min_replicas, max_replicas=spec.max_replicas, behavior=rules,
        recommendations=[(now - t, r) for t, r in seeded], **hpa.event_ages(events, now))
    parts = [f"{metrics.qps:g} qps / {spec.target_qps:g} per replica → {asked['qps']}"] if "qps" in asked else []
    if "p95" in asked:
        parts.append(f"p95 {metrics.p95_seconds * 1000:.0f} ms / {spec.p95_ms:g} ms objective → {asked['p95']}")
    message = "; ".join(parts) + f": {recommended} recommended"
    if desired != recommended:
        message += f", {desired} after {limited}"
    kept = seeded + [(now, recommended)] if current else seeded
    if desired != current and current and desired:
        events = hpa.record_scale_event(events, now, desired - current, rules)
    return Scale(recommended, desired, limited, message, kept, events)
