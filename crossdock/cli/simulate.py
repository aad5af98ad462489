"""``crossdock simulate``: replay a cluster and a workload through placement policies.

Static packing by default (the FGD paper's experiment), ``compare`` for a policy × seed grid,
``replay`` for the dynamic mode with arrivals, departures, queueing and preemption, and
``scenario`` for the reference what-if. Thin: parse, call ``crossdock.sim``, print.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Optional

import typer
from rich.console import Console
from rich.table import Table

app = typer.Typer(help="Simulate placement policies on a real cluster trace (no Redis, no backends).",
                  add_completion=False, pretty_exceptions_enable=False)
console = Console(width=None if sys.stdout.isatty() else 160)
err = Console(stderr=True)

NODES_OPT = typer.Option(None, "--nodes", help="node list CSV (default: the openb GPU node list, shipped in "
                         "crossdock/sim/data)")
PODS_OPT = typer.Option(None, "--pods", help="pod list CSV (default: openb_pod_list_default.csv, shipped in "
                        "crossdock/sim/data)")
TUNE_OPT = typer.Option(1.3, "--tune", help="workload size as a multiple of the cluster's GPUs")
SAMPLING_OPT = typer.Option("trace", "--sampling", help="trace (FGD artifact: whole list shuffled, then topped up) "
                            "or uniform (draws with replacement)")
TIES_OPT = typer.Option("fixed", "--ties", help="fixed (first node of a per-seed shuffled order, as the FGD "
                        "artifact's scheduler) or random (upstream kube-scheduler)")


def _fail(message: str, code: int = 2) -> None:
    err.print(f"crossdock simulate: error: {message}", markup=False, highlight=False, soft_wrap=True)
    raise typer.Exit(code)


def _load(nodes: Optional[Path], pods: Optional[Path]):
    from crossdock.sim.trace import DEFAULT_NODES, DEFAULT_PODS, TraceError, load_nodes, load_pods

    try:
        node_table = load_nodes(nodes or DEFAULT_NODES)
        pod_table = load_pods(pods or DEFAULT_PODS, node_table.models)
    except TraceError as exc:
        _fail(str(exc))
    return node_table, pod_table


def _print_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=None, separators=(",", ":")) + "\n")


@app.callback(invoke_without_command=True)
def static(ctx: typer.Context,
           nodes: Optional[Path] = NODES_OPT, pods: Optional[Path] = PODS_OPT,
           policy: str = typer.Option("crossdock", "--policy", help="random, dotprod, packing, bestfit, fgd, "
                                      "crossdock, binpack, spread, most-requested"),
           seed: int = typer.Option(42, "--seed"), tune: float = TUNE_OPT,
           sampling: str = SAMPLING_OPT, ties: str = TIES_OPT,
           as_json: bool = typer.Option(False, "--json", help="print the result as JSON"),
           plot: Optional[Path] = typer.Option(None, "--plot", help="write the curves to this PNG")) -> None:
    """Static packing (FGD paper): place a tuned pod sample one by one, no departures."""
    if ctx.invoked_subcommand is not None:
        return
    from crossdock.sim.static import run_static

    node_table, pod_table = _load(nodes, pods)
    try:
        result = run_static(node_table, pod_table, policy, seed, tune, sampling, ties=ties)
    except ValueError as exc:
        _fail(str(exc))
    if plot is not None:
        from crossdock.sim.plot import plot_static

        plot_static({policy: [result.curve()]}, plot, title=Path(result.pod_list).name)
    if as_json:
        _print_json(result.to_json())
        return
    at = result.at(100)
    table = Table(title=f"static packing · {Path(result.pod_list).name} · seed {seed} · tune {tune}")
    for col in ("policy", "pods", "failed", "GPU alloc @100%", "frag @100%", "wall s"):
        table.add_column(col, justify="right" if col != "policy" else "left")
    table.add_row(policy, str(result.pods), str(result.failed_pods), f"{at['allocated_pct']:.2f}",
                  f"{at['fragmentation_pct']:.2f}", f"{result.wall_s:.1f}")
    console.print(table)


@app.command()
def compare(nodes: Optional[Path] = NODES_OPT, pods: Optional[Path] = PODS_OPT,
            policies: str = typer.Option("random,dotprod,packing,bestfit,fgd,crossdock", "--policies"),
            seeds: str = typer.Option("42-51", "--seeds", help="e.g. 42-51 or 42,43"),
            tune: float = TUNE_OPT, sampling: str = SAMPLING_OPT, ties: str = TIES_OPT,
            jobs: int = typer.Option(1, "--jobs", help="processes to run the grid in"),
            as_json: bool = typer.Option(False, "--json"),
            plot: Optional[Path] = typer.Option(None, "--plot", help="write median curves to this PNG")) -> None:
    """Run policies × seeds and print medians over seeds at 100 % arrived."""
    from crossdock.sim.static import parse_seeds, run_grid, summarize

    node_table, pod_table = _load(nodes, pods)
    try:
        seed_list = parse_seeds(seeds)
        names = [p.strip() for p in policies.split(",") if p.strip()]
        grid = run_grid(node_table, pod_table, names, seed_list, tune, sampling, ties, jobs)
    except ValueError as exc:
        _fail(str(exc))
    rows = summarize(grid)
    default_trace = Path(pod_table.source).name == "openb_pod_list_default.csv" and tune == 1.3
    if plot is not None:
        from crossdock.sim.plot import plot_static

        plot_static({p: [r.curve() for r in runs] for p, runs in grid.items()}, plot,
                    title=f"{Path(pod_table.source).name}, median of seeds {seeds}")
    if as_json:
        _print_json({"pods": Path(pod_table.source).name, "tune": tune, "seeds": seed_list, "rows": rows})
        return
    table = Table(title=f"{Path(pod_table.source).name} · seeds {seeds} · medians at 100 % arrived")
    cols = ["policy", "GPU alloc %", "min–max", "frag %", "failed pods", "wall s/run"]
    if default_trace:
        cols.insert(2, "published")
    for c in cols:
        table.add_column(c, justify="left" if c == "policy" else "right")
    for r in rows:
        cells = [r["policy"], f"{r['allocated_pct_median']:.2f}",
                 f"{r['allocated_pct_min']:.2f}–{r['allocated_pct_max']:.2f}", f"{r['fragmentation_pct_median']:.2f}",
                 f"{r['failed_pods_median']:.0f}", f"{r['wall_s_median']:.1f}"]
        if default_trace:
            pub = r["published_allocated_pct"]
            cells.insert(2, f"{pub:.1f}" if pub is not None else "—")
        table.add_row(*cells)
    console.print(table)


@app.command()
def replay(nodes: Optional[Path] = NODES_OPT, pods: Optional[Path] = PODS_OPT,
           policy: str = typer.Option("crossdock", "--policy"),
           seed: int = typer.Option(42, "--seed"),
           preemption: bool = typer.Option(True, "--preemption/--no-preemption"),
           time_scale: float = typer.Option(1.0, "--time-scale", help="divide inter-arrival times by this"),
           limit: int = typer.Option(0, "--limit", help="replay only the first N pods by creation time (0: all)"),
           as_json: bool = typer.Option(False, "--json"),
           plot: Optional[Path] = typer.Option(None, "--plot", help="write utilization over time to this PNG")) -> None:
    """Dynamic replay: arrivals and departures from creation/deletion times, with a queue,
    priorities (from qos) and preemption."""
    from crossdock.sim.dynamic import replay_trace

    node_table, pod_table = _load(nodes, pods)
    if not pod_table.has_times:
        _fail(f"{pod_table.source}: no creation_time/deletion_time columns; dynamic replay needs them")
    try:
        result = replay_trace(node_table, pod_table, policy, seed=seed, preemption=preemption,
                              time_scale=time_scale, limit=limit or None)
    except ValueError as exc:
        _fail(str(exc))
    if plot is not None:
        from crossdock.sim.plot import plot_timeseries

        plot_timeseries({policy: (result.times_h, result.gpu_util_pct)}, plot, "GPUs allocated (%)",
                        title=f"replay · {Path(pod_table.source).name}")
    summary = result.summary()
    if as_json:
        _print_json(summary)
        return
    _print_summary(f"dynamic replay · {Path(pod_table.source).name} · {policy}", summary)


@app.command()
def scenario(path: Path = typer.Argument(Path("configs/scenarios/mixed-gpu-cluster.yaml"), help="scenario YAML"),
             seed: int = typer.Option(42, "--seed"),
             pods: Optional[Path] = typer.Option(None, "--pods", help="elastic scenarios: a pod list with submit "
                                                 "times instead of the file's trace.pods; other scenarios: take the "
                                                 "arrivals' times of day from this pod list (the Alibaba arrivals)"),
             keda_factors: str = typer.Option("", "--keda-per-replica", help="elastic scenarios: also run the "
                                              "KEDA-like poll with every per_replica times these factors, e.g. 0.5,0.75"),
             as_json: bool = typer.Option(False, "--json"),
             plot: Optional[Path] = typer.Option(None, "--plot", help="write the comparison chart to this PNG")) -> None:
    """The reference what-if: each setup of a scenario file on the same arrivals. A file with
    ``kind: elastic`` is a day of trace arrivals on autoscaled pools: static peak provisioning,
    crossdock's autoscaler and a KEDA-like poll; ``kind: casestudy``: the case study's table
    (docs/casestudy.md)."""
    from crossdock.sim.elastic_scenario import scenario_kind
    from crossdock.sim.scenario import ScenarioError, load_scenario, run_scenario

    kind = scenario_kind(path)
    if kind == "elastic":
        _elastic(path, seed, pods, keda_factors, as_json, plot)
        return
    if kind == "casestudy":
        _casestudy(path, seed, as_json, plot)
        return
    try:
        sc = load_scenario(path)
    except ScenarioError as exc:
        _fail(str(exc))
    times_of_day = None
    if pods is not None:
        from crossdock.sim.trace import load_pods

        try:
            times_of_day = load_pods(pods).creation % 86400.0
        except (OSError, ValueError) as exc:
            _fail(f"--pods {pods}: {exc}")
    results = run_scenario(sc, seed=seed, times_of_day=times_of_day)
    if plot is not None:
        from crossdock.sim.scenario import plot_scenario

        plot_scenario(sc, results, plot)
    if as_json:
        _print_json({name: r.summary() for name, r in results.items()})
        return
    for name, r in results.items():
        _print_summary(f"{sc.name} · {name}", r.summary())


ELASTIC_COLUMNS = (("setup", "setup"), ("node_hours", "node-hours"), ("wait_p50_s", "wait p50 s"),
                   ("wait_p95_s", "wait p95 s"), ("wait_p99_s", "wait p99 s"), ("waited", "waited > 1 s"),
                   ("never_started", "never started"), ("scale_events", "scale events"),
                   ("nodes_added", "nodes added"))


def _elastic(path: Path, seed: int, pods: Optional[Path], keda_factors: str, as_json: bool,
             plot: Optional[Path]) -> None:
    from crossdock.sim.elastic_scenario import load_elastic, plot_elastic, run_elastic
    from crossdock.sim.scenario import ScenarioError

    try:
        factors = [float(f) for f in keda_factors.split(",") if f.strip()]
    except ValueError:
        _fail(f"--keda-per-replica: {keda_factors!r} is not a comma-separated list of numbers, e.g. 0.5,0.75")
    if any(f <= 0 for f in factors):
        _fail(f"--keda-per-replica: {keda_factors!r}: every factor must be > 0")
    try:
        sc, config = load_elastic(path)
        results = run_elastic(sc, config, seed=seed, pods=pods, keda_factors=factors)
    except (ScenarioError, ValueError) as exc:
        _fail(str(exc))
    if plot is not None:
        plot_elastic(sc, results, plot)
    rows = [r.summary() for r in results.values()]
    if as_json:
        _print_json({"scenario": sc.name, "seed": seed, "rows": rows})
        return
    table = Table(title=f"{sc.name} · seed {seed} · {rows[0]['jobs']} jobs in one day")
    for key, label in ELASTIC_COLUMNS:
        table.add_column(label, justify="left" if key == "setup" else "right")
    for r in rows:
        table.add_row(*(str(r[key]) for key, _ in ELASTIC_COLUMNS))
    console.print(table)


def _casestudy(path: Path, seed: int, as_json: bool, plot: Optional[Path]) -> None:
    from crossdock.sim.casestudy import load_casestudy, run_casestudy
    from crossdock.sim.casestudy_table import plot_table, render_table
    from crossdock.sim.scenario import ScenarioError

    try:
        cs = load_casestudy(path)
    except ScenarioError as exc:
        _fail(str(exc))
    data = run_casestudy(cs, seed=seed)
    if plot is not None:
        plot_table(data, plot)
    if as_json:
        _print_json(data)
        return
    sys.stdout.write(render_table(data) + "\n")


def _print_summary(title: str, summary: dict[str, Any]) -> None:
    table = Table(title=title)
    table.add_column("metric")
    table.add_column("value", justify="right")
    for key, value in summary.items():
        if isinstance(value, dict):
            value = ", ".join(f"{k}: {v}" for k, v in value.items())
        table.add_row(key, str(value))
    console.print(table)
