"""The live descheduling policy inside the simulator: a job blocked by scattered GPUs starts at the
descheduler's next run, after the fewest moves, instead of when a small job ends."""

from __future__ import annotations

import numpy as np
import pytest

from crossdock.sim.cluster import PodReq
from crossdock.sim.deschedule import SimDescheduler, sim_config
from crossdock.sim.dynamic import SimJob, simulate
from crossdock.sim.trace import MILLI, NodeTable, PodTable

pytestmark = pytest.mark.descheduler
HOUR = 3600.0


def _run(descheduler: bool):
    nodes = NodeTable(("g0", "g1"), np.array([64000, 64000]), np.array([512000, 512000]), np.array([4, 4]),
                      np.array([0, 0]), ("A100",))
    everywhere = np.arange(2)
    small = [SimJob(i, "small", 0.0, 10 * HOUR, PodReq(1000, 1000, 1, MILLI, PodTable.ANY), 100, True, "crossdock",
                    everywhere, pools=[everywhere]) for i in range(6)]  # three on each node
    big = SimJob(6, "big", 60.0, HOUR, PodReq(2000, 2000, 2, MILLI, PodTable.ANY), 200, False, "crossdock",
                 everywhere, pools=[everywhere])
    desched = None
    if descheduler:
        classes = {"small": {"priority": 100, "preemptible": True, "pools": ["gpu"]},
                   "big": {"priority": 200, "preemptible": False, "pools": ["gpu"]}}
        desched = SimDescheduler(sim_config(classes, ["gpu"], {}), ["gpu", "gpu"], interval_s=300)
    for j in small:
        j.policy = "spread"  # three on each node: one idle GPU on each, never two on one
    jobs = [*small, big]
    result = simulate(nodes, jobs, seed=1, horizon_s=12 * HOUR, descheduler=desched)
    return result, big, small


def test_the_blocked_job_starts_after_one_migration():
    without, big, _ = _run(False)
    assert big.start is not None and big.start >= 10 * HOUR  # waited for a small job to end
    with_, big, small = _run(True)
    assert with_.migrations == 1 and sum(j.migrated for j in small) == 1
    assert big.start is not None and big.start <= 600  # at the descheduler's next run
    assert with_.extra["migration_lost_gpu_hours"] >= 0
