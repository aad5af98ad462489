"""--constraint through pools' feature maps, -p's forms, and --begin in the scheduler."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from types import MappingProxyType

import pytest

from crossdock.queue.admission import admit, advisories
from crossdock.queue.config import parse_config
from crossdock.queue.cycle import run_cycle
from crossdock.queue.errors import InvalidJob
from crossdock.queue.models import JobSpec
from crossdock.queue.sbatch import build_spec
from crossdock.queue.snapshot import Node, Snapshot
from crossdock.queue.states import Reason

NOW = datetime(2026, 1, 1, tzinfo=timezone.utc)
CFG = parse_config({
    "priority_classes": {"normal": {"value": 100}},
    "pools": {
        "k8s-a": {"backend": "local", "features": {"a100": {"gpu": "A100"}, "ib": {"net": "ib"}, "fast": {"tier": "1"}}},
        "k8s-b": {"backend": "local", "features": {"a100": {"gpu": "A100"}}},
        "plain": {"backend": "local"},
        "hpc": {"backend": "slurm", "partition": "compute"},
    },
    "queues": {"main": {"priority_class": "normal", "pools": ["k8s-a", "k8s-b", "plain", "hpc"]},
               "other": {"priority_class": "normal", "pools": ["plain"]}},
    "default_queue": "main",
})


def node(name, pool, **labels):
    return Node(name, pool, "local", 8000, 16000, labels=MappingProxyType(labels))


NODES = [node("a1", "k8s-a", gpu="A100", net="ib"), node("a2", "k8s-a", gpu="A100"), node("a3", "k8s-a", net="ib"),
         node("b1", "k8s-b", gpu="A100"), node("p1", "plain")]


def jobs_for(*argv):
    return admit(build_spec([*argv, "--wrap", "true"], now=NOW).spec, CFG, NODES, NOW)


@pytest.mark.parametrize("constraint,pools", [
    pytest.param("a100", ["k8s-a", "k8s-b", "hpc"], id="mapped-and-slurm"),
    pytest.param("a100&ib", ["k8s-a", "hpc"], id="and"),
    pytest.param("ib|a100", ["k8s-a", "k8s-b", "hpc"], id="or"),
    pytest.param("gpfs", ["hpc"], id="only-slurm-judges"),
])
def test_constraint_narrows_pools(constraint, pools):
    assert jobs_for("-C", constraint)[0].pools == pools


def test_constraint_no_pool_can_place_names_each_reason():
    with pytest.raises(InvalidJob) as err:
        jobs_for("-C", "gpfs", "-p", "k8s-a,plain")
    msg = str(err.value)
    assert msg.startswith("--constraint: no pool can place 'gpfs'")
    assert "pool 'k8s-a' has no feature gpfs (it has: a100, fast, ib)" in msg
    assert "pool 'plain' maps no features" in msg


@pytest.mark.parametrize("constraint,placed", [
    pytest.param("a100&ib", {"a1"}, id="and"),
    pytest.param("ib", {"a1", "a3"}, id="one"),
    pytest.param("a100", {"a1", "a2", "b1"}, id="across-pools"),
    pytest.param("[ib|a100]", {"a1", "a2", "a3", "b1"}, id="matching-or"),
    pytest.param("fast", set(), id="no-node-has-it"),
])
def test_scheduler_places_only_on_nodes_with_the_features(constraint, placed):
    seen: set[str] = set()
    jobs = []
    for i in range(6):
        (j,) = jobs_for("-C", constraint, "-p", "k8s-a,k8s-b", "--exclusive")
        jobs.append(j.model_copy(update={"id": i + 1}))
    result = run_cycle(Snapshot(nodes=tuple(NODES)), jobs, CFG, NOW)
    for adm in result.admitted:
        seen.update(adm.nodes)
    assert seen == placed
    if not placed:
        assert "didn't have the job's --constraint features" in result.explanations[1]


@pytest.mark.parametrize("partition,queue,pools", [
    pytest.param("main", "main", ["k8s-a", "k8s-b", "plain", "hpc"], id="queue"),
    pytest.param("k8s-b", "main", ["k8s-b"], id="pool"),
    pytest.param("compute", "main", ["hpc"], id="slurm-partition-of-a-pool"),
    pytest.param("k8s-b,compute", "main", ["k8s-b", "hpc"], id="comma-list"),
    pytest.param("other,plain", "other", ["plain"], id="queue-and-its-pool"),
])
def test_partition_forms(partition, queue, pools):
    (j,) = jobs_for("-p", partition)
    assert (j.queue, j.pools) == (queue, pools)


@pytest.mark.parametrize("partition,message", [
    pytest.param("main,other", "names the queues main, other", id="two-queues"),
    pytest.param("k8s-b,nope", "unknown queue, pool or Slurm partition 'nope'", id="unknown-in-list"),
    pytest.param("other,hpc", "pool 'hpc' is not one of queue 'other'", id="pool-outside-queue"),
])
def test_partition_refused(partition, message):
    with pytest.raises(InvalidJob, match=message):
        jobs_for("-p", partition)


def test_begin_defers_the_job_until_its_time():
    (j,) = jobs_for("--begin=now+1hour", "-p", "plain")
    j = j.model_copy(update={"id": 1})
    assert j.eligible_time == NOW + timedelta(hours=1)
    early = run_cycle(Snapshot(nodes=tuple(NODES)), [j], CFG, NOW + timedelta(minutes=59))
    assert early.pending == {1: Reason.BEGIN_TIME} and not early.admitted
    late = run_cycle(Snapshot(nodes=tuple(NODES)), [j], CFG, NOW + timedelta(hours=1, seconds=1))
    assert [a.job_id for a in late.admitted] == [1]


def test_slurm_only_options_warn_when_other_pools_may_run_the_job():
    spec = build_spec(["--reservation=r", "-L", "matlab", "--signal=USR1", "--time-min=5", "--wrap", "true"],
                      now=NOW).spec
    lines = advisories(spec, CFG, ["hpc", "plain"], signals=lambda pool: pool == "hpc")
    assert [line.split("=")[0] for line in lines] == ["--reservation", "--licenses", "--time-min", "--signal"]
    assert all(line.endswith("pool(s) plain") for line in lines)
    assert advisories(spec, CFG, ["hpc"], signals=lambda pool: True) == []
    assert advisories(spec, CFG, ["hpc", "plain"], signals=lambda pool: True)[-1].startswith("--time-min")
    assert advisories(JobSpec(command=["true"]), CFG, ["plain"]) == []


@pytest.mark.parametrize("argv,cancelled", [
    pytest.param(["-t", "60", "--deadline=now+30minutes"], True, id="cannot-end-in-time"),
    pytest.param(["-t", "60", "--deadline=now+2hours"], False, id="ends-in-time"),
    pytest.param(["-t", "60", "--time-min=20", "--deadline=now+30minutes"], False, id="time-min-fits"),
    pytest.param(["-t", "60", "--hold", "--deadline=now+30minutes"], True, id="held-too"),
])
def test_deadline_cancels_a_job_that_can_no_longer_end_in_time(argv, cancelled):
    (j,) = jobs_for(*argv, "-p", "plain")
    result = run_cycle(Snapshot(nodes=tuple(NODES)), [j.model_copy(update={"id": 1})], CFG, NOW)
    assert (result.cancelled == {1: Reason.DEADLINE}) is cancelled
    assert (1 in result.cancelled) is cancelled
