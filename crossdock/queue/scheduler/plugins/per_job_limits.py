"""PerJobLimits (pre-filter): a job over its queue's per-job limits can never run in that queue."""

from __future__ import annotations

from crossdock.queue.scheduler.framework import SUCCESS, Code, CycleState, Status
from crossdock.queue.scheduler.registry import register
from crossdock.queue.scheduler.request import Request
from crossdock.queue.states import Reason

NAME = "PerJobLimits"


@register
class PerJobLimits:
    name = NAME

    def pre_filter(self, state: CycleState, req: Request) -> Status:
        if req.limit_error:
            return Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, Reason.UNSCHEDULABLE, req.limit_error, NAME)
        return SUCCESS
