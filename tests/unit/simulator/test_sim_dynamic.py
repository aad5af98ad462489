"""Dynamic replay on one- and two-node clusters: queueing, preemption, checkpoints, migration;
scenario files: validation and deterministic arrivals."""

from __future__ import annotations

import numpy as np
import pytest
from sim_builders import nodes, write

from crossdock.sim.cluster import PodReq
from crossdock.sim.dynamic import SimJob, replay_trace, simulate
from crossdock.sim.scenario import (ScenarioError, build_nodes, generate_jobs, load_scenario,
                                                    run_scenario)
from crossdock.sim.trace import PodTable, load_nodes, load_pods

ONE_GPU = nodes((16000, 65536, 1, "T4"))
GPU = PodReq(1000, 1024, 1, 1000, PodTable.ANY)


def job(i, arrival, duration, req=GPU, **kw):
    return SimJob(i, kw.pop("klass", "c"), arrival, duration, req, policy=kw.pop("policy", "fgd"), **kw)


def test_a_job_waits_for_the_gpu_then_runs():
    a, b = job(0, 0, 100), job(1, 10, 50)
    r = simulate(ONE_GPU, [a, b], horizon_s=1000)
    assert (a.start, a.end) == (0, 100)
    assert (b.start, b.end) == (100, 150)
    assert r.delays_min().tolist() == pytest.approx([0, 90 / 60])


@pytest.mark.parametrize("service,nodes_used", [(False, 1), (True, 2)])
def test_a_service_spreads_its_replicas_where_its_placement_would_pack_them(service, nodes_used):
    two = nodes((16000, 65536, 0, "T4"), (16000, 65536, 0, "T4"))
    cpu = PodReq(1000, 1024, 0, 0, PodTable.ANY)
    replicas = [job(i, i, 1000, cpu, klass="svc", policy="most-requested", service=service) for i in range(2)]
    simulate(two, replicas, horizon_s=100)
    assert len({r.node for r in replicas} - {-1}) == nodes_used


def test_higher_priority_preempts_and_the_victim_restarts():
    low = job(0, 0, 1000, priority=100, preemptible=True)
    high = job(1, 10, 50, priority=1000)
    r = simulate(ONE_GPU, [low, high], preemption=True, horizon_s=5000)
    assert high.start == 10 and low.preempted == 1
    assert low.start == 0 and low.end == 60 + 1000  # restarted from scratch after high left
    assert r.preemptions == 1 and r.lost_gpu_hours == pytest.approx(10 / 3600)


def test_checkpoints_keep_progress_across_preemption():
    low = job(0, 0, 1000, priority=100, preemptible=True, checkpoint_s=4)
    high = job(1, 10, 50, priority=1000)
    r = simulate(ONE_GPU, [low, high], preemption=True, horizon_s=5000)
    assert low.end == 60 + 1000 - 8  # 8 s were checkpointed, 2 s lost
    assert r.lost_gpu_hours == pytest.approx(2 / 3600)


@pytest.mark.parametrize("preemptible,preemption", [(False, True), (True, False)],
                         ids=["victim-not-preemptible", "preemption-off"])
def test_no_preemption_without_a_preemptible_victim_or_the_switch(preemptible, preemption):
    low = job(0, 0, 1000, priority=100, preemptible=preemptible)
    high = job(1, 10, 50, priority=1000)
    r = simulate(ONE_GPU, [low, high], preemption=preemption, horizon_s=5000)
    assert r.preemptions == 0 and high.start == 1000


def test_priority_orders_the_queue():
    first = job(0, 0, 100)
    low, high = job(1, 5, 10, priority=1), job(2, 6, 10, priority=9)
    simulate(ONE_GPU, [first, low, high], horizon_s=1000)
    assert high.start == 100 and low.start == 110


def test_defragmentation_moves_a_preemptible_job_to_make_room():
    two = nodes((64000, 1 << 20, 2, "T4"), (64000, 1 << 20, 2, "T4"))
    a = job(0, 0, 1000, preemptible=True, policy="spread")
    b = job(1, 1, 1000, preemptible=True, policy="spread")
    big = job(2, 5, 100, req=PodReq(1000, 1024, 2, 1000, PodTable.ANY))
    r = simulate(two, [a, b, big], defrag=True, horizon_s=5000)
    assert a.node != -1 or a.end is not None
    assert big.start == 5 and r.migrations == 1


def test_replay_trace_from_a_pod_list(tmp_path):
    from sim_builders import NODE_CSV, POD_CSV
    table = load_nodes(write(tmp_path, "n.csv", NODE_CSV))
    pods = load_pods(write(tmp_path, "p.csv", POD_CSV), table.models)
    r = replay_trace(table, pods, "fgd")
    s = r.summary()
    assert s["jobs"] == 4 and set(s["queueing_delay"]) == {"LS", "BE"}
    assert all(j.start is not None for j in r.jobs if j.arrival <= r.horizon_h * 3600)


SCENARIO = """
name: tiny
hours: 4
pools:
  gpu: {nodes: 2, cpu: 32, memory_gib: 128, gpus: 4, gpu_model: A100}
  cpu: {nodes: 1, cpu: 32, memory_gib: 128}
workloads:
  train: {rate_per_hour: 2, gpus: {2: 0.5, 4: 0.5}, cpu_per_gpu: 4, duration: {median_minutes: 60}}
  infer: {rate_per_hour: 20, gpu_share: {500: 1.0}, cpu: 1, burst: {every_hours: 2, length_minutes: 20, factor: 3},
          duration: {median_minutes: 5, sigma: 0.5}}
setups:
  a:
    classes:
      train: {pools: [gpu]}
      infer: {pools: [gpu, cpu], placement: spread}
  b:
    preemption: true
    defragmentation: true
    classes:
      train: {pools: [gpu], priority: 1, preemptible: true, checkpoint_minutes: 10}
      infer: {pools: [gpu], placement: spread, priority: 10}
"""


def test_scenario_runs_every_setup_on_the_same_arrivals(tmp_path):
    sc = load_scenario(write(tmp_path, "s.yaml", SCENARIO))
    table, pools = build_nodes(sc)
    assert len(table) == 3 and pools["cpu"].tolist() == [2]
    assert generate_jobs(sc, 1) == generate_jobs(sc, 1) != generate_jobs(sc, 2)
    results = run_scenario(sc, seed=1)
    assert set(results) == {"a", "b"}
    assert results["a"].summary()["jobs"] == results["b"].summary()["jobs"] > 0


@pytest.mark.parametrize("edit,needle", [
    (("placement: spread, priority: 10", "placement: tetris, priority: 10"), "unknown 'tetris'"),
    (("infer: {pools: [gpu, cpu]", "infer: {pools: [gpu, tpu]"), "unknown pool 'tpu'"),
    (("gpu_share: {500: 1.0}", "gpu_share: {500: 0.5}"), "sum to 1"),
    (("placement: spread, priority: 10", "placement: spread, plugin_weights: {cpu: 0, gpu: 2}, priority: 10"),
     r"setups.b.classes.infer.plugin_weights.gpu: unknown resource.*plugin_weights.cpu: 0 is not in the valid range"),
    (("train: {pools: [gpu], priority: 1", "train: {pools: [gpu], plugin_weights: {cpu: 2}, priority: 1"),
     "setups.b.classes.train.plugin_weights: 'crossdock' scores no resources"),
], ids=["placement", "pool", "probabilities", "weights", "weights-of-a-placement-without-resources"])
def test_bad_scenarios_name_the_problem(tmp_path, edit, needle):
    path = write(tmp_path, "s.yaml", SCENARIO.replace(*edit))
    with pytest.raises(ScenarioError, match=needle):
        load_scenario(path)


def test_reference_scenario_file_is_valid():
    sc = load_scenario("configs/scenarios/mixed-gpu-cluster.yaml")
    assert set(sc.setups) == {"mixed", "pools"} and set(sc.pools) == {"a100", "l4", "cpu"}
    assert np.isclose(sum(sc.workloads["training"].gpus.values()), 1)


def test_cli_replay_and_scenario(tmp_path):
    import json

    from typer.testing import CliRunner

    from crossdock.cli.simulate import app
    from sim_builders import NODE_CSV, POD_CSV

    n, p = write(tmp_path, "n.csv", NODE_CSV), write(tmp_path, "p.csv", POD_CSV)
    r = CliRunner().invoke(app, ["replay", "--nodes", str(n), "--pods", str(p), "--policy", "fgd", "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["jobs"] == 4
    png = tmp_path / "sc.png"
    r = CliRunner().invoke(app, ["scenario", str(write(tmp_path, "s.yaml", SCENARIO)), "--plot", str(png), "--json"])
    assert r.exit_code == 0, r.output
    assert set(json.loads(r.output)) == {"a", "b"}
    assert png.read_bytes()[:4] == b"\x89PNG"
    r = CliRunner().invoke(app, ["scenario", str(tmp_path / "absent.yaml")])
    assert r.exit_code == 2 and "cannot read" in r.output
