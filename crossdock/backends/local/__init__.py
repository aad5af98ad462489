"""The local backend: this machine as one node, each job under a detached supervisor."""

from __future__ import annotations

from crossdock.queue.ports import Capabilities

CAPABILITIES = Capabilities(heartbeat=True, fleets=True, sizes_nodes=True, signals=True, services=True, evicts=True,
                            batches=True, routed=True)
"""``batches``: the jobs of one cycle start from one dispatch task (one read, one claim round trip,
the spawner asked from a few threads), not one Celery task each.
``services``: replicas of inference services run as local jobs, each on a loopback port of its own
(:mod:`.replica`), behind crossdock's router (``routed``: ``crossdock.workers.router``, run by ``crossdock up``).
``fleets``: a queue's ``elastic.fleet`` may be local — Celery worker processes that ``crossdock up``
runs and the autoscaler scales (``crossdock.workers.fleet``; the backend object itself scales nothing).
``evicts``: the descheduler's eviction is a requeue (the supervisor stops the job after its grace).
``sizes_nodes``: ``cpus: auto`` / ``memory_mib: auto`` are this machine's (:mod:`.resources`)."""


def create(ctx):
    from crossdock.backends.local.backend import LocalBackend

    return LocalBackend(ctx.store, ctx.config, ctx.state_dir, dict(ctx.child_env))
