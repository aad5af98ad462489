"""sbatch's options crossdock passes through to the real Slurm: features, signals, times, reservations."""

from __future__ import annotations

import subprocess

import pytest
from slurm_helpers import wait_file, wait_job

from crossdock.backends.slurm import SubmitRejected
from crossdock.queue.sbatch import build_spec
from crossdock.queue.states import JobState

pytestmark = pytest.mark.slurm


def spec_fields(*argv):
    spec = build_spec([*argv, "--wrap", "true"]).spec
    return {k: getattr(spec, k) for k in ("constraint", "kill_signal", "time_min_seconds", "reservation", "licenses",
                                          "begin")}


@pytest.mark.parametrize("argv", [["-C", "nosuchfeature"], ["--reservation=nosuchresv"], ["-L", "nosuchlicense:1"]],
                         ids=["constraint", "reservation", "licenses"])
def test_slurm_judges_what_it_is_passed(backend, make_job, argv):
    with pytest.raises(SubmitRejected) as err:
        backend.submit(make_job(command=["true"], partition="cpu", **spec_fields(*argv)))
    assert "Unknown key" not in str(err.value)  # refused by Slurm for the value, not for the field name


SIGNALLED = """#!/bin/bash
trap 'echo got USR1; exit 0' USR1
for i in $(seq 900); do sleep 0.1; done
echo no signal
"""


def test_signal_reaches_the_batch_shell_before_the_limit(slurm_cluster, backend, make_job, jobs_dir):
    job = make_job(SIGNALLED, partition="cpu", time_limit_seconds=120,
                   **spec_fields("--signal=B:USR1@110", "--time-min=1"))
    if backend.driver.__class__.__name__ == "RestDriver":
        with pytest.raises(SubmitRejected, match="slurmrestd refuses the B:/R: flags"):
            backend.submit(job)
        return
    ref = backend.submit(job)
    show = subprocess.run(["scontrol", "show", "job", ref.split(":")[-1]], capture_output=True, text=True,
                          env=slurm_cluster, timeout=30).stdout
    assert f"JobId={ref.split(':')[-1]}" in show and "TimeMin=00:01:00" in show
    status = wait_job(backend, job, lambda s: s.state.terminal, timeout=90)
    assert status.state is JobState.COMPLETED
    assert wait_file(jobs_dir / f"{job.id}.out", "got USR1") == "got USR1\n"


def test_layout_options_reach_sbatch_as_written(slurm_cluster, backend, make_job):
    """--ntasks-per-core and --hint are Slurm's to apply: scontrol shows them on the job, and a
    value Slurm cannot satisfy (more temporary disk than any node has) is refused by Slurm. The
    REST driver hands such a submission to its CLI fallback (v0.0.38 has no field for most)."""
    spec = build_spec(["--hint=nomultithread", "--ntasks-per-core=1", "--wrap", "sleep 30"]).spec
    job = make_job(command=["sleep", "30"], partition="cpu", slurm_options=spec.slurm_options)
    ref = backend.submit(job)
    try:
        show = subprocess.run(["scontrol", "show", "job", ref.split(":")[-1]], capture_output=True, text=True,
                              env=slurm_cluster, timeout=30).stdout
        assert "NtasksPerN:B:S:C=0:0:*:1" in show
    finally:
        backend.cancel(job)
    with pytest.raises(SubmitRejected, match="Temporary disk specification"):
        backend.submit(make_job(command=["true"], partition="cpu", slurm_options=["--tmp=1000000"]))
