"""deploy/grafana/crossdock.json: every query names metrics crossdock defines, panels have unique
ids and do not overlap (the Prometheus scrape test in
tests/integration/operate evaluates every query)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from prometheus_client import REGISTRY

import crossdock.observe.metrics  # noqa: F401 - registers the metrics

DASHBOARD = Path(__file__).resolve().parents[2] / "deploy" / "grafana" / "crossdock.json"
SUFFIXES = ("_total", "_bucket", "_count", "_sum", "_created")


def exprs(dash: dict) -> list[str]:
    return [t["expr"] for p in dash["panels"] for t in p.get("targets", [])]


def defined() -> set[str]:
    names = set()
    for metric in REGISTRY.collect():
        names.add(metric.name)
        names.update(s.name for s in metric.samples)
    return names


def test_every_query_names_a_crossdock_metric():
    dash = json.loads(DASHBOARD.read_text())
    known = defined()
    used = {m for e in exprs(dash) for m in re.findall(r"\bcrossdock_[a-z_]+\b", e)}
    assert used, "the dashboard queries nothing"
    unknown = sorted(m for m in used if m not in known and not any(m.endswith(s) and m[:-len(s)] in known
                                                                   for s in SUFFIXES))
    assert unknown == []
    assert all(n.startswith("crossdock_") for n in used)


def test_panels_have_unique_ids_and_do_not_overlap():
    panels = json.loads(DASHBOARD.read_text())["panels"]
    assert len({p["id"] for p in panels}) == len(panels)
    cells = set()
    for p in panels:
        g = p["gridPos"]
        assert g["x"] + g["w"] <= 24
        mine = {(x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])}
        assert not cells & mine, p["title"]
        cells |= mine
