"""Whether a pool has room for one more replica of a service now: the move-back trigger.

Room is counted with the scheduler's own filters on the inventory as it is (free capacity only:
a move back never preempts anyone for a replica that already serves), on nodes that hold no
replica of the service yet (the spread), so a replacement created for it can land at once.
"""

from __future__ import annotations

from datetime import datetime
from typing import Sequence

from crossdock.queue.config import ClusterConfig
from crossdock.queue.models import Job
from crossdock.queue.scheduler.framework import CycleState
from crossdock.queue.scheduler.inventory import Inventory
from crossdock.queue.scheduler.profiles import profile_for
from crossdock.queue.scheduler.request import build_request
from crossdock.queue.snapshot import Allocation, Node


def replica_room(template: Job, pools: Sequence[str], nodes: Sequence[Node], allocations: Sequence[Allocation],
                 config: ClusterConfig, now: datetime) -> dict[str, int]:
    """Pool → nodes of it where ``template`` (a replica job of the service, any pools) fits now and
    no replica of the service runs."""
    if not pools or template.spec.service is None:
        return {}
    inv = Inventory(nodes)
    inv.load(allocations)
    state = CycleState(inv, config, now)
    taken = inv.service_nodes.get(template.spec.service.name, {})
    queue = config.queues.get(template.queue)
    room: dict[str, int] = {}
    for pool in pools:
        req = build_request(template.model_copy(update={"pools": [pool]}), config)
        fits = profile_for(req.placement, queue.plugin_weights if queue else None).feasible(state, req)
        room[pool] = sum(1 for i in fits.tolist() if taken.get(int(i), 0) == 0)
    return room
