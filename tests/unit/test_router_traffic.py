"""The router's decisions without sockets: which replica gets a request, which are drained, and
the window its metrics come from (crossdock/workers/traffic.py)."""

from __future__ import annotations

import pytest

from crossdock.workers.traffic import Upstream, Window, pick, to_drain


def up(replica: int, in_flight: int = 0, ready: bool = True, draining: bool = False, drained: bool = False,
       last_pick: int = 0) -> Upstream:
    return Upstream(100 + replica, 1, replica, "127.0.0.1", 9000 + replica, ready=ready, draining=draining,
                    drained=drained, in_flight=in_flight, last_pick=last_pick)


@pytest.mark.parametrize("ups, expected", [
    ([up(0, 3), up(1, 1), up(2, 2)], 1),
    ([up(0, 0, ready=False), up(1, 5)], 1),
    ([up(0, 0, draining=True), up(1, 5)], 1),
    ([up(0, 0, drained=True), up(1, 5)], 1),
    ([up(0, 2, last_pick=9), up(1, 2, last_pick=3)], 1),
    ([up(0, 1), up(1, 1)], 0),
    ([up(0, ready=False), up(1, draining=True)], None),
    ([], None),
], ids=["least-outstanding", "skips-unready", "skips-draining", "skips-drained", "tie-picked-longest-ago",
        "tie-lowest-replica", "none-serving", "empty"])
def test_pick(ups, expected):
    chosen = pick(ups)
    assert (chosen.replica if chosen else None) == expected


def test_pick_excludes_tried():
    ups = [up(0, 0), up(1, 4)]
    assert pick(ups, frozenset({ups[0].key})).replica == 1
    assert pick(ups, frozenset({u.key for u in ups})) is None


def test_equal_replicas_share_requests_in_turn():
    ups = [up(0), up(1), up(2)]
    order = []
    for n in range(1, 7):
        chosen = pick(ups)
        chosen.last_pick = n
        order.append(chosen.replica)
        if n == 3:
            ups.append(up(3))  # a new replica takes its turn, not every request until it caught up
    assert order == [0, 1, 2, 3, 0, 1]


def test_drained_only_when_nothing_in_flight_and_once():
    ups = [up(0, 2, draining=True), up(1, 0, draining=True), up(2, 0, draining=True, drained=True), up(3, 0)]
    assert [u.replica for u in to_drain(ups)] == [1]
    ups[0].in_flight = 0
    assert [u.replica for u in to_drain(ups)] == [0, 1]


def test_window_rate_counts_arrivals_of_the_window():
    w = Window(seconds=10, started=0.0)
    for i in range(200):  # 20 QPS for 10 s on two replicas
        w.arrive(i * 0.05, i % 2)
    ups = [up(0), up(1)]
    s = w.stats(10.0, ups)
    assert s.qps == pytest.approx(20.0)
    assert s.replica_qps == {0: pytest.approx(10.0), 1: pytest.approx(10.0)}
    later = w.stats(15.0, ups)  # the first half slid out
    assert later.qps == pytest.approx(10.0)
    assert w.stats(25.0, ups).qps == 0


def test_window_rate_before_a_whole_window_is_over_the_time_watched():
    w = Window(seconds=10, started=100.0)
    for i in range(40):
        w.arrive(100 + i * 0.05, 0)  # 20 QPS for 2 s
    assert w.stats(102.0, [up(0)]).qps == pytest.approx(20.0)


def test_window_p95_is_nearest_rank_of_completions():
    w = Window(seconds=5, started=0.0)
    for i in range(100):
        w.finish(1.0, (i + 1) / 1000)  # 1..100 ms
    s = w.stats(1.0, [])
    assert s.p95_seconds == pytest.approx(0.095)
    assert Window(5, 0.0).stats(1.0, []).p95_seconds is None


def test_window_in_flight_per_replica_leaves_out_drained():
    ups = [up(0, 3), up(1, 0, draining=True, drained=True)]
    assert Window(5, 0.0).stats(1.0, ups).in_flight == {0: 3}
