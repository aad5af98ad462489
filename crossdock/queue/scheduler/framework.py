"""The scheduling framework: one small Protocol per extension point and the ``Status`` they return.

Extension points, in the order a cycle calls them (kube-scheduler's names):

- ``QueueSortPlugin.sort_key(state, req)`` — the order pending jobs are tried in;
- ``PreFilterPlugin.pre_filter(state, req) -> Status`` — checks on the job alone (per-job limits,
  quota); ``UNSCHEDULABLE_AND_UNRESOLVABLE`` stops the job for this cycle without preemption;
- ``FilterPlugin.filter(state, req, idx) -> bool array | None`` — which of the nodes ``idx`` (an
  int array of node indexes into :class:`~crossdock.queue.scheduler.inventory.Inventory`) may
  hold one worker; ``None`` when the filter does not apply to the job (every node passes).
  Vectorized: one call covers every node. ``static`` filters depend only on the job
  and the node, never on what runs there, so their masks are cached per request shape;
  ``local`` filters depend only on the request's shape and the tested node's own inventory row,
  so their verdicts are cached per shape and re-derived only for the nodes that changed
  (``placement.feasible``); filters with neither flag run on every call.
  ``reasons(state, req, idx)`` returns ``{message: count}`` for the nodes in ``idx`` that fail,
  in kube-scheduler's words ("Insufficient nvidia.com/gpu");
- ``ScorePlugin.score(state, req, idx) -> int64 array`` — 0–100 per node, already normalized;
  the profile multiplies it by the plugin's weight;
- ``ReservePlugin.reserve(state, req, assignments) -> Status`` / ``unreserve`` — book what a
  placement uses beyond node capacity (quota), undo it;
- ``PermitPlugin.permit(state, req, picks) -> Status`` — the gang gate: all workers or none;
- ``PostFilterPlugin.post_filter(state, req) -> Status`` — runs when no node fits (preemption);
  a ``SUCCESS`` carries the nominated nodes and the victims.

Outside a cycle (tests, offline tools) one can build an :class:`~.inventory.Inventory`, a
:class:`CycleState` and call ``Profile.feasible`` / ``Profile.scores`` directly.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from enum import Enum
from typing import Any, Protocol, runtime_checkable

import numpy as np

from crossdock.queue.config import ClusterConfig
from crossdock.queue.scheduler.inventory import Inventory
from crossdock.queue.scheduler.request import Request


class Code(Enum):
    SUCCESS = "Success"
    UNSCHEDULABLE = "Unschedulable"
    """No node fits now; preemption may help."""
    UNSCHEDULABLE_AND_UNRESOLVABLE = "UnschedulableAndUnresolvable"
    """No node can fit whatever is evicted (wrong pool, too big, over a per-job limit)."""
    WAIT = "Wait"
    """Capacity is being freed (nominated); try again next cycle."""
    SKIP = "Skip"
    """The plugin does not apply to this job."""
    ERROR = "Error"


@dataclass(frozen=True, slots=True)
class Status:
    code: Code = Code.SUCCESS
    reason: str = ""
    """A pending-reason value (see :class:`~crossdock.queue.states.Reason`)."""
    message: str = ""
    plugin: str = ""
    nominated: tuple[int, ...] = ()
    """Post-filter only: node indexes whose capacity is being freed for the job."""
    victims: tuple[Any, ...] = ()
    """Post-filter only: the jobs to preempt (``preemption.Victim``)."""

    @property
    def ok(self) -> bool:
        return self.code in (Code.SUCCESS, Code.SKIP)


SUCCESS = Status()


@dataclass
class CycleState:
    """Everything plugins read during one cycle."""

    inventory: Inventory
    config: ClusterConfig
    now: datetime
    cache: dict[Any, Any] = field(default_factory=dict)
    """Static filter masks and similar per-cycle memoization."""
    extra: dict[str, Any] = field(default_factory=dict)
    """Per-cycle state owned by individual plugins (quota ledger, reservations, workload mix)."""


@runtime_checkable
class QueueSortPlugin(Protocol):
    name: str

    def sort_key(self, state: CycleState, req: Request) -> tuple: ...


@runtime_checkable
class PreFilterPlugin(Protocol):
    name: str

    def pre_filter(self, state: CycleState, req: Request) -> Status: ...


@runtime_checkable
class FilterPlugin(Protocol):
    name: str
    static: bool

    def filter(self, state: CycleState, req: Request, idx: np.ndarray) -> np.ndarray | None: ...

    def reasons(self, state: CycleState, req: Request, idx: np.ndarray) -> dict[str, int]: ...


@runtime_checkable
class ScorePlugin(Protocol):
    name: str

    def score(self, state: CycleState, req: Request, idx: np.ndarray) -> np.ndarray: ...


FEW_NODES = 3
"""Score plugins compute up to this many nodes in Python ints, more in numpy arrays, with the
same integers: most score calls of a cycle cover a few nodes whose state changed, and numpy's
per-call cost outweighs its speed on a few rows."""


@runtime_checkable
class ReservePlugin(Protocol):
    name: str

    def reserve(self, state: CycleState, req: Request, assignments: list[Any]) -> Status: ...

    def unreserve(self, state: CycleState, req: Request, assignments: list[Any]) -> None: ...


@runtime_checkable
class PermitPlugin(Protocol):
    name: str

    def permit(self, state: CycleState, req: Request, picks: list[int]) -> Status: ...


@runtime_checkable
class PostFilterPlugin(Protocol):
    name: str

    def post_filter(self, state: CycleState, req: Request) -> Status: ...


def normalize(raw: np.ndarray, reverse: bool = False) -> np.ndarray:
    """Scale raw scores onto 0–100 as kube's DefaultNormalizeScore does (integer division)."""
    if raw.size == 0:
        return raw.astype(np.int64)
    top = int(raw.max())
    if top == 0:
        return np.full(raw.shape, 100 if reverse else 0, np.int64)
    scaled = raw.astype(np.int64) * 100 // top
    return 100 - scaled if reverse else scaled
