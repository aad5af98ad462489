"""The case study's table (Markdown, as docs/casestudy.md holds it) and chart."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

COLUMNS = (("gpu_utilisation_pct", "GPU util %"), ("gpu_allocated_pct", "GPUs allocated %"),
           ("inference_p99_ms", "inference P99 ms"), ("node_cpu_spread_pct", "node CPU spread (pts)"),
           ("training_blocked_by_fragmentation", "training blocked by fragmentation"),
           ("allreduce_efficiency_pct", "8-worker all-reduce eff. %"), ("gpu_hours_lost", "GPU-h lost"),
           ("preemptions", "preemptions"), ("migrations", "migrations"))

TARGETS = {"gpu_utilisation_pct": ("≥", 85.0), "inference_p99_ms": ("≤", 25.0),
           "allreduce_efficiency_pct": ("≥", 95.0), "node_cpu_spread_pct": ("≤", 20.0)}
"""The issue's targets for the ``crossdock`` row (the story's "after": 78 %, 30 ms, 92 %)."""


def _cell(value: Any) -> str:
    return "—" if value is None else str(value)


def render_table(data: Mapping[str, Any]) -> str:
    rows = data["setups"]
    classes = sorted({c for r in rows.values() for c in r["wait_p95_s"]})
    head = ["setup", *(label for _, label in COLUMNS), *(f"wait p95 {c} (s)" for c in classes)]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, r in rows.items():
        cells = [name, *(_cell(r.get(k)) for k, _ in COLUMNS), *(_cell(r["wait_p95_s"].get(c)) for c in classes)]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def targets_met(row: Mapping[str, Any]) -> dict[str, bool]:
    out = {}
    for key, (op, bound) in TARGETS.items():
        v = row.get(key)
        out[key] = v is not None and (v >= bound if op == "≥" else v <= bound)
    return out


def plot_table(data: Mapping[str, Any], path: str | Path) -> Path:
    from crossdock.sim.plot import plot_bars

    metrics = [("gpu_utilisation_pct", "GPU utilisation (%)"), ("inference_p99_ms", "inference P99 (ms)"),
               ("node_cpu_spread_pct", "node CPU spread (points)"),
               ("allreduce_efficiency_pct", "8-worker all-reduce (%)"), ("gpu_hours_lost", "GPU-hours lost")]
    rows = [(name.replace("+", "\n+").replace("-", "-\n"), {k: float(r.get(k) or 0.0) for k, _ in metrics})
            for name, r in data["setups"].items()]
    return plot_bars(rows, metrics, path, title=f"{data['scenario']}: same arrivals, seed {data['seed']}")
