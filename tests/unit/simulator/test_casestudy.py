"""The case study (configs/scenarios/casestudy.yaml, docs/casestudy.md): its models, and a small
version of its table whose invariants (not its exact numbers) hold: every setup present, every
field in range, crossdock's GPU utilisation above the baseline's and its inference P99 below."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml
from typer.testing import CliRunner

from crossdock.cli.simulate import app
from crossdock.sim import contention
from crossdock.sim.casestudy import load_casestudy
from crossdock.sim.casestudy_table import render_table, targets_met

ROOT = Path(__file__).resolve().parents[3]
SCENARIO = ROOT / "configs/scenarios/casestudy.yaml"
FIELDS = {"gpu_utilisation_pct", "inference_p99_ms", "node_cpu_spread_pct", "training_blocked_by_fragmentation",
          "allreduce_efficiency_pct", "gpu_hours_lost", "wait_p95_s"}
ALLREDUCE = {"compute_to_comm": 11.5, "nvlink_speedup": 24, "comm_efficiency": {1: 1.0, 2: 0.7}}


def test_cfs_shares_are_weighted_by_requests_and_lend_what_is_unused():
    got = contention.cfs_shares(10.0, np.array([8.0, 8.0, 1.0]), np.array([1.0, 3.0, 1.0]), np.full(3, np.inf))
    assert got[2] == pytest.approx(1.0)                      # under its share: gets all it wants
    assert got.sum() == pytest.approx(10.0)                  # work-conserving
    assert got[1] / got[0] == pytest.approx(3.0)             # the rest by weight
    capped = contention.cfs_shares(10.0, np.array([8.0, 8.0]), np.array([1.0, 1.0]), np.array([2.0, np.inf]))
    assert capped.tolist() == pytest.approx([2.0, 8.0])      # a quota caps; its room goes to the other


def test_inference_p99_is_its_base_with_room_and_grows_with_contention_and_quota():
    kw = {"base_ms": 20.0, "rho0": 0.5, "period_ms": 100.0, "timeout_ms": 1000.0}
    assert contention.inference_p99_ms(4.0, 2.0, None, 4.0, **kw) == pytest.approx(20.0)
    assert contention.inference_p99_ms(3.0, 2.0, None, 4.0, **kw) > 20.0
    assert contention.inference_p99_ms(2.0, 2.0, None, 4.0, **kw) == 1000.0      # saturated: the timeout
    assert contention.inference_p99_ms(4.0, 2.0, 2.0, 4.0, **kw) >= 50.0         # quota half its threads' use


def test_allreduce_one_domain_beats_one_worker_per_node_beats_two():
    one_domain = contention.allreduce_efficiency([8], **ALLREDUCE)
    spread = contention.allreduce_efficiency([1] * 8, **ALLREDUCE)
    pairs = contention.allreduce_efficiency([2] * 4, **ALLREDUCE)
    assert one_domain > 0.95 > spread > pairs
    assert spread == pytest.approx(0.92, abs=0.005)          # the story's anti-affinity figure


@pytest.mark.parametrize("change, message", [
    (lambda d: d["training"].update(load=-1, backlog_jobs=-2), ("training.load", "training.backlog_jobs")),
    (lambda d: d["setups"]["baseline"]["classes"]["inference"].update(placement="nope"),
     ("setups.baseline.classes.inference.placement: unknown 'nope'",)),
    (lambda d: d["setups"]["crossdock"]["classes"].pop("distributed"),
     ("setups.crossdock.classes: class 'distributed' has no setup",)),
])
def test_a_casestudy_file_with_a_bad_value_is_refused_with_its_path(tmp_path, change, message):
    data = yaml.safe_load(SCENARIO.read_text())
    change(data)
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(data))
    r = CliRunner().invoke(app, ["scenario", str(bad), "--json"])
    assert r.exit_code == 2, r.output
    assert all(m in r.output for m in message), r.output
    assert "Traceback" not in r.output


@pytest.fixture(scope="module")
def small(tmp_path_factory) -> dict:
    """The case study at a quarter of its cluster and load, for 4 simulated hours."""
    data = yaml.safe_load(SCENARIO.read_text())
    data["hours"] = 4
    for pool in data["pools"].values():
        pool["nodes"] = max(2, pool["nodes"] // 4)
    data["training"]["backlog_jobs"] //= 4
    for w in data["workloads"].values():
        w["rate_per_hour"] /= 4
    data["distributed"]["every_hours"] = 2
    path = tmp_path_factory.mktemp("casestudy") / "small.yaml"
    path.write_text(yaml.safe_dump(data))
    load_casestudy(path)
    r = CliRunner().invoke(app, ["scenario", str(path), "--json"])
    assert r.exit_code == 0, r.output
    return json.loads(r.output)


def test_every_setup_is_in_the_table_with_every_field_in_range(small):
    rows = small["setups"]
    setups = yaml.safe_load(SCENARIO.read_text())["setups"]
    assert set(rows) == {name for name, s in setups.items() if s.get("table", True)} >= {"baseline", "crossdock"}
    for name, r in rows.items():
        assert FIELDS <= set(r), name
        assert 0 <= r["gpu_utilisation_pct"] <= 100 and 0 <= r["node_cpu_spread_pct"] <= 100
        assert 0 < r["inference_p99_ms"] <= 1000
        assert r["allreduce_efficiency_pct"] is None or 0 < r["allreduce_efficiency_pct"] <= 100
        assert r["training_blocked_by_fragmentation"] >= 0 and r["gpu_hours_lost"] >= 0
        assert set(r["wait_p95_s"]) >= {"training", "inference", "preprocessing"}
        assert all(v >= 0 for v in r["wait_p95_s"].values())
    assert "| crossdock |" in render_table(small)


def test_crossdock_beats_the_baseline(small):
    base, ours = small["setups"]["baseline"], small["setups"]["crossdock"]
    assert ours["gpu_utilisation_pct"] > base["gpu_utilisation_pct"]
    assert ours["inference_p99_ms"] < base["inference_p99_ms"]
    assert ours["allreduce_efficiency_pct"] > base["allreduce_efficiency_pct"]
    assert targets_met(ours)["inference_p99_ms"]


def test_the_baseline_never_preempts_nor_migrates(small):
    base = small["setups"]["baseline"]
    assert base["preemptions"] == base["migrations"] == 0 and base["gpu_hours_lost"] == 0
