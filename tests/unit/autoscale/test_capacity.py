"""The estimator (nodes of a pool's template for a backlog) and the least-waste pool choice."""

from __future__ import annotations

import math
from functools import lru_cache

import pytest
from as_builders import NOW, config, job, node, running
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from crossdock.queue.autoscale import capacity
from crossdock.queue.autoscale.capacity import Demand, choose_pool, demands, estimate, nodes_needed, template_node
from crossdock.queue.config import NodeTemplate
from crossdock.queue.models import JobSpec
from crossdock.queue.snapshot import Snapshot

CFG = config()
CPU = template_node("cpu", CFG.pools["cpu"], CFG.pools["cpu"].node_template)
GPU = template_node("gpu", CFG.pools["gpu"], CFG.pools["gpu"].node_template)


def est(jobs, node=CPU, cfg=CFG, **kw):
    return estimate(node.pool, node, demands(jobs, cfg), cfg, now=NOW, **kw)


@pytest.mark.parametrize("jobs, node, want", [
    ([job(i, cpus=3) for i in range(10)], CPU, 5),                        # two per 8-CPU node
    ([job(i, cpus=3) for i in range(10)] + [job(100 + i, cpus=2) for i in range(5)], CPU, 5),  # 2-CPU jobs fill the gaps
    ([job(i, cpus=8) for i in range(4)], CPU, 4),
    ([job(i, cpus=1) for i in range(17)], CPU, 3),
    ([job(i, gpus=3, model="A100") for i in range(5)], GPU, 3),            # 3+3 per 8-GPU node, 2 left idle
    ([job(i, gpus=5) for i in range(2)] + [job(10 + i, gpus=3) for i in range(2)], GPU, 2),  # 5+3 twice
    ([job(i, cpus=2, nodes=3) for i in range(2)], CPU, 3),                 # two gangs share three nodes
], ids=["pairs", "gaps-filled", "whole-nodes", "singles", "gpus", "gpus-ffd", "gangs-share"])
def test_nodes_for_a_backlog(jobs, node, want):
    e = est(jobs, node)
    assert e.nodes == want
    assert sorted(e.on_new) == sorted(j.id for j in jobs)
    assert e.never_fit == () and e.over_limit == ()


@pytest.mark.parametrize("job_, why", [
    (job(1, cpus=9), "more CPUs than the template"),
    (job(1, gpus=1), "a GPU on a CPU template"),
    (job(1, cpus=1, node_selector={"zone": "b"}), "a selector the template lacks"),
    (job(1, cpus=1, nodelist=["elsewhere"]), "a node list"),
], ids=["cpus", "gpu", "selector", "nodelist"])
def test_jobs_that_never_fit_are_not_counted(job_, why):
    e = est([job_, job(2, cpus=1)])
    assert e.never_fit == (1,), why
    assert e.nodes == 1 and e.on_new == (2,)


def test_gpu_model_and_pool_membership_are_the_real_filters():
    assert est([job(1, gpus=1, model="H100")], GPU).never_fit == (1,)
    other = config(queues={"batch": {"pools": ["gpu"]}})
    e = estimate("cpu", CPU, demands([job(1, cpus=1)], other), other, now=NOW)
    assert e.never_fit == (1,) and e.nodes == 0


def test_taint_the_job_does_not_tolerate():
    cfg = config(pools={"cpu": {"node_template": {"cpus": 8, "memory_mib": 32000, "taints": ["dedicated=x:NoSchedule"]}}})
    node_ = template_node("cpu", cfg.pools["cpu"], cfg.pools["cpu"].node_template)
    assert estimate("cpu", node_, demands([job(1)], cfg), cfg, now=NOW).never_fit == (1,)
    tolerant = [job(2, tolerations=[{"key": "dedicated", "operator": "Equal", "value": "x", "effect": "NoSchedule"}])]
    assert estimate("cpu", node_, demands(tolerant, cfg), cfg, now=NOW).on_new == (2,)


def test_limit_caps_new_nodes_and_lists_the_rest():
    e = est([job(i, cpus=8) for i in range(6)], limit=4)
    assert e.nodes == 4 and len(e.on_new) == 4 and len(e.over_limit) == 2


def test_starting_nodes_are_filled_first():
    e = est([job(i, cpus=4) for i in range(6)], starting=2)
    assert len(e.on_starting) == 4 and e.nodes == 1 and len(e.on_new) == 2


def test_a_gang_gets_all_its_nodes_or_none():
    e = est([job(1, cpus=8, nodes=4)], limit=3)
    assert e.nodes == 0 and e.over_limit == (1,)
    e = est([job(1, cpus=8, nodes=4)], limit=4)
    assert e.nodes == 4 and e.on_new == (1,)


def test_anti_affinity_puts_one_task_per_node():
    tasks = [job(i, cpus=1, anti_affinity=True).model_copy(update={"array_job_id": 7}) for i in range(3)]
    assert est(tasks).nodes == 3


def test_jobs_fitting_current_nodes_ask_for_nothing():
    j, a = running(50, "n1", cpus=6)
    snap = Snapshot((node("n1"), node("n2")), (a,))
    pending = demands([job(1, cpus=2), job(2, cpus=8), job(3, cpus=8)], CFG)
    e = nodes_needed("cpu", CFG.pools["cpu"].node_template, pending, snap, CFG, now=NOW)
    assert e.nodes == 1 and e.on_new in ((2,), (3,))


def test_identical_jobs_make_one_demand():
    ds = demands([job(i, cpus=2) for i in range(1000)] + [job(5000, cpus=3)], CFG)
    assert sorted(len(d.jobs) for d in ds) == [1, 1000]


def test_every_jobspec_field_is_sorted_into_placement_or_not():
    """A new JobSpec field must be added to PLACEMENT_FIELDS/COLLECTIONS when placement reads it."""
    not_placement = {"name", "user", "command", "script", "script_path", "python", "image", "args", "env", "export",
                     "workdir", "stdout", "stderr", "nodes_max", "queue", "priority_class", "array",
                     "dependency", "hold", "requeue", "backend", "pool", "partition", "reservation", "licenses",
                     "begin", "deadline", "time_min_seconds", "kill_signal", "slurm_options"}
    placement = set(capacity.PLACEMENT_FIELDS) | set(capacity.PLACEMENT_COLLECTIONS)
    assert placement | not_placement == set(JobSpec.model_fields)
    assert not placement & not_placement


# --- against the optimum --------------------------------------------------------------------------

@lru_cache(maxsize=None)
def optimum(sizes: tuple[int, ...], cap: int) -> int:
    """The fewest bins of ``cap`` holding ``sizes`` (exhaustive search; small inputs)."""
    items = sorted(sizes, reverse=True)
    for bins in range(max(1, math.ceil(sum(items) / cap)), len(items) + 1):
        loads = [0] * bins

        def fit(k: int) -> bool:
            if k == len(items):
                return True
            tried = set()
            for b in range(bins):
                if loads[b] + items[k] <= cap and loads[b] not in tried:
                    tried.add(loads[b])
                    loads[b] += items[k]
                    if fit(k + 1):
                        return True
                    loads[b] -= items[k]
            return False

        if fit(0):
            return bins
    return len(items)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.integers(1, 8), min_size=1, max_size=9))
def test_estimate_is_within_the_ffd_bound_of_the_optimum(sizes):
    e = est([job(i, cpus=c) for i, c in enumerate(sizes)])
    opt = optimum(tuple(sorted(sizes)), 8)
    assert len(e.on_new) == len(sizes)
    assert opt <= e.nodes <= 11 / 9 * opt + 6 / 9


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.integers(1, 8), min_size=1, max_size=30), st.integers(0, 6), st.integers(0, 3))
def test_never_more_than_the_limit_and_every_job_accounted_once(sizes, limit, starting):
    e = est([job(i, cpus=c) for i, c in enumerate(sizes)], limit=limit, starting=starting)
    assert 0 <= e.nodes <= limit
    ids = e.on_new + e.on_starting + e.over_limit + e.never_fit
    assert sorted(ids) == list(range(len(sizes)))
    assert sum(sizes[i] for i in e.on_starting) <= 8 * starting
    assert sum(sizes[i] for i in e.on_new) <= 8 * e.nodes


# --- least waste ----------------------------------------------------------------------------------

def test_cpu_jobs_grow_the_cpu_pool_not_the_gpu_pool():
    jobs = [job(i, cpus=4) for i in range(4)]
    options = [est(jobs, CPU), est(jobs, GPU)]
    assert options[1].nodes == 1  # a 64-CPU GPU node would hold them too, with every GPU idle
    assert choose_pool(options, ["gpu", "cpu"]).pool == "cpu"


def test_least_waste_counts_gpus():
    cfg = config(pools={"big": {"backend": "k8s", "provisioner": "kwok", "gpu": {"model": "A100"},
                                "node_template": {"cpus": 64, "memory_mib": 512000, "gpus": 4, "gpu_model": "A100"}}},
                 queues={"batch": {"pools": ["cpu", "gpu", "big"]}})
    four = template_node("big", cfg.pools["big"], cfg.pools["big"].node_template)
    eight = template_node("gpu", cfg.pools["gpu"], cfg.pools["gpu"].node_template)
    jobs = [job(i, cpus=8, gpus=4) for i in range(3)]
    a, b = (estimate(n.pool, n, demands(jobs, cfg), cfg, now=NOW) for n in (eight, four))
    assert (a.nodes, b.nodes) == (2, 3)
    assert a.waste == pytest.approx((128 - 24) / 128 + 1 + (16 - 12) / 16)  # cpu, memory, gpus
    assert b.waste == pytest.approx((192 - 24) / 192 + 1 + 0)
    assert choose_pool([a, b], list(cfg.pools)).pool == "big"


def test_ties_go_to_the_pool_listed_first():
    cfg = config(pools={"cpu2": {"backend": "k8s", "provisioner": "kwok", "node_template": {"cpus": 8, "memory_mib": 32000}}},
                 queues={"batch": {"pools": ["cpu2", "cpu"]}})
    jobs = demands([job(i, cpus=4) for i in range(4)], cfg)
    opts = [estimate(p, template_node(p, cfg.pools[p], cfg.pools[p].node_template), jobs, cfg, now=NOW)
            for p in ("cpu2", "cpu")]
    assert opts[0].waste == opts[1].waste
    assert choose_pool(opts, list(cfg.pools)).pool == "cpu"
    assert choose_pool(reversed(opts), list(cfg.pools)).pool == "cpu"


def test_grow_spreads_a_backlog_over_pools_by_waste():
    cands = {"cpu": (CPU, 0, 10), "gpu": (GPU, 0, 10)}
    g = capacity.grow(cands, demands([job(i, cpus=4) for i in range(4)] + [job(10, gpus=2)], CFG), CFG, NOW)
    assert g.chosen["cpu"].nodes == 2 and sorted(g.chosen["cpu"].on_new) == [0, 1, 2, 3]
    assert g.chosen["gpu"].nodes == 1 and g.chosen["gpu"].on_new == (10,)


def test_grow_reports_jobs_no_pool_can_hold():
    g = capacity.grow({"cpu": (CPU, 0, 10), "gpu": (GPU, 0, 10)}, demands([job(1, cpus=65)], CFG), CFG, NOW)
    assert g.chosen == {} and g.never_fit == (1,)


def test_pool_template_without_one_copies_the_pools_nodes():
    cfg = config(pools={"cpu": {"node_template": None}})
    snap = Snapshot((node("a", cpus=16), node("b", cpus=16), node("c", cpus=4)))
    t = capacity.pool_template("cpu", cfg.pools["cpu"], snap)
    assert (t.cpus, t.memory_mib, t.gpus) == (16, 32000, 0)
    assert capacity.pool_template("cpu", cfg.pools["cpu"], Snapshot(())) is None
    assert isinstance(cfg.pools["gpu"].node_template, NodeTemplate)


def test_demands_leave_out_jobs_over_a_per_job_limit():
    cfg = config(queues={"batch": {"per_job": {"cpu": 4}}})
    assert [d.jobs for d in demands([job(1, cpus=8), job(2, cpus=2)], cfg)] == [(2,)]
    assert isinstance(demands([job(3)], cfg)[0], Demand)


def test_a_gang_on_starting_nodes_adds_none():
    e = est([job(1, cpus=4, nodes=2)], starting=2)
    assert e.nodes == 0 and e.on_starting == (1,) and e.on_new == ()


def test_cpu_jobs_do_not_ride_along_on_the_nodes_a_gpu_backlog_wins():
    backlog = [job(i, cpus=4, gpus=1) for i in range(16)] + [job(100 + i, cpus=4) for i in range(8)]
    g = capacity.grow({"cpu": (CPU, 0, 10), "gpu": (GPU, 0, 10)}, demands(backlog, CFG), CFG, NOW)
    assert sorted(g.chosen["cpu"].on_new) == list(range(100, 108)) and g.chosen["cpu"].nodes == 4
    assert sorted(g.chosen["gpu"].on_new) == list(range(16)) and g.chosen["gpu"].nodes == 2


def test_jobs_beyond_a_pools_limit_go_to_their_next_pool():
    g = capacity.grow({"cpu": (CPU, 0, 1), "gpu": (GPU, 0, 10)}, demands([job(i, cpus=8) for i in range(3)], CFG),
                      CFG, NOW)
    assert g.chosen["cpu"].nodes == 1 and len(g.chosen["cpu"].on_new) == 1
    assert g.chosen["gpu"].nodes == 1 and len(g.chosen["gpu"].on_new) == 2
    g = capacity.grow({"cpu": (CPU, 0, 1), "gpu": (GPU, 0, 0)}, demands([job(i, cpus=8) for i in range(3)], CFG),
                      CFG, NOW)
    assert len(g.over_limit["gpu"]) == 2 and g.chosen["cpu"].over_limit == ()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.integers(1, 64), st.integers(0, 8), st.integers(1, 3)), min_size=1, max_size=12),
       st.integers(0, 2))
def test_new_nodes_hold_what_is_booked_on_them_in_every_resource(shapes, starting):
    jobs = [job(i, cpus=c, gpus=g, nodes=n, mem_per_node_mib=8000 * n) for i, (c, g, n) in enumerate(shapes)]
    e = est(jobs, GPU, starting=starting)
    by_id = {j.id: (c, g, n) for j, (c, g, n) in zip(jobs, shapes)}
    assert sorted(e.on_new + e.on_starting + e.never_fit + e.over_limit) == sorted(by_id)
    for i in e.on_new + e.on_starting:
        assert by_id[i][2] <= e.nodes + starting  # a gang's workers on distinct nodes
    cpu = sum(by_id[i][0] * by_id[i][2] for i in e.on_new + e.on_starting)
    gpu = sum(by_id[i][1] * by_id[i][2] for i in e.on_new + e.on_starting)
    assert cpu <= 64 * (e.nodes + starting) and gpu <= 8 * (e.nodes + starting)
    assert e.requested[0] == 1000 * sum(by_id[i][0] * by_id[i][2] for i in e.on_new)
