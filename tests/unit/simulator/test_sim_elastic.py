"""The elastic day: autoscaled pools on the simulator's clock, under static peak provisioning,
crossdock's real ``plan()`` and a KEDA-like poll, on the same arrivals."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest
from typer.testing import CliRunner

from crossdock.sim.autoscalers import CrossdockPlan, KedaPoll
from crossdock.sim.day import DAY_S, DayJob, hourly_arrivals, trace_day
from crossdock.queue.autoscale import plan as autoscale_plan
from crossdock.queue.snapshot import DELETION_CANDIDATE
from crossdock.sim.elastic import UP, Actions, ElasticSim, elastic_jobs
from crossdock.sim.elastic_scenario import run_day
from crossdock.sim.trace import DEFAULT_PODS, load_pods

from elastic_builders import ROUTE, small_config, synthetic_day


@pytest.fixture(scope="module")
def day_results():
    """A synthetic day of ~800 jobs, plan() every 2 s (every 30 s while nothing changes)."""
    config = small_config(interval_s=2.0)
    return run_day(config, synthetic_day(seed=7), ROUTE, seed=3, plan_idle_s=30.0)


def test_autoscaling_uses_fewer_node_hours_than_static_peak_and_starts_every_job(day_results):
    static, ours = day_results["static"].summary(), day_results["crossdock"].summary()
    assert static["never_started"] == 0 and ours["never_started"] == 0
    assert ours["node_hours"] < 0.7 * static["node_hours"], (ours, static)
    assert ours["scale_ups"] > 0 and ours["scale_downs"] > 0
    assert ours["plan_passes"] > 0


@pytest.mark.parametrize("setup", ["crossdock", "keda"])
def test_no_setup_removes_a_node_that_runs_work(day_results, setup):
    r = day_results[setup]
    assert r.refused_removals == 0
    assert r.nodes_removed > 0
    assert all(j.requeues == 0 for j in r.jobs)  # nothing preemptible: no drain


def spike(at: float, n: int = 40) -> list[DayJob]:
    return [DayJob(at, 600.0, 8000, 16384, 1, 1000) for _ in range(n)]


@pytest.mark.parametrize("at", [0.5, 29.0, 31.0, 100.0, 119.5])
def test_the_keda_like_setup_reacts_no_earlier_than_its_poll_and_crossdock_within_a_pass(at):
    config = small_config()
    first = {}
    for scaler in (KedaPoll(config, poll_s=30.0, scan_s=10.0), CrossdockPlan(config)):
        sim = ElasticSim(config, elastic_jobs(config, spike(at), ROUTE), scaler, horizon_s=at + 60, provision_s=60.0)
        first[scaler.name] = sim.run().first_scale_up
    next_poll = np.ceil(at / 30.0) * 30.0
    assert first["KEDA-like poll"] == next_poll
    assert at <= first["crossdock"] <= at + config.autoscaler.interval_seconds


class TakesLast:
    """Names, at its first tick, every ready CPU node but ``keep`` as one placement takes last."""

    name, interval_s = "scripted", 1.0

    def __init__(self, keep: int):
        self.keep, self.done = keep, False

    def tick(self, sim, now):
        if self.done:
            return Actions()
        self.done = True
        names = sim.nodes("cpu", UP)
        return Actions(taken_last=tuple(n for k, n in enumerate(names) if k != self.keep))


@pytest.mark.parametrize("keep", [0, 3])
def test_placement_takes_the_autoscalers_deletion_candidates_last(keep):
    config = small_config()
    jobs = [DayJob(5.0, 3600.0, 4000, 8192) for _ in range(9)]  # 8 fill one 32-core node, the 9th spills
    sim = ElasticSim(config, elastic_jobs(config, jobs, ROUTE), TakesLast(keep), horizon_s=60, initial="max")
    r = sim.run()
    slots = [j.slot for j in sorted(r.jobs, key=lambda j: j.id)]
    kept = sim.slot_of[sim.nodes("cpu", UP)[keep]]
    assert slots[:8] == [kept] * 8 and slots[8] != kept


def test_the_plans_deletion_candidates_reach_placement_and_its_next_snapshot():
    config = small_config()
    seen = []

    def planner(inputs, state, cfg, now):
        seen.append({n.name for n in inputs.snapshot.nodes if DELETION_CANDIDATE in n.taints})
        return autoscale_plan.plan(inputs, state, cfg, now)

    # one small long job on a node, nothing else: the node is below the threshold and stays (its
    # job is not preemptible), so it is a candidate from the pass after it started
    sim = ElasticSim(config, elastic_jobs(config, [DayJob(0.0, 7200.0, 4000, 8192)], ROUTE),
                     CrossdockPlan(config, planner), horizon_s=120)
    sim.run()
    (node,) = {j.slot for j in sim.jobs}
    assert seen[-1] == {sim.names[node]} and sim.last[node]


def test_nodes_start_after_the_provisioning_delay():
    config = small_config()
    sim = ElasticSim(config, elastic_jobs(config, spike(10.0, 8), ROUTE), CrossdockPlan(config), horizon_s=200,
                     provision_s=75.0)
    r = sim.run()
    assert r.first_scale_up is not None
    starts = sorted(j.start for j in r.jobs)
    assert starts[0] == pytest.approx(r.first_scale_up + 75.0)


def test_results_are_deterministic_for_a_seed():
    config = small_config(interval_s=5.0)
    day = synthetic_day(seed=11, hours=3)
    runs = [run_day(config, day, ROUTE, seed=5, hours=3, setups=("crossdock", "keda"), plan_idle_s=30.0)
            for _ in range(2)]
    for setup in ("crossdock", "keda"):
        a, b = (r[setup].summary() | {"plan_ms_per_pass": None} for r in runs)  # wall time is not simulated
        assert a == b
        a, b = (r[setup] for r in runs)
        assert [(j.start, j.slot) for j in a.jobs] == [(j.start, j.slot) for j in b.jobs]
    assert synthetic_day(seed=12, hours=3) != day


def test_the_trace_day_keeps_every_pods_time_of_day():
    pods = load_pods(DEFAULT_PODS)
    day = trace_day(pods, max_duration_s=4 * 3600)
    with open(DEFAULT_PODS, newline="") as f:
        creation = [int(row["creation_time"]) for row in csv.DictReader(f)]
    assert len(day) == len(creation) == 8152
    assert all(0 <= j.arrival < DAY_S for j in day)
    assert hourly_arrivals(day).tolist() == np.bincount([c % 86400 // 3600 for c in creation], minlength=24).tolist()
    assert max(j.duration for j in day) == 4 * 3600 and min(j.duration for j in day) >= 60
    assert all(j.cpu_milli % 1000 == 0 for j in day)
    thin = trace_day(pods, fraction=0.25, seed=1)
    assert 0.2 * len(day) < len(thin) < 0.3 * len(day)
    assert thin == trace_day(pods, fraction=0.25, seed=1)


def test_the_trace_day_refuses_a_list_without_submit_times(tmp_path):
    path = tmp_path / "pods.csv"
    path.write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli\np1,1000,1024,1,1000\n")
    with pytest.raises(ValueError, match="no creation_time"):
        trace_day(load_pods(path))


SCENARIO = """
kind: elastic
name: tiny-day
trace: {{pods: {pods}, fraction: 0.03, max_duration_hours: 1}}
drain_hours: 0.5
provision_seconds: 60
route: {{gpu: gpu, cpu: cpu}}
plan_idle_seconds: 60
cluster:
  priority_classes: {{batch: {{value: 100}}}}
  pools:
    gpu: {{backend: k8s, gpu: {{model: G3, sharing: true}}, provisioner: kwok, max_nodes: 6,
           node_template: {{cpus: 128, memory_mib: 786432, gpus: 8, gpu_model: G3}}}}
    cpu: {{backend: k8s, provisioner: kwok, max_nodes: 3, node_template: {{cpus: 64, memory_mib: 262144}}}}
  queues:
    gpu: {{priority_class: batch, pools: [gpu], elastic: {{metric: queue_length, per_replica: 8, max: 6}}}}
    cpu: {{priority_class: batch, pools: [cpu], placement: most-requested,
           elastic: {{metric: queue_length, per_replica: 3, max: 3}}}}
  autoscaler: {{interval_seconds: 10}}
"""


def test_simulate_scenario_runs_an_elastic_file(tmp_path):
    from crossdock.cli.simulate import app

    path = tmp_path / "tiny.yaml"
    path.write_text(SCENARIO.format(pods=DEFAULT_PODS))
    out = CliRunner().invoke(app, ["scenario", str(path), "--json", "--plot", str(tmp_path / "day.png")])
    assert out.exit_code == 0, out.output
    rows = {r["setup"]: r for r in json.loads(out.output)["rows"]}
    assert set(rows) == {"static peak", "crossdock", "KEDA-like poll"}
    assert rows["static peak"]["node_hours"] == pytest.approx(9 * 24.5)
    assert (tmp_path / "day.png").stat().st_size > 10_000


def test_simulate_scenario_names_a_bad_route(tmp_path):
    from crossdock.cli.simulate import app

    path = tmp_path / "bad.yaml"
    path.write_text(SCENARIO.format(pods=DEFAULT_PODS).replace("route: {gpu: gpu", "route: {gpu: gpus"))
    out = CliRunner().invoke(app, ["scenario", str(path)])
    assert out.exit_code == 2
    assert "route.gpu: unknown queue 'gpus'" in out.output


@pytest.mark.parametrize("factor, nodes", [(1.0, 3), (0.5, 6)])
def test_the_keda_like_setup_sizes_the_pool_by_count_over_per_replica(factor, nodes):
    # 24 one-GPU jobs, per_replica 8 (×factor): 0 → 1 at the first poll after them, then the
    # HPA's legacy path (scale-up cap max(2·current, 4)) to ceil(24 / per_replica)
    config = small_config()
    scaler = KedaPoll(config, per_replica_factor=factor)
    sim = ElasticSim(config, elastic_jobs(config, spike(5.0, 24), ROUTE), scaler, horizon_s=300, provision_s=60.0)
    r = sim.run()
    assert r.nodes_added == nodes and scaler.replicas["gpu"] == nodes
    assert r.first_scale_up == 30.0
