"""The case study (``kind: casestudy`` files, ``configs/scenarios/casestudy.yaml``): one company's
mixed cluster before and after crossdock's policy table, every lever on its own, on the same
arrivals, measured with the models of :mod:`crossdock.sim.contention`.

The arrivals: a saturating training backlog (a queue at time 0 and arrivals above the cluster's
GPUs; GPU count and duration drawn together from the Alibaba openb trace's whole-GPU pods), an
8-worker job every few hours, inference replicas with bursts, preprocessing waves. Every setup places them with
:func:`crossdock.sim.scenario.run_setup` (crossdock's placement scores, preemption and
descheduler come from ``crossdock.queue``); an observer reads the cluster every sample and
measures what the story measured: CPU each job gets on its node, inference P99, the spread of
node CPU, training blocked by fragmentation, the all-reduce efficiency of the 8-worker jobs where
their workers ran. Method and sources: docs/casestudy.md.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import yaml
from pydantic import Field, ValidationError, model_validator

from crossdock.sim.casestudy_observe import Observer
from crossdock.sim.scenario import ClassSetup, PoolSpec, Scenario, ScenarioError, Setup, WorkloadSpec, _M, \
    generate_jobs, run_setup
from crossdock.sim.trace import DATA, MILLI, load_pods

TRAINING, LARGE, DISTRIBUTED = "training", "training-large", "distributed"


class TrainingSpec(_M):
    pods: str = Field("openb_pod_list_default.csv", description="a pod list shipped in crossdock/sim/data, or a path")
    backlog_jobs: int = Field(ge=0, description="jobs waiting at time 0")
    load: float = Field(gt=0, description="arriving GPU-hours per hour over the cluster's GPUs")
    cpu_use_per_gpu: float = Field(gt=0, description="cores a job really uses per GPU")
    memory_gib_per_gpu: float = Field(0, ge=0)
    min_minutes: float = Field(1, gt=0)
    max_hours: float = Field(24, gt=0)
    large_from_gpus: int = Field(4, ge=1, le=8, description="jobs of this many GPUs or more are class training-large")


class CpuModel(_M):
    base_p99_ms: float = Field(gt=0)
    rho0: float = Field(gt=0, lt=1)
    period_ms: float = Field(gt=0)
    timeout_ms: float = Field(gt=0)
    burst_demand: float = Field(1.0, ge=1)


class AllreduceModel(_M):
    compute_to_comm: float = Field(gt=0)
    nvlink_speedup: float = Field(ge=1)
    comm_efficiency: dict[int, float]


class Distributed(_M):
    workers: int = Field(ge=2, le=8)
    gpus_per_worker: int = Field(1, ge=1, le=8)
    cpu_per_worker: float = Field(ge=0)
    memory_gib_per_worker: float = Field(0, ge=0)
    every_hours: float = Field(gt=0, description="one such job is submitted this often")
    duration_hours: float = Field(gt=0)


class Models(_M):
    cpu: CpuModel
    allreduce: AllreduceModel


class CaseClass(ClassSetup):
    cpu_request_ratio: float = Field(1.0, gt=0, le=2, description="CPU request / real use")
    cpu_limit_ratio: float | None = Field(None, gt=0, description="CPU limit / request; None: no CFS quota")


class CaseSetup(Setup):
    classes: dict[str, CaseClass]  # type: ignore[assignment]
    one_domain: bool = Field(False, description="the multi-worker job is one gang on one NVLink domain; "
                             "otherwise its workers are placed one by one, each where the placement puts it")
    table: bool = Field(True, description="in the table (run by default); false: a variant run when named")


class CaseStudy(_M):
    kind: str = "casestudy"
    name: str
    description: str = ""
    hours: float = Field(gt=0)
    sample_minutes: float = Field(5, gt=0)
    pools: dict[str, PoolSpec]
    training: TrainingSpec
    workloads: dict[str, WorkloadSpec]
    distributed: Distributed
    models: Models
    setups: dict[str, CaseSetup]

    @model_validator(mode="after")
    def _check(self) -> "CaseStudy":
        for c in (TRAINING, LARGE, DISTRIBUTED):
            if c in self.workloads:
                raise ValueError(f"workloads.{c}: this class comes from the training: and distributed: blocks")
        gang = self.distributed.workers * self.distributed.gpus_per_worker
        if not any(p.gpus >= gang for p in self.pools.values()):
            raise ValueError(f"distributed: {gang} GPUs fit no node of any pool")
        self.scenario()  # pools, classes and placements are checked as for any scenario
        return self

    def scenario(self) -> Scenario:
        stand_in = WorkloadSpec(rate_per_hour=1, gpus={1: 1.0}, duration={"median_minutes": 60})
        return Scenario(name=self.name, hours=self.hours, pools=self.pools,
                        workloads={TRAINING: stand_in, LARGE: stand_in, DISTRIBUTED: stand_in, **self.workloads},
                        setups={n: _plain(s) for n, s in self.setups.items()})


def _plain(s: CaseSetup) -> Setup:
    classes = {c: ClassSetup(**v.model_dump(exclude={"cpu_request_ratio", "cpu_limit_ratio"}))
               for c, v in s.classes.items()}
    return Setup(label=s.label, preemption=s.preemption, defragmentation=s.defragmentation,
                 descheduler=s.descheduler, classes=classes)


def load_casestudy(path: str | Path) -> CaseStudy:
    p = Path(path)
    try:
        return CaseStudy.model_validate(yaml.safe_load(p.read_text()))
    except OSError as exc:
        raise ScenarioError(f"{p}: cannot read: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise ScenarioError(f"{p}: not valid YAML: {exc}") from None
    except ValidationError as exc:
        lines = [f"{'.'.join(str(x) for x in e['loc'])}: {e['msg']}" for e in exc.errors()]
        raise ScenarioError(f"{p}: " + "; ".join(lines)) from None


def training_jobs(cs: CaseStudy, rng: np.random.Generator) -> list[dict[str, Any]]:
    """The backlog and the arrivals: (GPUs, duration) pairs of the trace's whole-GPU pods."""
    spec = cs.training
    path = DATA / spec.pods if (DATA / spec.pods).exists() else Path(spec.pods)
    pods = load_pods(path)
    whole = (pods.num_gpu >= 1) & (pods.gpu_milli == MILLI) & (pods.scheduled >= 0) & (pods.deletion >= 0)
    num = pods.num_gpu[whole]
    dur = np.clip(pods.deletion[whole] - pods.scheduled[whole], spec.min_minutes * 60, spec.max_hours * 3600)
    gpu_h = float((num * dur).mean()) / 3600
    rate = spec.load * sum(p.nodes * p.gpus for p in cs.pools.values()) / gpu_h  # jobs per hour
    n_arr = rng.poisson(rate * cs.hours)
    times = np.concatenate([np.zeros(spec.backlog_jobs), np.sort(rng.uniform(0, cs.hours * 3600, n_arr))])
    pick = rng.integers(0, len(num), len(times))
    return [{"klass": LARGE if num[i] >= spec.large_from_gpus else TRAINING, "arrival": float(t), "duration": float(dur[i]),
             "cpu": int(round(spec.cpu_use_per_gpu * num[i] * 1000)),
             "mem": int(round(spec.memory_gib_per_gpu * num[i] * 1024)), "num": int(num[i]), "milli": MILLI}
            for t, i in zip(times, pick)]


def distributed_jobs(cs: CaseStudy) -> list[dict[str, Any]]:
    """The multi-worker job, submitted every ``every_hours`` as one gang (``gang`` numbers it)."""
    d = cs.distributed
    out = []
    for k, t in enumerate(np.arange(0.0, cs.hours, d.every_hours) * 3600):
        out.append({"klass": DISTRIBUTED, "arrival": float(t) + 1.0, "duration": d.duration_hours * 3600,
                    "cpu": int(round(d.cpu_per_worker * d.workers * 1000)),
                    "mem": int(round(d.memory_gib_per_worker * d.workers * 1024)),
                    "num": d.workers * d.gpus_per_worker, "milli": MILLI, "gang": k})
    return out


def as_workers(job: dict[str, Any], workers: int) -> list[dict[str, Any]]:
    """A gang's workers as separate jobs (what a scheduler without gangs places)."""
    return [{**job, "cpu": job["cpu"] // workers, "mem": job["mem"] // workers, "num": job["num"] // workers}
            for _ in range(workers)]


def arrivals(cs: CaseStudy, seed: int) -> list[dict[str, Any]]:
    """Every job with its real CPU use as ``cpu`` (a setup's requests scale it)."""
    rng = np.random.default_rng(seed)
    others = Scenario.model_construct(name=cs.name, hours=cs.hours, pools=cs.pools, workloads=cs.workloads, setups={})
    jobs = training_jobs(cs, rng) + distributed_jobs(cs) + generate_jobs(others, seed + 1)
    jobs.sort(key=lambda j: (j["arrival"], j["klass"]))
    return jobs


def run_casestudy(cs: CaseStudy, seed: int = 42, setups: list[str] | None = None) -> dict[str, dict[str, Any]]:
    """``{"setups": {name: the table's row}}`` for every setup of the table (or those named)."""
    jobs = arrivals(cs, seed)
    sc = cs.scenario()
    rows: dict[str, dict[str, Any]] = {}
    for name in setups or [n for n, s in cs.setups.items() if s.table]:
        setup = cs.setups[name]
        mine = [w for j in jobs for w in
                (as_workers(j, cs.distributed.workers) if j["klass"] == DISTRIBUTED and not setup.one_domain else [j])]
        scaled = [{**j, "cpu": int(round(j["cpu"] * setup.classes[j["klass"]].cpu_request_ratio))} for j in mine]
        obs = Observer(cs, setup, [j.get("gang", -1) for j in scaled])
        result = run_setup(sc, name, scaled, seed, observer=obs, sample_every_s=cs.sample_minutes * 60)
        rows[name] = obs.row(result)
    return {"scenario": cs.name, "seed": seed, "setups": rows}
