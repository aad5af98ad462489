"""What-if scenarios: one cluster, one synthetic workload, several scheduler setups compared on
the same arrivals (``configs/scenarios/*.yaml``).

A scenario names node pools, workload classes (Poisson arrivals with optional periodic bursts,
log-normal durations, GPU count or GPU share, CPU and memory) and setups. A setup gives each
class its pools (tried in order), placement policy, priority and preemptibility, and switches
preemption and defragmentation on or off. :func:`run_scenario` draws the arrivals once per seed
and replays them under every setup with :func:`crossdock.sim.dynamic.simulate`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from crossdock.sim.cluster import PodReq
from crossdock.sim.dynamic import DynamicResult, SimJob, simulate
from crossdock.sim.policies import POLICIES, get_policy, weight_errors
from crossdock.sim.trace import MILLI, NodeTable, PodTable
from crossdock.queue.errors import CrossdockError
from crossdock.queue.scheduler.plugins import gpu_frag


class ScenarioError(CrossdockError):
    """A scenario file is invalid; the message lists every problem with its path."""


class _M(BaseModel):
    model_config = ConfigDict(extra="forbid")


class PoolSpec(_M):
    nodes: int = Field(ge=1)
    cpu: int = Field(ge=1, description="cores per node")
    memory_gib: int = Field(ge=1)
    gpus: int = Field(0, ge=0, le=8)
    gpu_model: str | None = None

    @model_validator(mode="after")
    def _model_for_gpus(self) -> "PoolSpec":
        if self.gpus and not self.gpu_model:
            raise ValueError("a pool with GPUs needs gpu_model")
        return self


class Burst(_M):
    every_hours: float = Field(gt=0)
    length_minutes: float = Field(gt=0)
    factor: float = Field(ge=1)


class Duration(_M):
    median_minutes: float = Field(gt=0)
    sigma: float = Field(0.5, ge=0)


class WorkloadSpec(_M):
    rate_per_hour: float = Field(gt=0)
    burst: Burst | None = None
    gpus: dict[int, float] = Field(default_factory=dict, description="GPU count -> probability")
    gpu_share: dict[int, float] = Field(default_factory=dict, description="milli-GPU of one GPU -> probability")
    cpu: float = Field(0, ge=0, description="cores per job")
    cpu_per_gpu: float = Field(0, ge=0)
    memory_gib: float = Field(0, ge=0)
    memory_gib_per_gpu: float = Field(0, ge=0)
    duration: Duration

    @model_validator(mode="after")
    def _one_gpu_shape(self) -> "WorkloadSpec":
        if self.gpus and self.gpu_share:
            raise ValueError("give gpus or gpu_share, not both")
        for table in (self.gpus, self.gpu_share):
            if table and abs(sum(table.values()) - 1) > 1e-6:
                raise ValueError(f"probabilities must sum to 1, got {sum(table.values()):g}")
        if any(not 0 < m < MILLI + 1 for m in self.gpu_share):
            raise ValueError("gpu_share keys are milli-GPU in 1..1000")
        if any(not 0 < g <= 8 for g in self.gpus):
            raise ValueError("gpus keys are GPU counts in 1..8")
        return self


class ClassSetup(_M):
    pools: list[str] = Field(min_length=1)
    placement: str = "crossdock"
    priority: int = 0
    preemptible: bool = False
    checkpoint_minutes: float = Field(0, ge=0, description="a preempted job keeps its progress in these steps")
    plugin_weights: dict[str, int] = Field(default_factory=dict, description=(
        "resource weights of the binpack, spread and most-requested scores (cpu, memory, nvidia.com/gpu; 1 each "
        "when not given), as a live queue's plugin_weights"))
    service: bool = Field(False, description=(
        "the class's jobs are replicas of one service: each goes among the feasible nodes to those holding the "
        "fewest of its replicas, as the live ServiceSpread spreads an inference service"))


class Setup(_M):
    label: str = ""
    preemption: bool = False
    defragmentation: bool = False
    descheduler: dict[str, Any] | None = None
    """The live descheduler (``crossdock.queue.deschedule``) with this ``descheduler:`` config block
    (``interval_seconds`` is simulated time); None: off."""
    classes: dict[str, ClassSetup]


class Scenario(_M):
    name: str
    description: str = ""
    hours: float = Field(gt=0)
    pools: dict[str, PoolSpec]
    workloads: dict[str, WorkloadSpec]
    setups: dict[str, Setup]

    @model_validator(mode="after")
    def _references(self) -> "Scenario":
        errors = []
        for sname, setup in self.setups.items():
            for c in self.workloads:
                if c not in setup.classes:
                    errors.append(f"setups.{sname}.classes: class {c!r} has no setup")
            for cname, cs in setup.classes.items():
                if cname not in self.workloads:
                    errors.append(f"setups.{sname}.classes.{cname}: unknown class; defined: {', '.join(self.workloads)}")
                for p in cs.pools:
                    if p not in self.pools:
                        errors.append(f"setups.{sname}.classes.{cname}.pools: unknown pool {p!r}")
                if cs.placement not in POLICIES:
                    errors.append(f"setups.{sname}.classes.{cname}.placement: unknown {cs.placement!r}; "
                                  f"choose one of {', '.join(POLICIES)}")
                elif cs.plugin_weights:
                    errors += [f"setups.{sname}.classes.{cname}.{e}" for e in weight_errors(cs.placement, cs.plugin_weights)]
        if errors:
            raise ValueError("; ".join(errors))
        return self


def load_scenario(path: str | Path) -> Scenario:
    p = Path(path)
    try:
        data = yaml.safe_load(p.read_text())
    except OSError as exc:
        raise ScenarioError(f"{p}: cannot read: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise ScenarioError(f"{p}: not valid YAML: {exc}") from None
    try:
        return Scenario.model_validate(data)
    except ValidationError as exc:
        lines = [f"{'.'.join(str(x) for x in e['loc'])}: {e['msg']}" for e in exc.errors()]
        raise ScenarioError(f"{p}: " + "; ".join(lines)) from None


def build_nodes(sc: Scenario) -> tuple[NodeTable, dict[str, np.ndarray]]:
    names, cpu, mem, gpus, model_names, pool_of = [], [], [], [], [], []
    for pname, spec in sc.pools.items():
        for i in range(spec.nodes):
            names.append(f"{pname}-{i:03d}")
            cpu.append(spec.cpu * 1000)
            mem.append(spec.memory_gib * 1024)
            gpus.append(spec.gpus)
            model_names.append(spec.gpu_model if spec.gpus else "")
            pool_of.append(pname)
    models = tuple(sorted({m for m in model_names if m}))
    table = NodeTable(tuple(names), np.array(cpu, np.int64), np.array(mem, np.int64), np.array(gpus, np.int64),
                      np.array([models.index(m) if m else -1 for m in model_names], np.int64), models, sc.name)
    pools = {p: np.flatnonzero(np.array(pool_of) == p) for p in sc.pools}
    return table, pools


def _arrivals(spec: WorkloadSpec, hours: float, rng: np.random.Generator) -> np.ndarray:
    """Poisson arrival times (s); during bursts the rate is multiplied by ``factor`` (thinning)."""
    peak = spec.rate_per_hour * (spec.burst.factor if spec.burst else 1.0)
    n = rng.poisson(peak * hours)
    t = np.sort(rng.uniform(0, hours, n))
    if spec.burst:
        in_burst = (t % spec.burst.every_hours) < spec.burst.length_minutes / 60
        keep = in_burst | (rng.uniform(0, 1, n) < 1 / spec.burst.factor)
        t = t[keep]
    return t * 3600


def trace_arrivals(spec: WorkloadSpec, hours: float, times_of_day: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """As many arrivals as the Poisson process would give, at times of day drawn from a trace's
    own submit times (its diurnal shape; bursts come from the trace, not from ``burst``)."""
    n = rng.poisson(spec.rate_per_hour * hours)
    days = int(np.ceil(hours / 24))
    t = rng.choice(times_of_day, size=n) + rng.integers(0, days, size=n) * 86400.0
    return np.sort(t[t < hours * 3600])


def generate_jobs(sc: Scenario, seed: int, times_of_day: np.ndarray | None = None) -> list[dict[str, Any]]:
    """The scenario's arrivals, identical for every setup of a seed; ``times_of_day`` (seconds in
    0–86400, e.g. the Alibaba trace's submit times folded onto a day) replaces the Poisson timing."""
    rng = np.random.default_rng(seed)
    out: list[dict[str, Any]] = []
    for klass, spec in sc.workloads.items():
        times = (_arrivals(spec, sc.hours, rng) if times_of_day is None
                 else trace_arrivals(spec, sc.hours, times_of_day, rng))
        n = len(times)
        if spec.gpus:
            keys = np.array(list(spec.gpus))
            num = rng.choice(keys, size=n, p=np.array(list(spec.gpus.values())))
            milli = np.full(n, MILLI)
        elif spec.gpu_share:
            keys = np.array(list(spec.gpu_share))
            milli = rng.choice(keys, size=n, p=np.array(list(spec.gpu_share.values())))
            num = np.ones(n, np.int64)
        else:
            num = np.zeros(n, np.int64)
            milli = np.zeros(n, np.int64)
        gpu_amount = num * milli / MILLI
        cpu = np.round((spec.cpu + spec.cpu_per_gpu * np.ceil(gpu_amount)) * 1000).astype(np.int64)
        mem = np.round((spec.memory_gib + spec.memory_gib_per_gpu * np.ceil(gpu_amount)) * 1024).astype(np.int64)
        dur = spec.duration.median_minutes * 60 * np.exp(rng.normal(0, spec.duration.sigma, n)) if spec.duration.sigma \
            else np.full(n, spec.duration.median_minutes * 60)
        for i in range(n):
            out.append({"klass": klass, "arrival": float(times[i]), "duration": float(max(dur[i], 1.0)),
                        "cpu": int(cpu[i]), "mem": int(mem[i]), "num": int(num[i]),
                        "milli": int(milli[i]) if num[i] else 0})
    out.sort(key=lambda j: (j["arrival"], j["klass"]))
    return out


def _typical(jobs: list[dict[str, Any]]) -> gpu_frag.TypicalPods | None:
    gpu = [j for j in jobs if j["num"]]
    if not gpu:
        return None
    return gpu_frag.typical_pods(np.array([j["cpu"] for j in gpu]), np.array([j["milli"] for j in gpu]),
                                 np.array([j["num"] for j in gpu]), np.full(len(gpu), PodTable.ANY))


def run_setup(sc: Scenario, setup_name: str, jobs: list[dict[str, Any]], seed: int, observer: Any = None,
              sample_every_s: float = 300.0) -> DynamicResult:
    """One setup on ``jobs``; ``observer(sim, now)`` is called at every sample. A ``descheduler``
    block with ``evict_only: true`` evicts as the upstream descheduler does (no destination kept)."""
    setup = sc.setups[setup_name]
    nodes, pools = build_nodes(sc)
    sim_jobs = []
    # A class with resource weights of its own places with a policy of its own, named after it.
    policy_of = {c: f"{cs.placement}@{c}" if cs.plugin_weights else cs.placement for c, cs in setup.classes.items()}
    policies = {policy_of[c]: get_policy(cs.placement, cs.plugin_weights) for c, cs in setup.classes.items()}
    for k, j in enumerate(jobs):
        cs = setup.classes[j["klass"]]
        allowed = np.unique(np.concatenate([pools[p] for p in cs.pools]))
        sim_jobs.append(SimJob(k, j["klass"], j["arrival"], j["duration"],
                               PodReq(j["cpu"], j["mem"], j["num"], j["milli"], PodTable.ANY, k),
                               cs.priority, cs.preemptible and setup.preemption, policy_of[j["klass"]], allowed,
                               pools=[pools[p] for p in cs.pools], checkpoint_s=cs.checkpoint_minutes * 60,
                               service=cs.service))
    desched = None
    if setup.descheduler is not None:
        from crossdock.sim.deschedule import SimDescheduler, sim_config

        block = dict(setup.descheduler)
        interval = float(block.pop("interval_seconds", 300))
        evict_only = bool(block.pop("evict_only", False))
        classes = {c: {"priority": cs.priority, "preemptible": cs.preemptible, "pools": cs.pools,
                       "placement": cs.placement} for c, cs in setup.classes.items()}
        pool_of = [""] * len(nodes)
        for p, idx in pools.items():
            for i in idx.tolist():
                pool_of[i] = p
        desched = SimDescheduler(sim_config(classes, list(sc.pools), block), pool_of, interval, evict_only)
    result = simulate(nodes, sim_jobs, _typical(jobs), seed=seed, preemption=setup.preemption,
                      defrag=setup.defragmentation, horizon_s=sc.hours * 3600, sample_every_s=sample_every_s,
                      descheduler=desched, observer=observer, policies=policies)
    result.extra["setup"] = setup_name
    result.extra["label"] = setup.label
    return result


def run_scenario(sc: Scenario, seed: int = 42, times_of_day: np.ndarray | None = None) -> dict[str, DynamicResult]:
    jobs = generate_jobs(sc, seed, times_of_day)
    return {name: run_setup(sc, name, jobs, seed) for name in sc.setups}


def headline(result: DynamicResult, inference: str = "inference", training: str = "training") -> dict[str, float]:
    """The five numbers the what-if chart shows."""
    s = result.summary()
    delay = s["queueing_delay"].get(inference, {})
    return {
        "gpu_util": s["gpu_util_pct_avg"],
        "inference_p99_min": delay.get("p99_min") or 0.0,
        "training_gpu_h_per_day": round(s["completed_gpu_hours"].get(training, 0.0) / max(result.horizon_h, 1e-9) * 24, 1),
        "preemptions": float(s["preemptions"]),
        "fragmented_gpus": s["fragmented_gpus_avg"],
        "scattered_free_gpus": s["scattered_free_gpus_avg"],
    }


def plot_scenario(sc: Scenario, results: dict[str, DynamicResult], path: str | Path) -> Path:
    from crossdock.sim.plot import plot_bars

    rows = [(results[name].extra.get("label") or name, headline(r)) for name, r in results.items()]
    metrics = [("gpu_util", "GPU utilization (%)"), ("inference_p99_min", "inference queueing p99 (min)"),
               ("training_gpu_h_per_day", "training GPU-h done / day"), ("preemptions", "preemptions"),
               ("scattered_free_gpus", "idle GPUs on partly used nodes (avg)")]
    return plot_bars(rows, metrics, path, title=f"{sc.name}: {sc.hours:g} h, same arrivals")
