"""A batch launch Slurm loses across a controller restart: slurmctld allocated the job (RUNNING)
while the node's slurmd was down, and restarted before its retry of the launch, so the job stays
RUNNING with nothing of it on the node (Slurm itself finds out at the node's next registration,
about 33 min later). crossdock's follow finds it, cancels it in Slurm and reports NODE_FAIL, which
the follower requeues; a job that really runs beside it is left alone.

It kills a slurmd and restarts the controller: never run it where others share the cluster.
"""

from __future__ import annotations

import os
import signal

import pytest
from slurm_helpers import wait_file, wait_for

from crossdock.backends.slurm import SlurmBackend
from crossdock.backends.slurm.launch import LAUNCH_GRACE_S, LAUNCH_LOST, RECHECK_S, grace_s
from crossdock.dev import slurm as dev
from crossdock.dev.proc import live_pid
from crossdock.queue.states import JobState
from tests.clock import Clock

pytestmark = pytest.mark.slurm


@pytest.mark.parametrize("driver", ["cli", "rest"])
def test_a_launch_lost_across_a_controller_restart_is_cancelled_and_reported_node_fail(
        slurm_cluster, make_job, jobs_dir, driver):
    layout = dev.Layout.of(slurm_cluster["CROSSDOCK_SLURM_DIR"])
    cpu1 = next(n for n in dev.NODES if n.name == "cpu1")
    clock = Clock()  # the backend's: the grace and the recheck pass in no time
    backend = SlurmBackend.from_env(slurm_cluster, driver=driver, clock=clock)
    healthy = make_job("#!/bin/sh\necho started\nsleep 300\n", partition="cpu", nodelist=["cpu2"])
    healthy = healthy.model_copy(update={"backend_ref": backend.submit(healthy, partition="cpu", nodelist=["cpu2"])})
    lost = make_job("#!/bin/sh\necho started\n", partition="cpu", nodelist=["cpu1"])
    try:
        wait_file(jobs_dir / f"{healthy.id}.out", "started")
        os.kill(live_pid(layout.pidfile("slurmd-cpu1"), "slurmd"), signal.SIGKILL)
        try:
            lost = lost.model_copy(update={"backend_ref": backend.submit(lost, partition="cpu", nodelist=["cpu1"])})
            # Allocated: slurmctld marks it RUNNING and keeps the launch for a retry.
            wait_for(backend, lost.backend_ref, lambda s: s.state is JobState.RUNNING)
            dev.stop_controller(layout)
        finally:
            dev.start_slurmd(layout, cpu1)
        dev.start_controller(layout)
        dev.wait_nodes_ready(layout)
        jobs = [lost, healthy]
        # Slurm's own BatchStartTimeout + MessageTimeout, 10 + 10 s here: crossdock waits the least grace.
        assert grace_s(backend.driver.launch_timeout_s()) == LAUNCH_GRACE_S
        assert {i: s.state for i, s in backend.status(jobs).items()} == {
            lost.id: JobState.RUNNING, healthy.id: JobState.RUNNING}
        clock.now += LAUNCH_GRACE_S
        assert {i: s.state for i, s in backend.status(jobs).items()} == {
            lost.id: JobState.RUNNING, healthy.id: JobState.RUNNING}  # its node has no step: once
        clock.now += RECHECK_S
        seen = backend.status(jobs)
        assert (seen[lost.id].state, seen[lost.id].reason) == (JobState.NODE_FAIL, LAUNCH_LOST)
        assert seen[healthy.id].state is JobState.RUNNING
        # Cancelled in Slurm (cpu1 is free again), and it never ran.
        wait_for(backend, lost.backend_ref, lambda s: s.state is JobState.CANCELLED)
        assert not (jobs_dir / f"{lost.id}.out").exists()
        clock.now += LAUNCH_GRACE_S + RECHECK_S
        assert backend.status([healthy])[healthy.id].state is JobState.RUNNING
    finally:
        backend.cancel(healthy)
        wait_for(backend, healthy.backend_ref, lambda s: s.state is not None and s.state.terminal)
