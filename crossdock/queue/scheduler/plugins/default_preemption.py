"""DefaultPreemption (post-filter): find the fewest lower-priority victims (``scheduler.preemption``).

Reads ``state.extra["preemptor"]`` (a callable returning the cycle's
:class:`~crossdock.queue.scheduler.preemption.Preemptor`, built on first use),
``state.extra["profile_of"]`` (a callable returning the profile the cycle schedules a request
with, so that victims are sought with the same filters) and ``state.extra["preemption_cap"]``
(victims still allowed this cycle); it decides only, the cycle records the preemptions and
nominations.
"""

from __future__ import annotations

from crossdock.queue.scheduler.framework import Code, CycleState, Status
from crossdock.queue.scheduler.registry import register
from crossdock.queue.scheduler.request import Request
from crossdock.queue.states import Reason

NAME = "DefaultPreemption"


@register
class DefaultPreemption:
    name = NAME

    def post_filter(self, state: CycleState, req: Request) -> Status:
        cap = state.extra.get("preemption_cap", 0)
        if not req.can_preempt or cap <= 0:
            return Status(Code.UNSCHEDULABLE, Reason.RESOURCES, "preemption: not allowed", NAME)
        key = ("preempt-failed", req.shape_key(), req.priority)
        if state.cache.get(key) == state.inventory.version:
            return Status(Code.UNSCHEDULABLE, Reason.RESOURCES, "preemption: no victims", NAME)
        profile = state.extra["profile_of"](req)
        found = state.extra["preemptor"]().find(state, profile, req, cap)
        if found is None:
            state.cache[key] = state.inventory.version
            return Status(Code.UNSCHEDULABLE, Reason.RESOURCES, "preemption: no victims", NAME)
        nodes, victims = found
        return Status(Code.SUCCESS, Reason.PREEMPTING, "", NAME, tuple(nodes), tuple(victims))
