"""Bursting: a queue whose backend-queue pools span Slurm and Kubernetes sends a job that fits
nowhere now to the pool where it is expected to start first, with hysteresis, and to one pool only."""

from dataclasses import replace
from datetime import datetime, timezone

import pytest

from crossdock.queue.assembly import Records, build_snapshot
from crossdock.queue.bursting import backlog_start, bursting_queues, throughput, to_estimate
from crossdock.queue.config import parse_config
from crossdock.queue.cycle import run_cycle
from crossdock.queue.models import Job, JobSpec
from crossdock.queue.snapshot import Allocation, Node
from crossdock.queue.states import JobState

NOW = datetime(2026, 1, 1, tzinfo=timezone.utc)


def config(margin: float = 60, kube_queue: int = 10):
    return parse_config({
        "priority_classes": {"b": {"value": 100}},
        "pools": {"hpc": {"backend": "slurm", "partition": "cpu", "backend_queue": 10},
                  "kube": {"backend": "k8s", "selector": {"pool": "cpu"}, "backend_queue": kube_queue},
                  "static": {"backend": "slurm", "partition": "other"}},
        "queues": {"q": {"priority_class": "b", "pools": ["hpc", "kube"]},
                   "slurm_only": {"priority_class": "b", "pools": ["hpc", "static"]}},
        "autoscaler": {"burst_margin_seconds": margin},
        "scheduler": {"default_mem_per_cpu_mib": 0},
    })


NODES = (Node("cpu1", "hpc", "slurm", 2000, 1000), Node("k1", "kube", "k8s", 2000, 1000))


def running(job_id: int, node: str, pool: str, limit_s: int | None = 600) -> Job:
    return Job(id=job_id, spec=JobSpec(command=["sleep", "1000"], cpus_per_task=2, time_limit_seconds=limit_s),
               queue="q", state=JobState.RUNNING, nodes=[node], pool=pool, attempts=1, alloc_cpu_milli=2000)


def pending(job_id: int, queue: str = "q") -> Job:
    return Job(id=job_id, spec=JobSpec(command=["true"]), queue=queue)


def routed(starts: dict | None, cfg=None, jobs=(10,), kube_queued: int = 0) -> dict[int, str]:
    """Pool each waiting job was handed to, with both pools full and these expected starts."""
    cfg = cfg or config()
    waiting = [pending(i) for i in jobs]
    active = [running(1, "cpu1", "hpc"), running(2, "k1", "kube")]
    active += [Job(id=100 + i, spec=JobSpec(command=["true"]), queue="q", state=JobState.SCHEDULED, pool="kube",
                   attempts=1) for i in range(kube_queued)]
    snap = build_snapshot(Records(waiting, active, NODES), cfg)
    if starts is not None:
        snap = replace(snap, start_estimates={i: starts for i in jobs})
    result = run_cycle(snap, waiting, cfg, NOW)
    assert all(not p.nodes for p in result.admitted)  # nothing fits now: only backend queues
    assert len({p.job_id for p in result.admitted}) == len(result.admitted)  # one pool per job
    return {p.job_id: p.pool for p in result.admitted}


@pytest.mark.parametrize("starts, pool", [
    (None, "hpc"),
    ({"hpc": 300.0, "kube": 10.0}, "kube"),
    ({"hpc": 50.0, "kube": 10.0}, "hpc"),  # sooner, but by less than the margin
    ({"hpc": 10.0, "kube": 300.0}, "hpc"),
    ({"kube": 10.0}, "kube"),  # Slurm said nothing (budget spent, unreachable)
    ({}, "hpc"),
], ids=["no-estimates", "kube-sooner", "within-margin", "slurm-sooner", "slurm-unknown", "none-known"])
def test_a_job_that_fits_nowhere_waits_where_it_starts_first_by_the_margin(starts, pool):
    assert routed(starts) == {10: pool}


def test_a_pool_whose_backend_queue_is_full_takes_nothing_however_soon():
    assert routed({"hpc": 300.0, "kube": 10.0}, kube_queued=10) == {10: "hpc"}


def test_the_margin_is_the_config_s():
    assert routed({"hpc": 50.0, "kube": 10.0}, cfg=config(margin=30)) == {10: "kube"}


def test_only_queues_spanning_backends_burst_and_only_the_first_jobs_get_estimates():
    cfg = config()
    assert bursting_queues(cfg) == {"q": ["hpc", "kube"]}
    jobs = [pending(i) for i in range(5)] + [pending(9, queue="slurm_only")]
    assert [(j.id, pools) for j, pools in to_estimate(jobs, cfg, limit=3)] == [(0, ["hpc", "kube"]), (1, ["hpc", "kube"]),
                                                                              (2, ["hpc", "kube"])]


def test_a_pool_s_backlog_start_is_the_jobs_ahead_over_what_its_running_jobs_free_per_second():
    cfg = config()
    active = [running(1, "k1", "kube", limit_s=100), running(2, "k1", "kube", limit_s=100)]
    active += [Job(id=100 + i, spec=JobSpec(command=["true"]), queue="q", state=JobState.SCHEDULED, pool="kube",
                   attempts=1) for i in range(4)]
    snap = build_snapshot(Records([], active, NODES), cfg)
    assert throughput(snap, "kube") == pytest.approx(0.02)
    assert backlog_start(snap, "kube") == pytest.approx(200.0)  # 4 ahead at 0.02/s
    assert backlog_start(snap, "kube", provision_seconds=30) == pytest.approx(230.0)
    assert backlog_start(snap, "kube", ahead=1) == pytest.approx(250.0)
    assert backlog_start(snap, "hpc") is None  # nothing runs there with a limit: unknown
    no_limit = build_snapshot(Records([], [running(3, "cpu1", "hpc", limit_s=None)], NODES), cfg)
    assert throughput(no_limit, "hpc") == 0.0


def test_foreign_capacity_counts_nothing_towards_throughput():
    cfg = config()
    snap = build_snapshot(Records([], [], NODES, foreign=[Allocation(None, "k1", 1000, 100, time_limit_seconds=10)]),
                          cfg)
    assert throughput(snap, "kube") == 0.0
