"""``crossdock why``: the reasons a job pends and the one-edit changes that start it sooner, each
with the start the scheduler itself predicts for it, soonest first."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from crossdock.queue.config import parse_config
from crossdock.queue.models import GpuRequest, Job, JobSpec
from crossdock.queue.snapshot import GpuDevice, Node
from crossdock.queue.states import JobState
from crossdock.queue.whatif import why

NOW = datetime(2026, 1, 1, tzinfo=timezone.utc)
MIN = timedelta(minutes=1)


def gpus(node: str, model: str, n: int = 4) -> tuple[GpuDevice, ...]:
    return tuple(GpuDevice(f"{node}:{i}", i, model) for i in range(n))


GPU_CFG = parse_config({
    "priority_classes": {"low": {"value": 100}, "high": {"value": 1000}},
    "pools": {"a100": {"backend": "local"}, "l4": {"backend": "local"}},
    "queues": {"training": {"priority_class": "low", "pools": ["a100", "l4"], "per_job": {"gpu": 4}},
               "inference": {"priority_class": "high", "pools": ["l4"], "per_job": {"gpu": 2}}},
    "default_queue": "training",
    "scheduler": {"default_mem_per_cpu_mib": 0},
})
GPU_NODES = [Node("a1", "a100", "local", 16000, 64000, gpus("a1", "A100")),
             Node("l1", "l4", "local", 16000, 64000, gpus("l1", "L4"))]


def gpu_job(i: int, count: int, model: str = "A100", **kw) -> Job:
    extra = {k: kw.pop(k) for k in ("state", "nodes", "start_time", "gpu_ids", "alloc_cpu_milli", "pool") if k in kw}
    spec = JobSpec(command=["true"], time_limit_seconds=3600, gpus=GpuRequest(count=count, type=model), **kw)
    return Job(id=i, spec=spec, queue="training", priority=100, pools=["a100", "l4"], submit_time=NOW, **extra)


def test_fewer_gpus_or_another_model_start_it_now_and_no_change_the_limits_refuse():
    running = gpu_job(1, 2, state=JobState.RUNNING, nodes=["a1"], gpu_ids=["a1:0", "a1:1"], pool="a100",
                      start_time=NOW - 30 * MIN, alloc_cpu_milli=1000)
    waiting = gpu_job(9, 4)
    w = why(waiting, [waiting], [running], GPU_NODES, GPU_CFG, NOW)
    assert w.start == NOW + 30 * MIN  # once the running job's hour is up
    assert [(o.change, o.start, o.nodes) for o in w.options] == [
        ("--gpus=2 (not 4)", NOW, ("a1",)),
        ("--gpus=1 (not 4)", NOW, ("a1",)),
        ("GPU model L4 (not A100)", NOW, ("l1",)),
    ]  # not "-p inference": its jobs take at most 2 GPUs, and L4s only
    assert all(o.apply == "resubmit job 9 with it" for o in w.options)
    assert w.as_dict()["options"][2] == {"change": "GPU model L4 (not A100)", "field": "gpu_model", "value": "L4",
                                         "start": NOW.isoformat(timespec="seconds"), "pool": "l4", "nodes": ["l1"],
                                         "apply": "resubmit job 9 with it"}


def test_a_job_that_fits_now_needs_no_change():
    w = why(gpu_job(9, 2), [gpu_job(9, 2)], [], GPU_NODES, GPU_CFG, NOW)
    assert (w.start, w.reason, w.options) == (NOW, "fits now", ())


CPU_CFG = parse_config({
    "priority_classes": {"normal": {"value": 100}},
    "pools": {"p": {"backend": "local"}},
    "queues": {"q": {"priority_class": "normal", "pools": ["p"]}},
    "scheduler": {"default_mem_per_cpu_mib": 0},
})
CPU_NODES = [Node("n1", "p", "local", 4000, 8000)]


def cpu_job(i: int, cpus: int, limit_s: int, priority: int = 100, **kw) -> Job:
    extra = {k: kw.pop(k) for k in ("state", "nodes", "start_time", "alloc_cpu_milli") if k in kw}
    spec = JobSpec(command=["true"], cpus_per_task=cpus, time_limit_seconds=limit_s, **kw)
    return Job(id=i, spec=spec, queue="q", priority=priority, pools=["p"], submit_time=NOW, **extra)


def test_the_longest_time_limit_that_fits_the_backfill_hole_starts_it_now():
    """2 of 4 CPUs run for 30 more minutes; a higher-priority 4-CPU job holds the node from then
    on; a 2-CPU job of 2 hours waits behind it, but would backfill the hole now with a shorter limit."""
    running = cpu_job(1, 2, 3600, state=JobState.RUNNING, nodes=["n1"], start_time=NOW - 30 * MIN,
                      alloc_cpu_milli=2000)
    first, waiting = cpu_job(7, 4, 3600, priority=500), cpu_job(9, 2, 7200)
    w = why(waiting, [first, waiting], [running], CPU_NODES, CPU_CFG, NOW)
    assert w.start is None and "reserved for a higher-priority job" in w.reason  # backfill plans one ahead
    limit, = [o for o in w.options if o.field == "time_limit_seconds"]
    assert (limit.start, limit.nodes) == (NOW, ("n1",))
    assert limit.value == 30 * 60  # the hole, to the minute: 31 minutes would delay job 7
    assert limit.change == "--time=30:00 (not 2:00:00)" and limit.apply == "crossdock update 9 TimeLimit=30:00"
