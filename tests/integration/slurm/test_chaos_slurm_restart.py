"""Chaos through a Slurm pool with a backend queue: slurmctld stopped and started again (jobs
survive in its saved state), a node's slurmd SIGKILLed and started again (its jobs' slurmstepd
go on without it) and munged SIGKILLed for a few seconds (every Slurm command and RPC fails to
authenticate meanwhile), among kills of workers, ``up`` and Redis; every job ends exactly once in
its true state, and the run's history passes the checker.

It restarts the local cluster's controller: never run it where others share that cluster
(``-m "chaos and slurm"`` selects it; CI runs it on a cluster of its own).
"""

from __future__ import annotations

import os
import random
import re
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from crossdock.dev.proc import live_pid
from tests.chaos.checker import check
from tests.chaos.harness import ChaosRun, Fault, run_chaos, schedule, seed_from_env

pytestmark = [pytest.mark.chaos, pytest.mark.slurm, pytest.mark.redis, pytest.mark.celery, pytest.mark.timeout(900)]

CONTROLLER_OUTAGE_SECONDS = 8.0


def slurm_config() -> dict:
    return {
        "priority_classes": {"batch": {"value": 500}},
        "pools": {"hpc-cpu": {"backend": "slurm", "partition": "cpu", "backend_queue": 50}},
        "queues": {"batch": {"priority_class": "batch", "pools": ["hpc-cpu"]}},
        "default_queue": "batch",
        "scheduler": {"interval_seconds": 0.3, "lease_seconds": 3, "kill_wait_seconds": 2,
                      "min_job_age_seconds": 3600},
    }


def restart_slurmctld(run: ChaosRun, fault: Fault) -> str:
    """Only the controller: slurmd, munged and slurmrestd stay up, as in a controller failover."""
    from crossdock.dev import slurm as dev

    layout = dev.Layout.of(run.env["CROSSDOCK_SLURM_DIR"])
    dev.stop_controller(layout)
    time.sleep(CONTROLLER_OUTAGE_SECONDS)
    dev.start_controller(layout)
    return f"slurmctld stopped for {CONTROLLER_OUTAGE_SECONDS:.0f}s, started again"


DAEMON_OUTAGE_SECONDS = 3.0


def _crash(run: ChaosRun, daemon: str, binary: str, restart) -> int | None:
    """SIGKILL the local cluster's ``daemon`` (a crash), keep watching the service for
    :data:`DAEMON_OUTAGE_SECONDS`, then ``restart(layout)`` it, as systemd would; its pid."""
    from crossdock.dev import slurm as dev

    layout = dev.Layout.of(run.env["CROSSDOCK_SLURM_DIR"])
    pid = live_pid(layout.pidfile(daemon), binary)
    if pid:
        os.kill(pid, signal.SIGKILL)
    run.tick(DAEMON_OUTAGE_SECONDS)
    restart(layout)
    return pid


def kill_slurmd(run: ChaosRun, fault: Fault) -> str:
    """One cpu node's slurmd: its jobs' slurmstepd go on without it."""
    from crossdock.dev import slurm as dev

    node = random.Random(fault.at).choice([n for n in dev.NODES if n.name.startswith("cpu")])
    pid = _crash(run, f"slurmd-{node.name}", "slurmd", lambda layout: dev.start_slurmd(layout, node))
    return f"slurmd of {node.name} (pid {pid}) SIGKILLed, started again after {DAEMON_OUTAGE_SECONDS:.0f}s"


def kill_munged(run: ChaosRun, fault: Fault) -> str:
    """munged: no credential is made or checked until it is back."""
    from crossdock.dev import slurm as dev

    def restart(layout) -> None:
        layout.munge_socket.unlink(missing_ok=True)  # a killed munged leaves its socket behind
        dev.start_munged(layout)

    pid = _crash(run, "munged", "munged", restart)
    return f"munged (pid {pid}) SIGKILLed, started again after {DAEMON_OUTAGE_SECONDS:.0f}s"


def slurm_view(verdicts, run: ChaosRun, lines: int = 30) -> str:
    """What Slurm says of each job judged wrong: ``scontrol show job`` and the daemons' log lines
    that name it (the logs outlive the run; the chaos run's own report has only crossdock's view)."""
    from crossdock.dev import slurm as dev

    layout = dev.Layout.of(run.env["CROSSDOCK_SLURM_DIR"])
    out = []
    for v in verdicts:
        ref = v.job.backend_ref if v.problem and v.job else None
        if not ref:
            continue
        shown = subprocess.run(["scontrol", "show", "job", ref], env=layout.client_env(), capture_output=True,
                               text=True, timeout=30)
        out.append(f"\nslurm job {ref} (crossdock job {v.job.id}):\n{shown.stdout or shown.stderr}")
        pattern = re.compile(rf"\b(JobId=|job[ _]?){re.escape(ref)}\b", re.I)
        for logfile in sorted(layout.logs.glob("slurm*.log")):
            hits = [line for line in logfile.read_text(errors="replace").splitlines() if pattern.search(line)]
            if hits:
                out.append(f"--- {logfile.name} ---\n" + "\n".join(hits[-lines:]))
    return "\n".join(out)


def test_slurm_controller_restart_every_job_ends_once(slurm_cluster):
    from crossdock.dev import slurm as dev

    n = int(os.environ.get("CROSSDOCK_CHAOS_SLURM_JOBS", "200"))
    seed = seed_from_env()
    faults = schedule(random.Random(seed), 40, {"worker": 2, "scheduler": 1, "slurmctld": 2, "slurmd": 2, "munged": 1},
                      [2.0])
    # Under /tmp, not pytest's 0700 tmp_path: Slurm runs the jobs as its job user.
    root = Path(tempfile.mkdtemp(prefix="crossdock-chaos-slurm-", dir="/tmp"))
    env = {"CROSSDOCK_SLURM_DIR": slurm_cluster["CROSSDOCK_SLURM_DIR"],
           "CROSSDOCK_SLURM_ENV": str(dev.Layout.of(slurm_cluster["CROSSDOCK_SLURM_DIR"]).env_file)}
    run = ChaosRun(root, slurm_config(), seed, n, faults, waves=4, wave_every=8, recover_timeout=300,
                   env=env, actions={"slurmctld": restart_slurmctld, "slurmd": kill_slurmd, "munged": kill_munged})
    verdicts, table = run_chaos(run)
    verdict = check(run.history)
    print(verdict.summary(), flush=True)
    assert not [v for v in verdicts if v.problem], table + slurm_view(verdicts, run)
    assert verdict.ok, verdict.report()
