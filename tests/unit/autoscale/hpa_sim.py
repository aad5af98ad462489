"""A controller loop for tests: the history kube-controller-manager keeps between syncs
(``recordInitialRecommendation``, ``stabilizeRecommendation*`` storing the unstabilized
recommendation, ``storeScaleEvent``), kept as timestamps and handed to the pure functions as ages."""

from __future__ import annotations

from dataclasses import dataclass, field

from crossdock.queue.autoscale import hpa, keda

HISTORY_SECONDS = 3600 + 1800  # the longest window and the longest policy period allowed


@dataclass
class Loop:
    replicas: int
    behavior: dict | None = None
    min_replicas: int = 1
    max_replicas: int = 10_000
    recs: list[tuple[float, int]] = field(default_factory=list)
    events: list[tuple[float, int]] = field(default_factory=list)  # (time, ± change), storeScaleEvent's slots
    last_active: float | None = None
    seeded: bool = False

    def _ages(self, items, now):
        return [(now - t, v) for t, v in items if now - t <= HISTORY_SECONDS]

    def _record(self, now: float, recommended: int | None, new: int) -> None:
        self.recs = [(t, r) for t, r in self.recs if now - t <= HISTORY_SECONDS]
        if recommended is not None:
            self.recs.append((now, recommended))
        self.events = hpa.record_scale_event(self.events, now, new - self.replicas, self.behavior)
        self.replicas = new

    def hpa_pass(self, now: float, metric: float, target: float, target_type: str = "AverageValue") -> tuple[int, str]:
        if not self.seeded:
            self.recs.append((now, self.replicas))
            self.seeded = True
        up, down = hpa.tolerances(self.behavior)
        recommended = hpa.recommend(self.replicas, metric, target, target_type=target_type,
                                    scale_up_tolerance=up, scale_down_tolerance=down)
        new, reason = hpa.normalize_explained(
            self.replicas, recommended, min_replicas=self.min_replicas, max_replicas=self.max_replicas,
            behavior=self.behavior, recommendations=self._ages(self.recs, now), **hpa.event_ages(self.events, now))
        self._record(now, recommended, new)
        return new, reason

    def keda_pass(self, now: float, metric: float, per_replica: float, activation: float,
                  cooldown: float) -> keda.FleetStep:
        if not self.seeded:
            self.recs.append((now, self.replicas))
            self.seeded = True
        step = keda.scale_pass(
            metric=metric, per_replica=per_replica, activation=activation, cooldown_seconds=cooldown,
            min_replicas=self.min_replicas, max_replicas=self.max_replicas, current_replicas=self.replicas,
            last_active=self.last_active, now=now, behavior=self.behavior,
            recommendations=self._ages(self.recs, now), **hpa.event_ages(self.events, now))
        if step.active:
            self.last_active = now
        # at zero replicas the HPA KEDA generated is disabled (ScalingDisabled) and records nothing
        self._record(now, step.recommended if self.replicas > 0 else None, step.replicas)
        return step


def direction_changes(series: list[int]) -> int:
    """How often a sequence of replica counts turns from growing to shrinking or back."""
    signs = [1 if b > a else -1 for a, b in zip(series, series[1:]) if b != a]
    return sum(1 for a, b in zip(signs, signs[1:]) if a != b)
