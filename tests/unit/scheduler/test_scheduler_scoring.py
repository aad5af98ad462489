"""node_score against kube-scheduler's integers.

Cases marked ``k8s:`` copy inputs and expected values from kube-scheduler's own tests
(pkg/scheduler/framework/plugins/noderesources/*_test.go); requested already includes the pod.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crossdock.queue.scheduler.scoring import broken_linear, node_score, node_scores, scale_shape

CM = {"cpu": 1, "memory": 1}
GPU = "nvidia.com/gpu"
EXT = "intel.com/foo"


def _node(cpu, mem, **ext):
    d = {"cpu": cpu, "memory": mem}
    d.update({k.replace("_", "/").replace("intel/com", "intel.com").replace("nvidia/com", "nvidia.com"): v
              for k, v in ext.items()})
    return d


MOST = [
    # id, allocatable, requested-on-node, request, weights, expected
    ("k8s:nothing-requested", _node(4000, 10000), {}, {}, CM, 0),
    ("k8s:differently-sized-node1", _node(4000, 10000), {}, {"cpu": 3000, "memory": 5000}, CM, 62),
    ("k8s:differently-sized-node2", _node(6000, 10000), {}, {"cpu": 3000, "memory": 5000}, CM, 50),
    ("k8s:scheduled-no-request-node1", _node(10000, 20000), {"cpu": 6000, "memory": 0}, {}, CM, 30),
    ("k8s:scheduled-no-request-node2", _node(10000, 20000), {"cpu": 6000, "memory": 5000}, {}, CM, 42),
    ("k8s:scheduled-and-requested-node1", _node(10000, 20000), {"cpu": 3000}, {"cpu": 3000, "memory": 5000}, CM, 42),
    ("k8s:scheduled-and-requested-node2", _node(10000, 20000), {"cpu": 3000, "memory": 5000},
     {"cpu": 3000, "memory": 5000}, CM, 55),
    ("k8s:equal-capacity-node1", _node(5000, 10000), {}, {"cpu": 5000, "memory": 9000}, CM, 95),
    ("k8s:equal-capacity-node2", _node(10000, 9000), {}, {"cpu": 5000, "memory": 9000}, CM, 75),
    ("k8s:weighted-node1", _node(4000, 10000), {}, {"cpu": 3000, "memory": 5000}, {"memory": 2, "cpu": 1}, 58),
    ("k8s:weighted-node2", _node(6000, 10000), {}, {"cpu": 3000, "memory": 5000}, {"memory": 2, "cpu": 1}, 50),
    ("k8s:over-capacity-capped", _node(250, 1000 * 2**20), {"cpu": 200, "memory": 400 * 2**20},
     {"cpu": 100, "memory": 200 * 2**20}, CM, 80),
    ("k8s:nonzero-node2", _node(250, 1000 * 2**20), {}, {"cpu": 100, "memory": 200 * 2**20}, CM, 30),
    ("k8s:bypass-extended-not-requested", {"cpu": 6000, "memory": 10000, EXT: 4}, {},
     {"cpu": 3000, "memory": 5000}, {"cpu": 1, "memory": 1, EXT: 1}, 50),
    ("k8s:honor-extended-node1", {"cpu": 6000, "memory": 10000, EXT: 4}, {},
     {"cpu": 3000, "memory": 5000, EXT: 2}, {"cpu": 1, "memory": 1, EXT: 1}, 50),
    ("k8s:honor-extended-node2", {"cpu": 6000, "memory": 10000, EXT: 10}, {},
     {"cpu": 3000, "memory": 5000, EXT: 2}, {"cpu": 1, "memory": 1, EXT: 1}, 40),
    ("k8s:node-without-resource", {"cpu": 6000, "memory": 10000}, {}, {"cpu": 3000, "memory": 4000},
     {EXT: 2, "cpu": 1, "memory": 1}, 45),
    ("gpu-requested-counts", {"cpu": 8000, "memory": 1000, GPU: 8}, {GPU: 6}, {"cpu": 0, "memory": 0, GPU: 2},
     {"cpu": 1, "memory": 1, GPU: 1}, 33),
    ("zero-allocatable-skipped", {"cpu": 0, "memory": 1000}, {}, {"cpu": 500, "memory": 500}, CM, 50),
    ("truncates-not-rounds", {"cpu": 3, "memory": 3}, {}, {"cpu": 2, "memory": 2}, CM, 66),
]


@pytest.mark.parametrize("alloc,requested,pod,weights,expected", [c[1:] for c in MOST], ids=[c[0] for c in MOST])
def test_most_allocated(alloc, requested, pod, weights, expected):
    assert node_score("most_allocated", alloc, requested, pod, weights) == expected


LEAST = [
    ("k8s:nothing-requested", _node(4000, 10000), {}, {}, CM, 100),
    ("k8s:differently-sized-node1", _node(4000, 10000), {}, {"cpu": 3000, "memory": 5000}, CM, 37),
    ("k8s:differently-sized-node2", _node(6000, 10000), {}, {"cpu": 3000, "memory": 5000}, CM, 50),
    ("k8s:scheduled-node1", _node(10000, 20000), {"cpu": 6000, "memory": 0}, {}, CM, 70),
    ("k8s:scheduled-node2", _node(10000, 20000), {"cpu": 6000, "memory": 5000}, {}, CM, 57),
    ("k8s:requested-exceeds-capacity", _node(4000, 10000), {"cpu": 3000, "memory": 5000},
     {"cpu": 3000, "memory": 0}, CM, 25),
    ("k8s:weighted", _node(4000, 10000), {}, {"cpu": 3000, "memory": 5000}, {"memory": 2, "cpu": 1}, 41),
    ("k8s:honor-extended-node2", {"cpu": 6000, "memory": 10000, EXT: 10}, {},
     {"cpu": 3000, "memory": 5000, EXT: 2}, {"cpu": 1, "memory": 1, EXT: 1}, 60),
    ("zero-allocatable-skipped", {"cpu": 0, "memory": 1000}, {}, {"cpu": 500, "memory": 250}, CM, 75),
]


@pytest.mark.parametrize("alloc,requested,pod,weights,expected", [c[1:] for c in LEAST], ids=[c[0] for c in LEAST])
def test_least_allocated(alloc, requested, pod, weights, expected):
    assert node_score("least_allocated", alloc, requested, pod, weights) == expected


DOWN = [(0, 10), (100, 0)]
UP1 = [(0, 0), (100, 1)]
RTCR = [
    ("k8s:nothing-requested", _node(4000, 10000), {}, {}, CM, DOWN, 100),
    ("k8s:differently-sized-node1-rounds-37.5-up", _node(4000, 10000), {}, {"cpu": 3000, "memory": 5000}, CM, DOWN, 38),
    ("k8s:differently-sized-node2", _node(6000, 10000), {}, {"cpu": 3000, "memory": 5000}, CM, DOWN, 50),
    ("k8s:single-extended-not-requested", {"cpu": 4000, "memory": 10000 * 2**20, EXT: 8}, {}, {}, {EXT: 1}, UP1, 0),
    ("k8s:single-extended-node1", {"cpu": 4000, "memory": 10000 * 2**20, EXT: 8}, {}, {EXT: 2}, {EXT: 1}, UP1, 2),
    ("k8s:single-extended-node2", {"cpu": 4000, "memory": 10000 * 2**20, EXT: 4}, {}, {EXT: 2}, {EXT: 1}, UP1, 5),
    ("k8s:single-extended-full", {"cpu": 4000, "memory": 10000 * 2**20, EXT: 4}, {EXT: 2}, {EXT: 2}, {EXT: 1}, UP1, 10),
    ("k8s:multi-extended-node1", {"intel.com/foo": 8, "intel.com/bar": 4}, {},
     {"intel.com/foo": 2, "intel.com/bar": 2}, {"intel.com/foo": 3, "intel.com/bar": 5}, UP1, 4),
    ("k8s:multi-extended-node2", {"intel.com/foo": 4, "intel.com/bar": 8}, {},
     {"intel.com/foo": 2, "intel.com/bar": 2}, {"intel.com/foo": 3, "intel.com/bar": 5}, UP1, 3),
    ("k8s:multi-extended-existing-node2", {"intel.com/foo": 4, "intel.com/bar": 8},
     {"intel.com/foo": 2, "intel.com/bar": 2}, {"intel.com/foo": 2, "intel.com/bar": 2},
     {"intel.com/foo": 3, "intel.com/bar": 5}, UP1, 7),
    ("k8s:multi-extended-more-node1", {"intel.com/foo": 8, "intel.com/bar": 4}, {},
     {"intel.com/foo": 4, "intel.com/bar": 2}, {"intel.com/foo": 3, "intel.com/bar": 5}, UP1, 5),
    ("over-capacity-scores-at-100", _node(1000, 1000), {"cpu": 900}, {"cpu": 500, "memory": 500}, CM,
     [(0, 0), (100, 10)], 75),
    ("zero-resource-score-left-out-of-mean", _node(1000, 1000), {}, {"cpu": 1000, "memory": 0}, CM,
     [(0, 0), (100, 10)], 100),
    ("go-truncation-toward-zero", _node(30, 30), {}, {"cpu": 10, "memory": 10}, CM, [(0, 10), (90, 0)], 64),
]


@pytest.mark.parametrize("alloc,requested,pod,weights,shape,expected", [c[1:] for c in RTCR],
                         ids=[c[0] for c in RTCR])
def test_requested_to_capacity_ratio(alloc, requested, pod, weights, shape, expected):
    assert node_score("requested_to_capacity_ratio", alloc, requested, pod, weights, shape) == expected


BALANCED = [
    ("k8s:nothing-requested", _node(4000, 10000), {}, {}, CM, 100),
    ("k8s:differently-sized-node1", _node(4000, 10000), {}, {"cpu": 3000, "memory": 5000}, CM, 87),
    ("k8s:differently-sized-node2", _node(6000, 10000), {}, {"cpu": 3000, "memory": 5000}, CM, 100),
    ("k8s:scheduled-node1", _node(10000, 20000), {"cpu": 6000}, {}, CM, 70),
    ("k8s:scheduled-node2", _node(10000, 20000), {"cpu": 6000, "memory": 5000}, {}, CM, 82),
    ("k8s:requested-node2", _node(10000, 20000), {"cpu": 3000, "memory": 5000}, {"cpu": 3000, "memory": 5000}, CM, 95),
    ("k8s:differently-sized-machines", _node(10000, 50000), {"cpu": 3000, "memory": 5000},
     {"cpu": 3000, "memory": 5000}, CM, 80),
    ("k8s:at-capacity-node1", _node(6000, 10000), {"cpu": 3000}, {"cpu": 3000}, CM, 50),
    ("k8s:at-capacity-node2", _node(6000, 10000), {"cpu": 3000, "memory": 5000}, {"cpu": 3000}, CM, 75),
    ("k8s:zero-node-resources", _node(0, 0), {"cpu": 6000}, {}, CM, 100),
    ("k8s:scalar-gpu-node1", {"cpu": 3500, "memory": 40000, GPU: 8}, {"cpu": 3000, "memory": 5000, GPU: 3},
     {"memory": 0, GPU: 1}, {"cpu": 1, "memory": 1, GPU: 1}, 70),
    ("k8s:scalar-gpu-node2", {"cpu": 3500, "memory": 40000, GPU: 8}, {"cpu": 3000, "memory": 5000},
     {"memory": 0, GPU: 1}, {"cpu": 1, "memory": 1, GPU: 1}, 65),
    ("k8s:node-without-scalar", {"cpu": 3500, "memory": 40000, GPU: 8}, {"cpu": 6000}, {},
     {"cpu": 1, GPU: 1}, 100),
]


@pytest.mark.parametrize("alloc,requested,pod,weights,expected", [c[1:] for c in BALANCED],
                         ids=[c[0] for c in BALANCED])
def test_balanced_allocation(alloc, requested, pod, weights, expected):
    assert node_score("balanced_allocation", alloc, requested, pod, weights) == expected


BROKEN_LINEAR = [  # k8s TestBrokenLinearFunction (shapes given already scaled)
    ([(10, 1), (90, 9)], [(-10, 1), (0, 1), (9, 1), (10, 1), (15, 1), (19, 1), (20, 2), (89, 8), (90, 9), (99, 9),
                          (100, 9), (110, 9)]),
    ([(0, 2), (40, 10), (100, 0)], [(-10, 2), (0, 2), (20, 6), (30, 8), (40, 10), (70, 5), (100, 0), (110, 0)]),
    ([(0, 2), (40, 2), (100, 2)], [(-10, 2), (0, 2), (20, 2), (30, 2), (40, 2), (70, 2), (100, 2), (110, 2)]),
]


@pytest.mark.parametrize("shape,points", BROKEN_LINEAR, ids=["k8s:case_0", "k8s:case_1", "k8s:case_2"])
def test_broken_linear_matches_kube(shape, points):
    assert [(p, broken_linear(shape, p)) for p, _ in points] == points


BAD = [
    ("weight-zero", "most_allocated", {"cpu": 0}, None),
    ("weight-negative", "least_allocated", {"memory": -1, "cpu": 1}, None),
    ("weight-over-100", "most_allocated", {"memory": 101}, None),
    ("weight-not-int", "most_allocated", {"cpu": 1.5}, None),
    ("weights-empty", "most_allocated", {}, None),
    ("balanced-weight-not-1", "balanced_allocation", {"cpu": 2, "memory": 1}, None),
    ("rtcr-weight-over-100", "requested_to_capacity_ratio", {"cpu": 101}, [(0, 0), (100, 10)]),
    ("shape-missing", "requested_to_capacity_ratio", CM, None),
    ("shape-empty", "requested_to_capacity_ratio", CM, []),
    ("shape-not-increasing", "requested_to_capacity_ratio", CM, [(50, 1), (50, 2)]),
    ("shape-decreasing", "requested_to_capacity_ratio", CM, [(60, 1), (50, 2)]),
    ("shape-utilization-over-100", "requested_to_capacity_ratio", CM, [(0, 1), (101, 2)]),
    ("shape-utilization-negative", "requested_to_capacity_ratio", CM, [(-1, 1)]),
    ("shape-score-over-10", "requested_to_capacity_ratio", CM, [(0, 11)]),
    ("shape-score-negative", "requested_to_capacity_ratio", CM, [(0, -1)]),
    ("unknown-strategy", "binpack", CM, None),
]


@pytest.mark.parametrize("strategy,weights,shape", [c[1:] for c in BAD], ids=[c[0] for c in BAD])
def test_invalid_arguments_raise_value_error(strategy, weights, shape):
    with pytest.raises(ValueError):
        node_score(strategy, _node(4000, 10000), {}, {"cpu": 1000}, weights, shape)


def test_scale_shape_multiplies_scores_by_ten():
    assert scale_shape([(0, 0), (50, 7), (100, 10)]) == [(0, 0), (50, 70), (100, 100)]


_res = st.integers(0, 10**6)


@settings(max_examples=150, deadline=None)
@given(alloc=st.lists(st.tuples(_res, _res, st.integers(0, 8)), min_size=1, max_size=6),
       used=st.lists(st.tuples(_res, _res, st.integers(0, 8)), min_size=6, max_size=6),
       req=st.tuples(st.integers(0, 10**5), st.integers(0, 10**5), st.integers(0, 2)),
       strategy=st.sampled_from(["most_allocated", "least_allocated", "requested_to_capacity_ratio",
                                 "balanced_allocation"]),
       weights=st.tuples(st.integers(1, 100), st.integers(1, 100), st.integers(1, 100)))
def test_vectorized_scores_equal_scalar_scores(alloc, used, req, strategy, weights):
    names = ["cpu", "memory", GPU]
    w = dict(zip(names, weights)) if strategy != "balanced_allocation" else dict.fromkeys(names, 1)
    shape = [(0, 10), (30, 3), (100, 0)] if strategy == "requested_to_capacity_ratio" else None
    n = len(alloc)
    a = {r: np.array([alloc[i][k] for i in range(n)], np.int64) for k, r in enumerate(names)}
    u = {r: np.array([used[i][k] for i in range(n)], np.int64) for k, r in enumerate(names)}
    request = dict(zip(names, req))
    many = node_scores(strategy, a, u, request, w, shape)
    for i in range(n):
        one = node_score(strategy, {r: int(a[r][i]) for r in names}, {r: int(u[r][i]) for r in names}, request, w, shape)
        assert many[i] == one
