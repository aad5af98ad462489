"""Static packing runs end to end on a small cluster: JSON shape, invariants, determinism,
the discrete curve, the CLI and the PNG chart."""

from __future__ import annotations

import json

import numpy as np
import pytest
from sim_builders import write
from typer.testing import CliRunner

from crossdock.sim.policies import POLICIES
from crossdock.sim.static import discrete_curve, parse_seeds, run_grid, run_static, summarize
from crossdock.sim.trace import load_nodes, load_pods
from crossdock.cli.simulate import app

NODES = "sn,cpu_milli,memory_mib,gpu,model\n" + "".join(
    f"n{i},{c},{m},{g},{mod}\n" for i, (c, m, g, mod) in enumerate(
        [(32000, 65536, 2, "T4"), (96000, 262144, 8, "G2"), (16000, 65536, 2, "P100"), (64000, 131072, 4, "G2")]))
SHAPES = [(4000, 1, 500), (8000, 1, 1000), (2000, 0, 0), (16000, 2, 1000), (3000, 1, 250), (12000, 1, 810),
          (6000, 1, 1000), (30000, 4, 1000)]
PODS = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\n" + "".join(
    f"p{i},{c},1024,{n},{m},{'G2' if i % 7 == 0 and n else ''}\n" for i, (c, n, m) in
    enumerate(SHAPES[i % len(SHAPES)] for i in range(40)))


@pytest.fixture()
def trace(tmp_path):
    nodes = load_nodes(write(tmp_path, "nodes.csv", NODES))
    return nodes, load_pods(write(tmp_path, "pods.csv", PODS), nodes.models), tmp_path


@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_run_invariants(trace, policy):
    nodes, pods, _ = trace
    r = run_static(nodes, pods, policy, seed=3)
    doc = r.to_json()
    assert set(doc) == {"policy", "seed", "tune", "nodes", "gpus", "failed_pods", "curve", "at_100"}
    assert doc["gpus"] == 16 and doc["nodes"] == 4
    assert [p["arrived_pct"] for p in doc["curve"]] == [float(k) for k in range(131)]
    assert np.all(r.allocated_pct <= r.arrived_pct + 1e-9)
    assert np.all(np.diff(r.allocated_pct) >= -1e-9)  # no departures in static mode
    assert r.arrived_pct[-1] <= 130 + 100 * 1000 / 16_000  # top-up stops within one pod of 130 %
    assert doc["at_100"] == {k: doc["curve"][100][k] for k in ("allocated_pct", "fragmentation_pct")}


def test_same_seed_same_result_and_seeds_differ(trace):
    nodes, pods, _ = trace
    a = run_static(nodes, pods, "fgd", seed=5).to_json()
    b = run_static(nodes, pods, "fgd", seed=5).to_json()
    c = run_static(nodes, pods, "fgd", seed=6).to_json()
    assert a == b
    assert a["curve"] != c["curve"]


def test_discrete_curve_averages_each_rounded_percent_and_fills_gaps():
    arrived = np.array([0.2, 0.4, 1.6, 2.4, 6.0])
    alloc = np.array([0.2, 0.4, 1.0, 2.0, 5.0])
    frag = np.zeros(5)
    curve = discrete_curve(arrived, alloc, frag, max_pct=8)
    got = [p["allocated_pct"] for p in curve]
    # 0 -> mean(0.2, 0.4); 1 -> none rounds to 1, so ±1: mean of all within 0..2; 2 -> 1.6 and 2.4;
    # 3 -> ±1 gives 2..4: 1.6 and 2.4 again; 4 -> none within 3..5 -> carried; 5,6,7 -> 5.0; 8 -> carried
    assert got == [0.3, pytest.approx(0.9, abs=0.01), 1.5, 1.5, 1.5, 5.0, 5.0, 5.0, 5.0]


@pytest.mark.parametrize("text,expected", [("42-45", [42, 43, 44, 45]), ("1,3,2", [1, 2, 3]), ("5-6,9", [5, 6, 9])])
def test_parse_seeds(text, expected):
    assert parse_seeds(text) == expected


@pytest.mark.parametrize("text", ["9-5", "a-b", ""])
def test_parse_seeds_rejects(text):
    with pytest.raises(ValueError):
        parse_seeds(text)


def test_grid_summary_has_one_row_per_policy(trace):
    nodes, pods, _ = trace
    rows = summarize(run_grid(nodes, pods, ["random", "fgd"], [1, 2]))
    assert [r["policy"] for r in rows] == ["random", "fgd"]
    assert all(r["seeds"] == [1, 2] for r in rows)
    assert rows[1]["published_allocated_pct"] == 95.2


def test_cli_json_and_plot(trace):
    _, _, tmp = trace
    png = tmp / "out" / "curve.png"
    result = CliRunner().invoke(app, ["--nodes", str(tmp / "nodes.csv"), "--pods", str(tmp / "pods.csv"),
                                      "--policy", "fgd", "--seed", "4", "--json", "--plot", str(png)])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    assert doc["policy"] == "fgd" and doc["seed"] == 4 and len(doc["curve"]) == 131
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_cli_compare_prints_a_row_per_policy(trace):
    _, _, tmp = trace
    result = CliRunner().invoke(app, ["compare", "--nodes", str(tmp / "nodes.csv"), "--pods", str(tmp / "pods.csv"),
                                      "--policies", "random,bestfit", "--seeds", "1-2", "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    assert [r["policy"] for r in doc["rows"]] == ["random", "bestfit"]


def test_cli_reports_malformed_csv_with_location(tmp_path):
    bad = write(tmp_path, "nodes.csv", "sn,cpu_milli,memory_mib,gpu,model\nn0,x,1,1,T4\n")
    result = CliRunner().invoke(app, ["--nodes", str(bad), "--pods", str(bad)])
    assert result.exit_code == 2
    assert f"{bad}:2: column 'cpu_milli'" in result.output


def test_cli_rejects_an_unknown_policy(trace):
    _, _, tmp = trace
    result = CliRunner().invoke(app, ["--nodes", str(tmp / "nodes.csv"), "--pods", str(tmp / "pods.csv"),
                                      "--policy", "tetris"])
    assert result.exit_code == 2 and "unknown policy" in result.output
