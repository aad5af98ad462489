"""Coscheduling (permit): a gang runs only with all its workers, each on its own node."""

from __future__ import annotations

from crossdock.queue.scheduler.framework import SUCCESS, Code, CycleState, Status
from crossdock.queue.scheduler.registry import register
from crossdock.queue.scheduler.request import Request
from crossdock.queue.states import Reason

NAME = "Coscheduling"


@register
class Coscheduling:
    name = NAME

    def permit(self, state: CycleState, req: Request, picks: list[int]) -> Status:
        if len(picks) == req.nodes and len(set(picks)) == len(picks):
            return SUCCESS
        return Status(Code.UNSCHEDULABLE, Reason.RESOURCES,
                      f"gang of {req.nodes} got {len(set(picks))} distinct node(s)", NAME)
