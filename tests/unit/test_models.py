import json

import pytest
from pydantic import ValidationError

from crossdock.queue.models import ArraySpec, Gres, GpuRequest, Job, JobSpec


def test_extra_fields_are_refused():
    with pytest.raises(ValidationError, match="gpuz"):
        JobSpec(command=["true"], gpuz=2)


@pytest.mark.parametrize("field,value", [("cpus_per_task", 0), ("ntasks", -1), ("nodes", 0),
                                         ("time_limit_seconds", 0)])
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


@pytest.mark.parametrize("stored,seconds", [
    pytest.param({"time_limit_minutes": 2}, 120, id="minutes-only"),
    pytest.param({"time_limit_minutes": 2, "time_limit_seconds": 5}, 5, id="seconds-won"),
    pytest.param({"time_limit_minutes": None, "time_limit_seconds": None}, None, id="both-unset"),
    pytest.param({"time_limit_minutes": None, "time_limit_seconds": 90}, 90, id="seconds-only"),
    pytest.param({}, None, id="no-limit"),
])
def test_stored_specs_with_minutes_still_load(stored, seconds):
    """Specs stored before the limit moved to seconds (jobs already in Redis) keep their limit."""
    text = json.dumps({"command": ["true"], **stored})
    spec = JobSpec.model_validate_json(text)
    assert spec.time_limit_seconds == seconds
    assert "time_limit_minutes" not in spec.model_dump()
    assert JobSpec.model_validate_json(spec.model_dump_json()) == spec


def test_stored_job_with_minutes_still_loads():
    job = Job(id=7, spec=JobSpec(command=["true"], time_limit_seconds=60))
    old = json.loads(job.model_dump_json())
    del old["spec"]["time_limit_seconds"]
    old["spec"]["time_limit_minutes"] = 3
    assert Job.model_validate_json(json.dumps(old)).spec.time_limit_seconds == 180


@pytest.mark.parametrize("minutes", [0, -1, "x"])
def test_stored_minutes_must_be_whole_and_positive(minutes):
    with pytest.raises(ValidationError, match="time_limit_minutes"):
        JobSpec.model_validate({"command": ["true"], "time_limit_minutes": minutes})


@pytest.mark.parametrize("fields,message", [
    (dict(time_limit_seconds=1_000_000_000 * 86400), "less than or equal to 31536000"),
    (dict(cpus_per_task=10**6), "less than or equal to 65535"),
    (dict(ntasks=2**40), "less than or equal to 1048576"),
    (dict(cpus_per_task=1000, ntasks_per_node=1000), "CPUs per node is above 65535"),
    (dict(mem_per_cpu_mib=2**30, cpus_per_task=2048), "MiB per node is above"),
    (dict(nice=2**31), "less than or equal to 2147483645"),
    (dict(name="a" * 2000), "name: 2000 bytes is longer than 1024"),
    (dict(stdout="/tmp/\udcff"), "stdout: not valid UTF-8 text (byte 0xff at character 5)"),
    (dict(command=["echo", "caf\udce9"]), "command[1]: not valid UTF-8 text"),
    (dict(command=["echo", "a\0b"]), "command[1]: contains a NUL character"),
    (dict(command=["echo", "x" * (200 * 1024)]), "command[1]: 204800 bytes is longer than 131072"),
    (dict(env={"A": "\udcff"}), "env.A: not valid UTF-8"),
    (dict(gpus={"count": 1, "share": float("nan")}), "finite number"),
], ids=["time-limit", "cpus", "ntasks", "cpus-per-node", "mem-per-node", "nice", "long-name", "non-utf8-output",
        "non-utf8-arg", "nul", "huge-arg", "non-utf8-env", "nan-share"])
def test_spec_bounds_name_the_field_and_the_range(fields, message):
    from pydantic import ValidationError

    fields.setdefault("command", ["true"])
    with pytest.raises(ValidationError) as exc:
        JobSpec(**fields)
    assert message in str(exc.value), str(exc.value)
