"""The case study's live part, short (``crossdock.dev.casestudy_live``; the full one is
``python bench/casestudy.py --live-only``): real processes under real cgroup quotas, and the
invariants of its table, not its numbers. The server answers every request in every setup; the
baseline runs all three training jobs beside it; crossdock preempts the training job that
backfilled the inference node, and its median latency is the lower one. The median, not the P99:
the P99 of a short run is its third-slowest request, which one stall of this machine decides (a
crossdock run once measured 88 ms against the baseline's 85 ms with medians of 13 and 43 ms); the
benchmark's longer runs report it."""

from __future__ import annotations

import pytest

from crossdock.dev import casestudy_live

pytestmark = [pytest.mark.redis, pytest.mark.celery, pytest.mark.serial]


def test_the_live_table_keeps_its_invariants():
    data = casestudy_live.run(seconds=6, qps=40)
    rows = data["setups"]
    assert list(rows) == ["alone", "baseline", "crossdock"]
    for row in rows.values():
        assert row["requests"] == 240 and row["failed"] == 0, row
    alone, baseline, crossdock = rows["alone"], rows["baseline"], rows["crossdock"]
    assert (alone["training_running"], baseline["training_running"], crossdock["training_running"]) == (0, 3, 1)
    assert (baseline["preemptions"], crossdock["preemptions"]) == (0, 1)
    assert crossdock["p50_ms"] < baseline["p50_ms"], rows
    assert baseline["training_cpu_cores"] > 0 and crossdock["training_cpu_cores"] > 0, rows
    assert "| crossdock |" in casestudy_live.render(data)
