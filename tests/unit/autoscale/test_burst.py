"""Bursting: one pool per job, the earliest expected start, with hysteresis."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from crossdock.queue.autoscale.burst import expected_start, route, route_all

ORDER = ["slurm", "k8s"]


@pytest.mark.parametrize("starts, current, margin, want", [
    ({"slurm": 600, "k8s": 30}, None, 60, "k8s"),           # much sooner elsewhere: burst
    ({"slurm": 80, "k8s": 30}, None, 60, "slurm"),          # 50 s sooner is inside the margin
    ({"slurm": 90, "k8s": 30}, None, 60, "k8s"),            # exactly the margin
    ({"slurm": 30, "k8s": 31}, "k8s", 60, "k8s"),           # stays where it was sent
    ({"slurm": None, "k8s": 500}, None, 60, "k8s"),         # the incumbent has no estimate
    ({"slurm": None, "k8s": None}, "k8s", 60, "k8s"),       # nobody knows: stay
    ({"slurm": None, "k8s": None}, None, 60, "slurm"),      # nobody knows: the first pool
    ({"slurm": 10, "k8s": 10}, None, 0, "slurm"),           # equal: no move even without a margin
    ({"slurm": float("inf"), "k8s": 100}, None, 60, "k8s"),
], ids=["burst", "inside-margin", "at-margin", "sticky", "unknown-incumbent", "all-unknown", "first",
        "equal", "infinite"])
def test_route(starts, current, margin, want):
    assert route(starts, ORDER, current=current, margin=margin).pool == want


def test_expected_start():
    assert expected_start(100, 2.0) == 50
    assert expected_start(100, 2.0, provision_seconds=30) == 80
    assert expected_start(100, 0.0) is None
    assert expected_start(100, 0.0, provision_seconds=45) == 45
    assert expected_start(100, 0.0, fits_now=True) == 0


def test_route_all_gives_each_job_one_pool():
    routes = route_all({1: {"slurm": 900, "k8s": 10}, 2: {"slurm": 5, "k8s": 10}}, ORDER, current={2: "k8s"})
    assert {j: r.pool for j, r in routes.items()} == {1: "k8s", 2: "k8s"}


def test_a_queue_without_pools_is_an_error():
    with pytest.raises(ValueError, match="order"):
        route({}, [])


@given(st.floats(0, 3600), st.floats(0, 3600), st.integers(0, 10_000))
def test_no_flapping_under_jitter_below_half_the_margin(slurm, k8s, seed):
    """Seen differences span less than two margins: a job may move once, never back."""
    margin, rnd, current, moves = 60.0, random.Random(seed), None, 0
    for _ in range(50):
        starts = {"slurm": slurm + rnd.uniform(-29, 29), "k8s": k8s + rnd.uniform(-29, 29)}
        chosen = route(starts, ORDER, current=current, margin=margin).pool
        moves += current is not None and chosen != current
        current = chosen
    assert moves <= 1


@given(st.dictionaries(st.sampled_from(ORDER), st.one_of(st.none(), st.floats(0, 1e6)), max_size=2),
       st.sampled_from([None, *ORDER]), st.floats(0, 600))
def test_the_choice_is_a_queue_pool_and_never_later_than_staying(starts, current, margin):
    r = route(starts, ORDER, current=current, margin=margin)
    assert r.pool in ORDER
    incumbent = current or ORDER[0]
    if starts.get(incumbent) is not None and r.pool != incumbent:
        assert starts[incumbent] - starts[r.pool] >= margin
