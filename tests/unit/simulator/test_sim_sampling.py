"""Arrival sequences: deterministic for a seed, within the tune target, both modes."""

from __future__ import annotations

import numpy as np
import pytest
from sim_builders import pods

from crossdock.sim.sampling import sample_workload

WORKLOAD = pods([(1000, 1, 500), (2000, 1, 1000), (500, 0, 0), (4000, 2, 1000), (1000, 1, 250)])
CLUSTER = 10_000  # 10 GPUs


@pytest.mark.parametrize("mode", ["trace", "uniform"])
def test_same_seed_same_sequence_other_seed_other_sequence(mode):
    a = sample_workload(WORKLOAD, CLUSTER, 1.3, np.random.default_rng(7), mode)
    b = sample_workload(WORKLOAD, CLUSTER, 1.3, np.random.default_rng(7), mode)
    c = sample_workload(WORKLOAD, CLUSTER, 1.3, np.random.default_rng(8), mode)
    assert a.tolist() == b.tolist()
    assert a.tolist() != c.tolist()


@pytest.mark.parametrize("tune", [0.5, 1.0, 1.3, 2.0])
def test_uniform_stops_before_the_target(tune):
    seq = sample_workload(WORKLOAD, CLUSTER, tune, np.random.default_rng(1), "uniform")
    total = int(WORKLOAD.gpu_request_milli[seq].sum())
    assert total <= tune * CLUSTER
    # the draw that stopped it would have crossed the target: adding the largest pod crosses it
    assert total + 2000 > tune * CLUSTER


def test_trace_mode_keeps_every_pod_then_tops_up():
    seq = sample_workload(WORKLOAD, CLUSTER, 1.3, np.random.default_rng(3), "trace")
    assert sorted(seq[:5].tolist()) == [0, 1, 2, 3, 4]
    request = WORKLOAD.gpu_request_milli
    assert int(request[seq].sum()) <= 1.3 * CLUSTER + 1000  # the artifact checks the per-GPU share


def test_trace_mode_removes_pods_when_the_list_is_too_large():
    seq = sample_workload(WORKLOAD, CLUSTER, 0.3, np.random.default_rng(3), "trace")
    assert int(WORKLOAD.gpu_request_milli[seq].sum()) <= 3000
    assert len(set(seq.tolist())) == len(seq)


@pytest.mark.parametrize("bad", [dict(tune=-1.0), dict(mode="zipf")])
def test_bad_arguments_are_refused(bad):
    args = dict(tune=1.3, mode="trace") | bad
    with pytest.raises(ValueError):
        sample_workload(WORKLOAD, CLUSTER, args["tune"], np.random.default_rng(0), args["mode"])
