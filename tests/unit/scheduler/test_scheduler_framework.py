"""The framework: plugins registered by name implement their extension points; profiles from config."""

from __future__ import annotations

import pytest
from sched_builders import NOW, config, job, node, running

from crossdock.queue.cycle import run_cycle
from crossdock.queue.scheduler.framework import (Code, FilterPlugin, PermitPlugin, PostFilterPlugin,
                                                 PreFilterPlugin, ReservePlugin, ScorePlugin, Status)
from crossdock.queue.config import SCORE_PLUGINS
from crossdock.queue.scheduler.profiles import profile_for
from crossdock.queue.scheduler.registry import (FILTERS, PERMITS, POST_FILTERS, PRE_FILTERS, REGISTRY, RESERVES,
                                                SOFT_TAINT_WEIGHT, create)
from crossdock.queue.snapshot import Snapshot

POINTS = [(FILTERS, FilterPlugin), (PRE_FILTERS, PreFilterPlugin), (RESERVES, ReservePlugin), (PERMITS, PermitPlugin),
          (POST_FILTERS, PostFilterPlugin),
          (("MostAllocated", "LeastAllocated", "RequestedToCapacityRatio", "BalancedAllocation", "GpuFragmentation"),
           ScorePlugin)]


@pytest.mark.parametrize("names,protocol", POINTS, ids=[p.__name__ for _, p in POINTS])
def test_registered_plugins_implement_their_extension_point(names, protocol):
    for name in names:
        plugin = create(name)
        assert isinstance(plugin, protocol), name
        assert plugin.name == name


def test_config_names_exactly_the_registered_score_plugins():
    # config validates plugin_weights against its own list, so that it imports no plugin
    assert sorted(SCORE_PLUGINS) == sorted(n for n, cls in REGISTRY.items() if hasattr(cls, "score"))


def test_unknown_plugin_is_a_value_error_naming_the_registered_ones():
    with pytest.raises(ValueError, match="registered: .*NodeResourcesFit"):
        create("NoSuchPlugin")


def test_status_codes_say_what_happens_next():
    assert Status().ok and Status(Code.SKIP).ok
    assert not Status(Code.UNSCHEDULABLE).ok and not Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE).ok


@pytest.mark.parametrize("placement,scores", [
    ("binpack", {"CrossdockGpu": 101, "RequestedToCapacityRatio": 1}),
    ("spread", {"LeastAllocated": 1}),
    ("most-requested", {"MostAllocated": 1}),
    ("balanced", {"BalancedAllocation": 1}),
])
def test_placement_names_the_score_plugins(placement, scores):
    # every placement also takes nodes with an untolerated PreferNoSchedule taint last
    assert {p.name: w for p, w in profile_for(placement).scores} == {**scores, "TaintToleration": SOFT_TAINT_WEIGHT}


def test_plugin_weights_reweight_or_switch_off_scores():
    prof = profile_for("binpack", {"CrossdockGpu": 0, "LeastAllocated": 3, "cpu": 5})
    assert {p.name: w for p, w in prof.scores} == {"RequestedToCapacityRatio": 1, "LeastAllocated": 3,
                                                  "TaintToleration": SOFT_TAINT_WEIGHT}


def test_resource_weights_from_plugin_weights_steer_placement():
    # a: CPU 50 % used, memory idle; b: memory 50 % used, CPU idle. Weighting memory picks b under most-requested.
    allocs = [running(8, "a", cpus=8, mem=0), running(9, "b", cpus=0, mem=32000)]
    for weights, expected in (({"cpu": 5, "memory": 1}, "a"), ({"cpu": 1, "memory": 5}, "b")):
        cfg = config(queues={"train": {"priority_class": "low", "pools": ["gpu"], "placement": "most-requested",
                                       "plugin_weights": weights}})
        r = run_cycle(Snapshot(nodes=(node("a"), node("b")), allocations=tuple(allocs)),
                      [job(1).cpus(1).mem(1000).build()], cfg, NOW)
        assert r.admitted[0].nodes == (expected,)


def test_bad_resource_weight_is_refused_when_the_config_loads():
    from crossdock.queue.errors import ConfigError

    with pytest.raises(ConfigError, match="queues.train.plugin_weights: .*cpu: resource weight 101"):
        config(queues={"train": {"priority_class": "low", "pools": ["gpu"], "plugin_weights": {"cpu": 101}}})
