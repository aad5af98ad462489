"""Shared pieces for filter plugins: the default ``reasons`` (one message per failing node)."""

from __future__ import annotations

import numpy as np

from crossdock.queue.scheduler.framework import CycleState
from crossdock.queue.scheduler.request import Request


class SimpleFilter:
    """A filter whose every failing node fails for the same message."""

    name = ""
    static = True
    message = ""

    def filter(self, state: CycleState, req: Request, idx: np.ndarray) -> np.ndarray | None:
        raise NotImplementedError

    def reasons(self, state: CycleState, req: Request, idx: np.ndarray) -> dict[str, int]:
        mask = self.filter(state, req, idx)
        if mask is None:
            return {}
        failing = int((~mask).sum())
        return {self.message_for(req): failing} if failing else {}

    def message_for(self, req: Request) -> str:
        return self.message
