"""The elastic day (``kind: elastic`` scenario files): one day of trace arrivals on autoscaled
CPU and GPU pools, under static peak provisioning, crossdock's autoscaler and a KEDA-like poll.

A scenario file holds a crossdock admin config (``cluster:``, validated by
:func:`crossdock.queue.config.parse_config`: pools with ``node_template``, ``min_nodes``,
``max_nodes``; queues with ``elastic``; the ``autoscaler`` block), the trace and how it becomes
a day (:func:`crossdock.sim.day.trace_day`), which queue takes GPU and CPU-only jobs, the node
provisioning delay and the KEDA-like poll's periods. :func:`run_day` runs the same arrivals
under every setup; the KEDA-like setup reads the same ``elastic`` blocks (``per_replica``,
``activation``, ``cooldown_seconds``, ``min``, ``max``) and the same ``autoscaler`` block.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Literal, Sequence

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from crossdock.queue.config import ClusterConfig, parse_config
from crossdock.queue.errors import ConfigError
from crossdock.sim.autoscalers import CrossdockPlan, KedaPoll, StaticPeak
from crossdock.sim.day import DAY_S, DayJob, trace_day
from crossdock.sim.elastic import ElasticResult, ElasticSim, elastic_jobs
from crossdock.sim.scenario import ScenarioError
from crossdock.sim.trace import DATA, TraceError, load_pods

SETUPS = ("static", "crossdock", "keda")


class _M(BaseModel):
    model_config = ConfigDict(extra="forbid")


class TraceSpec(_M):
    pods: str = "openb_pod_list_default.csv"
    """A pod list with submit times: absolute, or a file of ``crossdock/sim/data`` (the default
    list there is byte-identical to ``../shared/traces/alibaba-gpu-v2023-openb/``'s)."""
    fraction: float = Field(1.0, gt=0, le=1)
    max_duration_hours: float = Field(4.0, gt=0)
    min_duration_seconds: float = Field(60.0, gt=0)


class Route(_M):
    gpu: str
    cpu: str


class KedaSpec(_M):
    poll_seconds: float = Field(30.0, gt=0)
    scan_seconds: float = Field(10.0, gt=0)


class ElasticScenario(_M):
    kind: Literal["elastic"]
    name: str
    description: str = ""
    trace: TraceSpec = Field(default_factory=TraceSpec)
    drain_hours: float = Field(1.0, ge=0)
    """The run goes on this long after the day, so that late arrivals can start in every setup."""
    provision_seconds: float = Field(60.0, ge=0)
    route: Route
    keda: KedaSpec = Field(default_factory=KedaSpec)
    plan_idle_seconds: float | None = Field(None, gt=0)
    cluster: dict[str, Any]


def scenario_kind(path: str | Path) -> str:
    """``elastic``, ``casestudy`` (:mod:`crossdock.sim.casestudy`) or ``placement`` (the what-if
    files of :mod:`crossdock.sim.scenario`)."""
    try:
        data = yaml.safe_load(Path(path).read_text())
    except (OSError, yaml.YAMLError):
        return "placement"  # load_scenario reports it
    kind = data.get("kind") if isinstance(data, dict) else None
    return kind if kind in ("elastic", "casestudy") else "placement"


def load_elastic(path: str | Path) -> tuple[ElasticScenario, ClusterConfig]:
    p = Path(path)
    try:
        sc = ElasticScenario.model_validate(yaml.safe_load(p.read_text()))
    except OSError as exc:
        raise ScenarioError(f"{p}: cannot read: {exc.strerror}") from None
    except ValidationError as exc:
        raise ScenarioError(f"{p}: " + "; ".join(f"{'.'.join(str(x) for x in e['loc'])}: {e['msg']}"
                                                 for e in exc.errors())) from None
    try:
        config = parse_config(sc.cluster, f"{p}: cluster")
    except ConfigError as exc:
        raise ScenarioError(f"{p}: cluster: {exc}") from None
    for side, queue in (("gpu", sc.route.gpu), ("cpu", sc.route.cpu)):
        if queue not in config.queues:
            raise ScenarioError(f"{p}: route.{side}: unknown queue {queue!r}; defined: {', '.join(config.queues)}")
    return sc, config


def scenario_day(sc: ElasticScenario, seed: int, pods: str | Path | None = None) -> list[DayJob]:
    path = Path(pods or sc.trace.pods)
    if not path.is_absolute() and not path.exists():
        path = DATA / path
    try:
        table = load_pods(path)
    except TraceError as exc:
        raise ScenarioError(str(exc)) from None
    return trace_day(table, seed=seed, fraction=sc.trace.fraction, max_duration_s=sc.trace.max_duration_hours * 3600,
                     min_duration_s=sc.trace.min_duration_seconds)


def run_day(config: ClusterConfig, day: Sequence[DayJob], route: dict[str, str], *, seed: int = 42,
            setups: Sequence[str] = SETUPS, hours: float = 24.0, drain_hours: float = 1.0,
            provision_s: float = 60.0, keda_poll_s: float = 30.0, keda_scan_s: float = 10.0,
            planner: Callable | None = None, plan_idle_s: float | None = None,
            keda_factors: Sequence[float] = ()) -> dict[str, ElasticResult]:
    """The same arrivals under each setup (``static``, ``crossdock``, ``keda``), and the KEDA-like
    poll again with every ``per_replica`` times each of ``keda_factors`` (setups ``keda×F``)."""
    out = {}
    for name in [*setups, *(f"keda×{f:g}" for f in keda_factors)]:
        if name == "static":
            scaler, initial = StaticPeak(), "max"
        elif name == "crossdock":
            scaler, initial = CrossdockPlan(config, planner, idle_s=plan_idle_s), "min"
        elif name == "keda" or name.startswith("keda×"):
            factor = float(name.partition("×")[2] or 1)
            scaler, initial = KedaPoll(config, keda_poll_s, keda_scan_s, per_replica_factor=factor), "min"
        else:
            raise ValueError(f"unknown setup {name!r}; choose from {', '.join(SETUPS)}")
        sim = ElasticSim(config, elastic_jobs(config, day, route), scaler, horizon_s=(hours + drain_hours) * 3600,
                         provision_s=provision_s, initial=initial, seed=seed)
        result = sim.run()
        if isinstance(scaler, CrossdockPlan):
            result.extra.update(plan_passes=scaler.passes, plan_ms_per_pass=round(
                1000 * scaler.wall_s / max(scaler.passes, 1), 2))
        out[name] = result
    return out


def run_elastic(sc: ElasticScenario, config: ClusterConfig, seed: int = 42, pods: str | Path | None = None,
                setups: Sequence[str] = SETUPS, planner: Callable | None = None,
                keda_factors: Sequence[float] = ()) -> dict[str, ElasticResult]:
    day = scenario_day(sc, seed, pods)
    return run_day(config, day, sc.route.model_dump(), seed=seed, setups=setups, hours=DAY_S / 3600,
                   drain_hours=sc.drain_hours, provision_s=sc.provision_seconds, keda_poll_s=sc.keda.poll_seconds,
                   keda_scan_s=sc.keda.scan_seconds, planner=planner, plan_idle_s=sc.plan_idle_seconds,
                   keda_factors=keda_factors)


def plot_elastic(sc: ElasticScenario, results: dict[str, ElasticResult], path: str | Path) -> Path:
    from crossdock.sim.plot import plot_elastic_day

    series = {r.setup: (r.samples[:, 0], r.samples[:, 1:-1].sum(axis=1)) for k, r in results.items() if k in SETUPS}
    rows = [(r.setup, r.summary()) for r in results.values()]
    metrics = [("node_hours", "node-hours"), ("wait_p95_s", "queue wait p95 (s)"),
               ("wait_p99_s", "queue wait p99 (s)"), ("waited", "jobs that waited > 1 s"),
               ("never_started", "jobs never started")]
    return plot_elastic_day(series, rows, metrics, path, title=f"{sc.name}: one day, same arrivals")
