from datetime import datetime, timezone

import pytest

from crossdock.queue.admission import admit
from crossdock.queue.config import parse_config
from crossdock.queue.errors import InvalidJob
from crossdock.queue.models import ArraySpec, GpuRequest, JobSpec
from crossdock.queue.snapshot import GpuDevice, Node

NOW = datetime(2026, 1, 1, tzinfo=timezone.utc)
CFG = parse_config({
    "priority_classes": {"training": {"value": 100, "preemptible": True}, "inference": {"value": 1000}},
    "pools": {"gpu": {"backend": "local"}, "cpu": {"backend": "local"}},
    "queues": {"training": {"priority_class": "training", "pools": ["gpu"], "per_job": {"cpu": 16, "gpu": 8}},
               "inference": {"priority_class": "inference", "pools": ["gpu", "cpu"]}},
    "default_queue": "training",
})
NODES = [Node("g1", "gpu", "local", 32000, 64000, tuple(GpuDevice(f"g1:{i}", i, "A100") for i in range(8))),
         Node("c1", "cpu", "local", 8000, 16000)]


def spec(**kw):
    kw.setdefault("command", ["true"])
    return JobSpec(**kw)


@pytest.mark.parametrize("kw,message", [
    (dict(queue="nope"), "--queue: unknown queue 'nope'"),
    (dict(partition="nope"), "--partition: unknown queue, pool or Slurm partition 'nope'"),
    (dict(pool="nope"), "--pool: unknown pool 'nope'"),
    (dict(queue="training", pool="cpu"), "--pool: pool 'cpu' is not one of queue 'training'"),
    (dict(priority_class="nope"), "--priority-class/--qos: unknown priority class 'nope'"),
    (dict(cpus_per_task=17), "17 CPUs exceeds queue 'training'"),
    (dict(gpus=GpuRequest(count=9)), "exceeds queue 'training'"),
    (dict(queue="inference", gpus=GpuRequest(count=9)), "the largest node in pools gpu, cpu has 8"),
    (dict(queue="inference", gpus=GpuRequest(count=1, type="H100")), "no node in pools gpu, cpu has 1 GPUs of model H100"),
    (dict(queue="inference", cpus_per_task=64), "--cpus-per-task: 64 CPUs per node"),
    (dict(command=None, script="echo hi"), "first line must start with #!"),
    (dict(array=ArraySpec(task_ids=[5000])), "MaxArraySize"),
], ids=["queue", "partition", "pool", "pool-not-in-queue", "class", "per-job-cpu", "per-job-gpu", "gpus-no-node",
        "model", "cpus", "shebang", "array-size"])
def test_bad_submissions_are_refused_with_the_field_named(kw, message):
    with pytest.raises(InvalidJob, match=None) as exc:
        admit(spec(**kw), CFG, NODES, NOW)
    assert message in str(exc.value)


def test_partition_may_name_a_queue_or_a_pool():
    j, = admit(spec(partition="inference"), CFG, NODES, NOW)
    assert (j.queue, j.priority, j.pools) == ("inference", 1000, ["gpu", "cpu"])
    j, = admit(spec(queue="inference", partition="cpu"), CFG, NODES, NOW)
    assert j.pools == ["cpu"]


def test_array_becomes_one_job_per_task():
    jobs = admit(spec(array=ArraySpec(task_ids=[0, 2, 4], max_running=1)), CFG, NODES, NOW)
    assert [j.array_task_id for j in jobs] == [0, 2, 4]
    assert all(j.preemptible and j.priority_class == "training" for j in jobs)


@pytest.mark.parametrize("kw,message", [
    (dict(placement="garbage"), "--placement: unknown placement 'garbage'; accepted: binpack, spread, most-requested, balanced"),
    (dict(nodelist=["nosuchnode"]), "--nodelist: unknown node 'nosuchnode'; nodes in pools gpu: g1"),
    (dict(exclude=["g1", "gone"]), "--exclude: unknown node 'gone'"),
    (dict(nodelist=["c1"]), "--nodelist: unknown node 'c1'"),  # a node of another queue's pool
], ids=["placement", "nodelist", "exclude", "other-pool"])
def test_names_that_exist_nowhere_are_refused_at_submit(kw, message):
    with pytest.raises(InvalidJob) as exc:
        admit(spec(**kw), CFG, NODES, NOW)
    assert str(exc.value).startswith(message), str(exc.value)


def test_node_names_of_pools_without_a_known_inventory_are_left_to_their_backend():
    jobs = admit(spec(nodelist=["remote-7"], placement="spread"), CFG, [], NOW)
    assert jobs[0].spec.nodelist == ["remote-7"]


def test_a_spec_updated_without_validation_is_validated_again():
    updated = spec().model_copy(update={"name": "caf\udce9", "workdir": "/tmp"})
    with pytest.raises(InvalidJob, match=r"name: not valid UTF-8 text \(byte 0xe9 at character 3\)"):
        admit(updated, CFG, NODES, NOW)
