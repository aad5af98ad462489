"""Charts for simulator results (matplotlib, drawn off-screen to PNG)."""

from __future__ import annotations

from pathlib import Path
from typing import Mapping, Sequence

import numpy as np


def _pyplot():
    try:
        import matplotlib
    except ImportError:  # pragma: no cover - depends on the environment
        raise RuntimeError("plotting needs matplotlib; install it with: pip install matplotlib") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def _save(plt, fig, path: str | Path, title: str = "") -> Path:
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def plot_static(curves: Mapping[str, Sequence[Sequence[Mapping[str, float]]]], path: str | Path,
                title: str = "") -> Path:
    """Allocation and fragmentation against arrived load, one line per policy.

    ``curves`` maps a policy name to one or more curves (one per seed, as produced by
    ``StaticResult.curve()``); several seeds are drawn as their median.
    """
    plt = _pyplot()
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.5))
    for name, runs in curves.items():
        x = np.array([p["arrived_pct"] for p in runs[0]])
        alloc = np.median([[p["allocated_pct"] for p in run] for run in runs], axis=0)
        frag = np.median([[p["fragmentation_pct"] for p in run] for run in runs], axis=0)
        ax1.plot(x, alloc, label=name)
        ax2.plot(x, frag, label=name)
    ax1.plot([0, 100], [0, 100], color="grey", lw=0.6, ls=":")
    ax1.set(xlabel="arrived GPU request (% of cluster GPUs)", ylabel="GPUs allocated (%)",
            title="GPU allocation", xlim=(0, 130), ylim=(0, 100))
    ax2.set(xlabel="arrived GPU request (% of cluster GPUs)", ylabel="fragmented GPUs (% of cluster)",
            title="GPU fragmentation", xlim=(0, 130))
    for ax in (ax1, ax2):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    return _save(plt, fig, path, title)


def plot_bars(rows: Sequence[tuple[str, Mapping[str, float]]], metrics: Sequence[tuple[str, str]],
              path: str | Path, title: str = "") -> Path:
    """One bar panel per metric, one bar per named row: ``rows`` = [(label, {metric: value})],
    ``metrics`` = [(key, axis label)]."""
    plt = _pyplot()
    fig, axes = plt.subplots(1, len(metrics), figsize=(3.2 * len(metrics), 3.8))
    axes = np.atleast_1d(axes)
    labels = [r[0] for r in rows]
    colors = ["#8c8c8c", "#1f77b4", "#2ca02c", "#d62728", "#9467bd", "#ff7f0e", "#17becf"][: len(rows)]
    for ax, (key, label) in zip(axes, metrics):
        values = [r[1].get(key, 0.0) for r in rows]
        bars = ax.bar(range(len(rows)), values, color=colors)
        ax.set_xticks(range(len(rows)), labels, fontsize=8)
        ax.set_title(label, fontsize=9)
        for b, v in zip(bars, values):
            ax.annotate(f"{v:.3g}", (b.get_x() + b.get_width() / 2, b.get_height()), ha="center",
                        va="bottom", fontsize=8)
        ax.grid(axis="y", alpha=0.3)
    return _save(plt, fig, path, title)


def plot_timeseries(series: Mapping[str, tuple[Sequence[float], Sequence[float]]], path: str | Path,
                    ylabel: str, title: str = "", xlabel: str = "time (hours)") -> Path:
    """Lines over time: ``series`` maps a label to (times, values)."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8, 3.8))
    for name, (t, v) in series.items():
        ax.plot(t, v, label=name, lw=1)
    ax.set(xlabel=xlabel, ylabel=ylabel, title=title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return _save(plt, fig, path)


def plot_elastic_day(series: Mapping[str, tuple[Sequence[float], Sequence[float]]],
                     rows: Sequence[tuple[str, Mapping[str, float]]], metrics: Sequence[tuple[str, str]],
                     path: str | Path, title: str = "") -> Path:
    """Nodes over the day, one line per setup (``series``: label → (hours, nodes)), beside one bar
    panel per metric (``rows`` and ``metrics`` as in :func:`plot_bars`)."""
    plt = _pyplot()
    fig = plt.figure(figsize=(3.0 * len(metrics) + 6, 3.8))
    grid = fig.add_gridspec(1, len(metrics) + 2)
    ax = fig.add_subplot(grid[0, :2])
    colors = ["#8c8c8c", "#1f77b4", "#d62728", "#ff9896", "#e377c2", "#f7b6d2", "#c49c94", "#2ca02c"]
    for (name, (t, v)), c in zip(series.items(), colors):
        ax.step(t, v, where="post", label=name, lw=1, color=c)
    ax.set(xlabel="time of day (hours)", ylabel="nodes (starting + ready)", title="nodes over the day")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    for k, (key, label) in enumerate(metrics):
        bx = fig.add_subplot(grid[0, k + 2])
        values = [r[1].get(key) or 0.0 for r in rows]
        bars = bx.bar(range(len(rows)), values, color=colors[: len(rows)])
        bx.set_xticks(range(len(rows)), [r[0].replace(" ", "\n", 1) for r in rows], fontsize=6,
                      rotation=90 if len(rows) > 3 else 0)
        bx.set_title(label, fontsize=9)
        bx.set_ylim(0, max(max(values) * 1.12, 1))
        for b, v in zip(bars, values):
            bx.annotate(f"{v:.4g}", (b.get_x() + b.get_width() / 2, b.get_height()), ha="center", va="bottom",
                        fontsize=7)
        bx.grid(axis="y", alpha=0.3)
    return _save(plt, fig, path, title)
