"""Counted licenses: the config's ``licenses:`` counts, admission refuses what cannot be counted,
and the cycle never lets running jobs hold more than exist (reason Licenses)."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from crossdock.queue.admission import admit
from crossdock.queue.assembly import Records, build_snapshot
from crossdock.queue.config import parse_config
from crossdock.queue.cycle import run_cycle
from crossdock.queue.errors import InvalidJob
from crossdock.queue.sbatch import build_spec
from crossdock.queue.snapshot import Node
from crossdock.queue.states import JobState, Reason

NOW = datetime(2026, 1, 1, tzinfo=timezone.utc)
CFG = parse_config({
    "priority_classes": {"normal": {"value": 100}},
    "pools": {"here": {"backend": "local"}, "hpc": {"backend": "slurm", "partition": "compute"}},
    "queues": {"main": {"priority_class": "normal", "pools": ["here"]},
               "hpc": {"priority_class": "normal", "pools": ["hpc"]}},
    "default_queue": "main",
    "licenses": {"matlab": 2, "ansys": 1},
})
NODES = [Node("n1", "here", "local", 64000, 64000)]
_ids = iter(range(1, 10_000))


def jobs(*argv: str, state: JobState = JobState.PENDING, nodes: tuple[str, ...] = ()):
    out = admit(build_spec([*argv, "--wrap", "true"], now=NOW).spec, CFG, NODES, NOW)
    return [j.model_copy(update={"id": next(_ids), "state": state, "nodes": list(nodes)}) for j in out]


def cycle(pending, active=()):
    return run_cycle(build_snapshot(Records(pending, list(active), NODES), CFG), pending, CFG, NOW)


@pytest.mark.parametrize("argv,message", [
    pytest.param(["-L", "fluent"], "unknown license 'fluent'; licenses: ansys, matlab", id="unknown"),
    pytest.param(["-L", "matlab:3"], "matlab:3 is more than the 2 that exist", id="more-than-exist"),
    pytest.param(["-L", "matlab|ansys"], "asks for any one of several", id="any-of"),
])
def test_admission_refuses_what_it_cannot_count(argv, message):
    with pytest.raises(InvalidJob, match=message):
        jobs(*argv)


def test_a_license_only_slurm_counts_goes_to_a_slurm_pool():
    (j,) = jobs("-L", "fluent:4", "-p", "hpc")
    assert j.spec.licenses == "fluent:4" and j.pools == ["hpc"]


def test_no_more_jobs_run_holding_a_license_than_its_count():
    pending = [*jobs("-L", "matlab"), *jobs("-L", "matlab"), *jobs("-L", "matlab"), *jobs()]
    result = cycle(pending)
    assert [p.job_id for p in result.admitted] == [pending[0].id, pending[1].id, pending[3].id]
    assert result.pending == {pending[2].id: Reason.LICENSES}
    assert "license matlab: 2 of 2 held" in result.explanations[pending[2].id]


def test_running_jobs_hold_their_licenses():
    running = jobs("-L", "matlab:1,ansys", state=JobState.RUNNING, nodes=("n1",))
    pending = [*jobs("-L", "ansys"), *jobs("-L", "matlab:2"), *jobs("-L", "matlab")]
    result = cycle(pending, running)
    assert [p.job_id for p in result.admitted] == [pending[2].id]
    assert result.pending == {pending[0].id: Reason.LICENSES, pending[1].id: Reason.LICENSES}
    # once the running job has ended, its licenses are free again
    assert {p.job_id for p in cycle(pending[:2]).admitted} == {pending[0].id, pending[1].id}
