import pytest
from pydantic import ValidationError

from crossdock.queue.models import ArraySpec, Gres, GpuRequest, JobSpec


def test_extra_fields_are_refused():
    with pytest.raises(ValidationError, match="gpuz"):
        JobSpec(command=["true"], gpuz=2)


@pytest.mark.parametrize("field,value", [("cpus_per_task", 0), ("ntasks", -1), ("nodes", 0),
                                         ("time_limit_minutes", 0)])
def test_zero_or_negative_counts_are_refused(field, value):
    with pytest.raises(ValidationError, match=field):
        JobSpec(command=["true"], **{field: value})


def test_only_one_thing_to_run():
    with pytest.raises(ValidationError, match="give one of command, script or python"):
        JobSpec(command=["true"], script="#!/bin/sh\n")


def test_mem_and_mem_per_cpu_are_exclusive():
    with pytest.raises(ValidationError, match="mutually exclusive"):
        JobSpec(command=["true"], mem_per_node_mib=1, mem_per_cpu_mib=1)


@pytest.mark.parametrize("spec,per_node,total", [
    (dict(gpus=GpuRequest(count=4, per="job"), nodes=2), 2, 4),
    (dict(gpus=GpuRequest(count=2, per="node"), nodes=2), 2, 4),
    (dict(gpus=GpuRequest(count=1, per="task"), ntasks=4, nodes=2), 2, 4),
    (dict(gres=[Gres(name="gpu", type="a100", count=3)]), 3, 3),
    (dict(gres=[Gres(name="shard", count=3)]), 0, 0),
    (dict(gpus=GpuRequest(count=1, share=0.25)), 1, 0.25),
], ids=["per-job", "per-node", "per-task", "gres", "other-gres", "share"])
def test_gpu_arithmetic(spec, per_node, total):
    s = JobSpec(command=["true"], **spec)
    assert s.gpus_per_node() == per_node
    assert s.total_gpus() == total


def test_memory_per_cpu_scales_with_cpus_on_the_node():
    s = JobSpec(command=["true"], cpus_per_task=4, ntasks=2, nodes=1, mem_per_cpu_mib=100)
    assert s.cpus_per_node() == 8
    assert s.mem_per_node() == 800


def test_array_ids_sorted_unique_and_non_negative():
    assert ArraySpec(task_ids=[3, 1, 3]).task_ids == [1, 3]
    with pytest.raises(ValidationError):
        ArraySpec(task_ids=[-1])


def test_time_limit_seconds_wins():
    assert JobSpec(command=["true"], time_limit_minutes=2).time_limit() == 120
    assert JobSpec(command=["true"], time_limit_minutes=2, time_limit_seconds=5).time_limit() == 5
    assert JobSpec(command=["true"]).time_limit() is None
