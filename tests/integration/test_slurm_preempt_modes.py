"""Slurm's own preemption modes, walked end to end through crossdock: a job crossdock placed on the
``cpu`` partition (all of node cpu1) is preempted by a job that Slurm's ``high`` partition
(PriorityTier 10, ``preempt/partition_prio``) starts on that node — work crossdock did not submit.
Per mode, as Slurm's regression suite walks them:

- ``REQUEUE`` (the cluster's own): Slurm signals the victim and requeues it; its second run (Slurm's
  restart, the same crossdock attempt) completes and crossdock follows the one job to COMPLETED;
- ``CANCEL`` (the partition switched for the test): Slurm ends the victim PREEMPTED; crossdock
  requeues it as a new attempt, which completes;
- a victim that exits 0 on SIGTERM, under REQUEUE: still requeued by Slurm (a preemption is not
  a success), and completed by its second run.

Every run marks its start and end; each walk ends with the chaos checker's verdict on the history
of the submission, the store's transitions and the runs (no run after the final state, no two
runs at once, one final state).
"""

from __future__ import annotations

import subprocess

import pytest

from crossdock import service
from crossdock.queue.models import JobSpec
from crossdock.queue.states import JobState
from tests.chaos.checker import check
from tests.chaos.history import History, mark, observe_runs, observe_store, parse_marks
from tests.chaos.history import submit as record_submit
from tests.waiting import eventually
from tests.integration.test_e2e_slurm import slurm_cluster_env, slurm_crossdock  # noqa: F401 (fixtures)

pytestmark = [pytest.mark.slurm, pytest.mark.redis, pytest.mark.celery]

NODE_CPUS = 8


def victim(marks: str, on_term: str) -> str:
    """Its first run (attempt 1, Slurm's restart 0) waits to be preempted; any later one ends at once."""
    return f"""#!/bin/bash
{mark("start")} >> {marks}
trap '{on_term}' TERM
if [ "$CROSSDOCK_ATTEMPT" = 1 ] && [ "${{SLURM_RESTART_COUNT:-0}}" = 0 ]; then sleep 300 & wait; fi
{mark("end")} >> {marks}
"""


def slurm(env: dict[str, str], *args: str) -> str:
    return subprocess.run(list(args), env=env, capture_output=True, text=True, check=True).stdout.strip()


@pytest.mark.parametrize("mode, on_term, attempts, runs", [
    pytest.param("REQUEUE", "exit 143", 1, [("start", 1), ("start", 1), ("end", 1)], id="requeue"),
    pytest.param("CANCEL", "exit 143", 2, [("start", 1), ("start", 2), ("end", 2)], id="cancel"),
    pytest.param("REQUEUE", "exit 0", 1, [("start", 1), ("start", 1), ("end", 1)], id="requeue-victim-exits-0"),
])
def test_a_job_slurm_preempts_ends_once_and_its_history_checks(slurm_crossdock, slurm_cluster, tmp_path, mode,
                                                                on_term, attempts, runs):
    rt, env = slurm_crossdock.rt, slurm_cluster
    marks = tmp_path / "runs.log"
    spec = JobSpec(script=victim(str(marks), on_term), cpus_per_task=NODE_CPUS, nodelist=["cpu1"],
                   workdir=str(tmp_path), stdout=str(tmp_path / "victim.out"), name="victim")
    history = History()
    slurm(env, "scontrol", "update", "partitionname=cpu", f"preemptmode={mode}")
    preemptor = None
    try:
        job, = record_submit(history, ["victim"], lambda: service.submit(rt, [spec]), lambda j: j.spec.name, ())
        slurm_crossdock.wait(job.id, {JobState.RUNNING}, timeout=120)
        eventually("the victim's first run", lambda: marks.exists() and "start" in marks.read_text(), 60)
        history.fault(f"a job of partition high takes cpu1 (cpu's PreemptMode={mode})")
        preemptor = slurm(env, "sbatch", "--parsable", "-p", "high", "-w", "cpu1", "-c", str(NODE_CPUS),
                          "-o", "/dev/null", "--wrap", "sleep 1")
        done = slurm_crossdock.wait(job.id, timeout=180)
    finally:
        slurm(env, "scontrol", "update", "partitionname=cpu", "preemptmode=REQUEUE")
        if preemptor:
            subprocess.run(["scancel", preemptor], env=env, check=False)
    events = [e.get("to") for e in rt.store.events(job.id)]
    assert done.state is JobState.COMPLETED and done.attempts == attempts, events
    seen = parse_marks(marks.read_text())
    assert [(word, attempt) for word, attempt, _, _ in seen] == runs
    for stored in observe_store(history, rt.store, lambda j: j.spec.name):
        observe_runs(history, stored.id, seen)
    verdict = check(history)
    print(f"PreemptMode={mode}, victim's TERM: {on_term}: {verdict.summary()}; events {events}")
    assert verdict.ok, verdict.report()
