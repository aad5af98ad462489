"""A job's CPU on one node as a backend confines it: the request (its guaranteed share) and the
limit (its ceiling), in millicores.

Light on purpose: the local backend imports it on every submit, and the submit path loads no
scheduler module (``tests/integration/local/test_cli.py::test_a_real_submit_loads_no_heavy_module``).
"""

from __future__ import annotations

from crossdock.queue.config import ClusterConfig
from crossdock.queue.models import Job


def cpu_milli(job: Job, config: ClusterConfig) -> tuple[int, int]:
    """One node's share of the job's CPU in millicores: (request, limit). The limit is the CPUs
    it asked for, the request that times its queue's ``cpu_request_ratio``; every backend that
    confines CPU (a pod's resources, a local job's cgroup) writes these two, and the scheduler
    places by the request."""
    queue = config.queues.get(job.queue)
    limit = job.spec.cpus_per_node() * 1000
    return max(1, int(limit * (queue.cpu_request_ratio if queue else 1.0))), limit
