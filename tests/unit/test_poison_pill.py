"""A job the cycle cannot evaluate is set aside with InvalidSpec; the cycle goes on for the others.

The poison jobs are built with ``model_construct`` (no validation), as a job stored by an older
version, or written around admission, would come back from the store."""

from datetime import datetime, timezone

import pytest

from crossdock.queue.config import parse_config
from crossdock.queue.cycle import run_cycle
from crossdock.queue.models import Job, JobSpec
from crossdock.queue.snapshot import Node, Snapshot
from crossdock.queue.states import Reason

NOW = datetime(2026, 1, 1, tzinfo=timezone.utc)
CFG = parse_config({
    "priority_classes": {"low": {"value": 100}},
    "pools": {"p": {"backend": "local"}},
    "queues": {"q": {"priority_class": "low", "pools": ["p"]}},
    "scheduler": {"default_mem_per_cpu_mib": 0},
})
NODES = tuple(Node(f"n{i}", "p", "local", 64_000, 64_000) for i in range(4))


def job(i: int, spec: JobSpec, priority: int = 100) -> Job:
    return Job.model_construct(id=i, spec=spec, queue="q", priority=priority, pools=["p"])


def unchecked(**fields) -> JobSpec:
    return JobSpec.model_construct(**{**JobSpec(command=["true"]).model_dump(), **fields})


POISON = {
    # `submit -t 1000000000-0` as main accepted it: the end of its time limit overflows datetime
    "time-limit-overflow": unchecked(time_limit_seconds=1_000_000_000 * 86400),
    "cpus-beyond-int64": unchecked(cpus_per_task=10**30),
    "nan-time-limit": unchecked(time_limit_seconds=float("nan")),
    # a field of the wrong shape, as an older spec layout would decode
    "dependency-not-a-model": unchecked(dependency={"deps": "garbage"}),
    "memory-as-text": unchecked(mem_per_node_mib="lots"),
}


@pytest.mark.parametrize("spec", POISON.values(), ids=POISON.keys())
@pytest.mark.parametrize("priority", [1000, 100, 1], ids=["first", "among", "last"])
def test_one_unevaluable_job_is_set_aside_and_the_100_others_are_scheduled(spec, priority):
    normal = [job(i, JobSpec(command=["true"], cpus_per_task=1, mem_per_node_mib=10)) for i in range(1, 101)]
    r = run_cycle(Snapshot(nodes=NODES), [*normal, job(999, spec, priority)], CFG, NOW)
    assert sorted(p.job_id for p in r.admitted) == list(range(1, 101))
    assert r.pending == {999: Reason.INVALID_SPEC}
    assert "cannot evaluate" in r.explanations[999] and "Error" in r.explanations[999], r.explanations[999]


def test_set_aside_jobs_leave_the_decisions_of_the_others_unchanged():
    normal = [job(i, JobSpec(command=["true"], cpus_per_task=1 + i % 8, mem_per_node_mib=100 * (i % 5)))
              for i in range(1, 101)]
    snap = Snapshot(nodes=NODES)
    alone = run_cycle(snap, normal, CFG, NOW)
    poisoned = run_cycle(snap, [*normal, *(job(900 + k, s) for k, s in enumerate(POISON.values()))], CFG, NOW)
    assert poisoned.admitted == alone.admitted
    assert {k: v for k, v in poisoned.pending.items() if k < 900} == alone.pending
