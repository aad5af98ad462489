"""The scale events the HPA keeps between syncs (``storeScaleEvent``'s slots), and what they change."""

from __future__ import annotations

from crossdock.queue.autoscale.hpa import default_behavior, event_ages, normalize, recommend, record_scale_event

# scaleUp: the default policies (4 pods or 100 % per 15 s); scaleDown: 1 pod per 2 s
UNSET = default_behavior({"scaleUp": {"tolerance": 0.06},
                          "scaleDown": {"policies": [{"type": "Pods", "value": 1, "periodSeconds": 2}]}},
                         downscale_stabilization=3)


def test_an_event_reuses_the_last_outdated_slot_of_its_direction():
    events = record_scale_event([], 0.0, 4, UNSET)
    events = record_scale_event(events, 1.0, -1, UNSET)
    events = record_scale_event(events, 3.0, -1, UNSET)  # the first scale-down is 2 s old: not outdated yet
    assert events == [(0.0, 4), (1.0, -1), (3.0, -1)]
    events = record_scale_event(events, 5.5, -2, UNSET)  # both are older than 2 s: the last one's slot
    assert events == [(0.0, 4), (1.0, -1), (5.5, -2)]
    events = record_scale_event(events, 10.0, 3, UNSET)  # the +4 is 10 s old, within the up period: appended
    assert events == [(0.0, 4), (1.0, -1), (5.5, -2), (10.0, 3)]
    events = record_scale_event(events, 25.5, 1, UNSET)  # both ups are older than 15 s: the later's slot
    assert events == [(0.0, 4), (1.0, -1), (5.5, -2), (25.5, 1)]


def test_the_legacy_path_and_no_change_keep_nothing_new():
    assert record_scale_event([], 0.0, 3, None) == []
    assert record_scale_event([(0.0, 4)], 100.0, 0, UNSET) == [(0.0, 4)]


def test_a_scale_up_counts_only_the_scale_downs_that_kept_their_slot():
    # The syncs of a CI run of the HPA differential test against kube-controller-manager 1.37.2:
    # 1 → 5 at t=3.5, then 5 → 4 → 3 → 2 one pod per 2 s, then a backlog of 60 (6 wanted) at
    # t=18.2, while the +4 is still within its 15 s period. The controller set 3: of the three
    # scale-downs only the last kept its slot, so the period started at 2 − 4 + 1 = −1 and the
    # Pods policy allowed −1 + 4 = 3. Counting every scale-down (start 2 − 4 + 3 = 1) gives 5.
    events: list[tuple[float, int]] = []
    current = 1
    for at, replicas in [(3.5, 5), (11.4, 4), (13.5, 3), (15.6, 2)]:
        events = record_scale_event(events, at, replicas - current, UNSET)
        current = replicas
    assert events == [(3.5, 4), (15.6, -1)]
    now = 18.2
    raw = recommend(current, 60, 10, target_type="AverageValue", scale_up_tolerance=0.06, scale_down_tolerance=0.1)

    def step(kept: list[tuple[float, int]]) -> int:
        return normalize(current, raw, min_replicas=1, max_replicas=12, behavior=UNSET, recommendations=[],
                         **event_ages(kept, now))

    assert raw == 6 and step(events) == 3
    assert step([(3.5, 4), (11.4, -1), (13.5, -1), (15.6, -1)]) == 5
