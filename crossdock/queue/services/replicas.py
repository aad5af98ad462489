"""A service's replicas as jobs: the spec each replica job gets, the pools it may use, how ready
it is, and the CPU request check that warns of the throttling trap."""

from __future__ import annotations

from datetime import datetime
from typing import Mapping, Sequence

from crossdock.queue.admission import admit
from crossdock.queue.config import ClusterConfig
from crossdock.queue.models import GpuRequest, Job, JobSpec
from crossdock.queue.serving import Endpoint, ServiceReplica, ServiceSpec
from crossdock.queue.snapshot import Node
from crossdock.queue.states import JobState

THROTTLE_RATIO = 0.8
"""A CPU request below this share of measured use is the throttling trap (the seed's lesson)."""


def replica_spec(spec: ServiceSpec, replica: ServiceReplica) -> JobSpec:
    """The job one replica runs: the service's command/image and resources, no time limit,
    requeued on node failure, owned by the service's owner."""
    return JobSpec(
        name=f"{spec.name}-{replica.replica}", user=spec.user, command=spec.command, image=spec.image,
        env=dict(spec.env), workdir=spec.workdir, cpus_per_task=spec.cpus, mem_per_node_mib=spec.mem_mib,
        gpus=GpuRequest(count=spec.gpus, type=spec.gpu_type) if spec.gpus else None, queue=spec.queue,
        time_limit_seconds=None, requeue=True, service=replica)


def service_pools(spec: ServiceSpec, queue_pools: Sequence[str]) -> tuple[str, ...]:
    """The pools a service's replicas may use, preferred first: its own list, else its queue's."""
    return tuple(spec.pools) if spec.pools else tuple(queue_pools)


def is_ready(job: Job, endpoint: Endpoint | None) -> bool:
    """Running, and its current attempt's endpoint answers the readiness probe."""
    return (job.state is JobState.RUNNING and endpoint is not None and endpoint.ready
            and endpoint.attempt == job.attempts)


def throttling_warning(spec: ServiceSpec, cpu_request_ratio: float, cpu_used: float | None) -> str | None:
    """The warning when a replica's CPU request (``cpus`` × its queue's ``cpu_request_ratio``) is
    below 0.8 of the CPUs it was measured to use: the kernel then throttles it exactly when traffic
    is high. None when it is not, or nothing was measured."""
    if cpu_used is None or cpu_used <= 0:
        return None
    request = spec.cpus * cpu_request_ratio
    if request >= THROTTLE_RATIO * cpu_used:
        return None
    return (f"service {spec.name!r}: CPU request {request:g} per replica is below {THROTTLE_RATIO:g} × the"
            f" {cpu_used:.2f} CPUs a replica was measured to use; it will be throttled under load:"
            f" raise cpus to at least {_at_least(cpu_used, cpu_request_ratio)} (or the queue's cpu_request_ratio)")


def _at_least(used: float, ratio: float) -> int:
    n = 1
    while n * ratio < THROTTLE_RATIO * used:
        n += 1
    return n


def most_cpu(cpu_used: Mapping[int, float]) -> float | None:
    return max(cpu_used.values()) if cpu_used else None


def replica_job(spec: ServiceSpec, replica: ServiceReplica, pools: Sequence[str], config: ClusterConfig,
                nodes: Sequence[Node], now: datetime) -> Job:
    """The job record of one new replica, admitted like any submission (InvalidJob if it cannot
    be), limited to ``pools`` and never preemptible whatever its queue's class says."""
    (job,) = admit(replica_spec(spec, replica), config, nodes, now)
    return job.model_copy(update={"pools": list(pools), "preemptible": False})
