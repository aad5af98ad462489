"""Scheduler plugins, one module per plugin; importing this package registers them all."""

from crossdock.queue.scheduler.plugins import (  # noqa: F401
    anti_affinity,
    balanced_allocation,
    gpu_fragmentation,
    gpu_model,
    gpu_sharing,
    gpu_topology,
    least_allocated,
    mig_profile,
    most_allocated,
    node_list,
    node_resources_fit,
    node_selector,
    node_unschedulable,
    pool_membership,
    requested_to_capacity_ratio,
    reserved_capacity,
    taint_toleration,
)
