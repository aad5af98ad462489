"""Quota (pre-filter and reserve): the queue's nominal quota, cohort borrowing and per-user caps.

The ledger (``scheduler.quota.QuotaLedger``) lives in ``state.extra["quota"]``. The pre-filter
checks what the job asks for; reserve checks again with the GPU model the job landed on (for
per-model quotas) and books it.
"""

from __future__ import annotations

from typing import Any

from crossdock.queue.scheduler.framework import SUCCESS, Code, CycleState, Status
from crossdock.queue.scheduler.registry import register
from crossdock.queue.scheduler.request import Request
from crossdock.queue.states import Reason

NAME = "Quota"


def _model(state: CycleState, assignments: list[Any]) -> str | None:
    return state.inventory.model[assignments[0].node] or None


@register
class Quota:
    name = NAME

    def pre_filter(self, state: CycleState, req: Request) -> Status:
        message = state.extra["quota"].check(req)
        if message:
            return Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, Reason.QUOTA_EXCEEDED, message, NAME)
        return SUCCESS

    def reserve(self, state: CycleState, req: Request, assignments: list[Any]) -> Status:
        ledger, model = state.extra["quota"], _model(state, assignments)
        message = ledger.check(req, model) if model else None
        if message:
            return Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, Reason.QUOTA_EXCEEDED, message, NAME)
        ledger.add(req, model)
        return SUCCESS

    def unreserve(self, state: CycleState, req: Request, assignments: list[Any]) -> None:
        state.extra["quota"].add(req, _model(state, assignments), sign=-1)
