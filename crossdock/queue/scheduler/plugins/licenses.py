"""Licenses (pre-filter and reserve): a job waits while a license it asks for is all held.

The ledger (``scheduler.licenses.LicenseLedger``) lives in ``state.extra["licenses"]``; reserve
books the job's licenses, unreserve gives them back."""

from __future__ import annotations

from typing import Any

from crossdock.queue.scheduler.framework import SUCCESS, Code, CycleState, Status
from crossdock.queue.scheduler.registry import register
from crossdock.queue.scheduler.request import Request
from crossdock.queue.states import Reason

NAME = "Licenses"


@register
class Licenses:
    name = NAME

    def pre_filter(self, state: CycleState, req: Request) -> Status:
        if not req.licenses:
            return SUCCESS
        message = state.extra["licenses"].check(req.licenses)
        if message:
            return Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, Reason.LICENSES, message, NAME)
        return SUCCESS

    def reserve(self, state: CycleState, req: Request, assignments: list[Any]) -> Status:
        if req.licenses:
            ledger = state.extra["licenses"]
            message = ledger.check(req.licenses)
            if message:
                return Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, Reason.LICENSES, message, NAME)
            ledger.add(req.licenses)
        return SUCCESS

    def unreserve(self, state: CycleState, req: Request, assignments: list[Any]) -> None:
        if req.licenses:
            state.extra["licenses"].add(req.licenses, sign=-1)
