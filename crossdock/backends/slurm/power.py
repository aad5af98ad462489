"""Slurm's power saving as crossdock's node provisioner (``provisioner: power_save``).

A pool with ``provisioner: power_save`` names a partition whose nodes Slurm powers down when idle
(``SuspendTime``, ``SuspendProgram``) and up again (``ResumeProgram``). crossdock then decides
when they come up: ahead of allocation, from its own backlog (``scontrol update nodename=…
state=power_up``), and when they go (``state=power_down_asap``: drained first, powered down once
their jobs end). Slurm's own ``SuspendTime`` stays the backstop for nodes left idle.

How the nodes look to the rest of crossdock (``power_state`` of each node, from ``sinfo --json``
or slurmrestd's ``/nodes`` state flags):

============== ================================= ============================================
power state    Slurm                              inventory
============== ================================= ============================================
on             no power flag (IDLE, MIXED…)       schedulable as usual
powering_up    POWER_UP, POWERING_UP              not schedulable (a job placed there would
                                                  wait in CONFIGURING for slurmctld's periodic
                                                  check, up to 30 s on 22.05): ``starting``
powering_down  POWER_DOWN, POWERING_DOWN          not schedulable: ``stopping``
powered_down   POWERED_DOWN                       ``power_save`` pools: not schedulable, counted
                                                  in ``NodeGroup.spare`` (the autoscaler powers
                                                  them up); other pools: schedulable, Slurm
                                                  powers the node up on allocation
failed         POWERED_DOWN and DOWN (a resume    not schedulable, not spare
               that missed ResumeTimeout)
============== ================================= ============================================

Every node keeps its place in the inventory with the label ``slurm.power``, so that the scheduler
counts it in its pool and the autoscaler can tell spare capacity from capacity that is gone.

Drivers: the node listing works through both (the CLI's ``sinfo --json`` and slurmrestd's
``/nodes`` carry the same flags); powering nodes up and down needs ``scontrol update``, which
slurmrestd v0.0.38 lacks (its ``/node/{name}`` is read-only), so the REST drivers hand it to
their CLI fallback.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence

from crossdock.backends.slurm.driver import SlurmNode
from crossdock.queue.ports import NodeGroup

log = logging.getLogger(__name__)

PROVISIONER = "power_save"

ON, POWERING_UP, POWERING_DOWN, POWERED_DOWN, FAILED = "on", "powering_up", "powering_down", "powered_down", "failed"
POWER_LABEL = "slurm.power"
UNSCHEDULABLE_FLAGS = frozenset({"drain", "draining", "drained", "down", "maintenance", "not_responding", "fail",
                                 "power_down", "powering_down", "power_up", "powering_up"})
"""State flags of a node that takes no new job, whatever its base state."""


def power_state(node: SlurmNode) -> str:
    """One of ``on``, ``powering_up``, ``powering_down``, ``powered_down``, ``failed``."""
    flags = set(node.flags)
    if flags & {"power_up", "powering_up"}:
        return POWERING_UP
    if flags & {"power_down", "powering_down"}:
        return POWERING_DOWN
    if "powered_down" in flags:
        return FAILED if node.state.startswith("down") or "down" in flags else POWERED_DOWN
    return ON


def resume_failed(nodes: Iterable[SlurmNode]) -> set[str]:
    """Nodes whose resume missed ``ResumeTimeout``: Slurm set them DOWN and requeued their jobs."""
    return {n.name for n in nodes if power_state(n) == FAILED}


def group(pool: str, nodes: Iterable[SlurmNode]) -> NodeGroup:
    """The pool's nodes by power state; ``spare`` is how many are powered down and may come up."""
    by_state: dict[str, list[str]] = {}
    for n in sorted(nodes, key=lambda n: n.name):
        state = power_state(n)
        if state == ON and (n.state.startswith("down") or set(n.flags) & UNSCHEDULABLE_FLAGS):
            continue  # on but taking no work (drained, down): neither ready nor spare
        by_state.setdefault(state, []).append(n.name)
    return NodeGroup(pool=pool, ready=tuple(by_state.get(ON, ())), starting=tuple(by_state.get(POWERING_UP, ())),
                     stopping=tuple(by_state.get(POWERING_DOWN, ())), spare=len(by_state.get(POWERED_DOWN, ())))


def to_power_up(nodes: Iterable[SlurmNode], count: int) -> list[str]:
    """The first ``count`` powered-down nodes (by name); nodes already coming up are not asked again."""
    spare = sorted(n.name for n in nodes if power_state(n) == POWERED_DOWN)
    return spare[:max(count, 0)]


def to_power_down(nodes: Iterable[SlurmNode], names: Sequence[str]) -> list[str]:
    """Of ``names``, those of the pool that are on (or coming up): the ones a power-down changes."""
    mine = {n.name: power_state(n) for n in nodes}
    return [name for name in dict.fromkeys(names) if mine.get(name) in (ON, POWERING_UP)]


class PowerSave:
    """``ProvisionsNodes`` for ``SlurmBackend`` (mixed in): the nodes of a pool's partition."""

    def _partition_nodes(self, pool: str) -> list[SlurmNode]:
        partition = self._slurm_pools().get(pool)  # type: ignore[attr-defined]
        if partition is None:
            raise KeyError(f"pool {pool!r} is not a Slurm pool with a partition")
        return [n for n in self.driver.nodes() if partition in n.partitions]  # type: ignore[attr-defined]

    def node_group(self, pool: str) -> NodeGroup:
        return group(pool, self._partition_nodes(pool))

    def add_nodes(self, pool: str, count: int) -> list[str]:
        """Power up ``count`` of the pool's powered-down nodes ahead of allocation (fewer when
        fewer are spare); returns their names."""
        names = to_power_up(self._partition_nodes(pool), count)
        if names:
            self.driver.update_nodes(names, "power_up")  # type: ignore[attr-defined]
            log.info("pool %s: powering up %s", pool, ",".join(names))
        return names

    def remove_nodes(self, pool: str, names: Sequence[str]) -> list[str]:
        """Power these nodes down once their jobs end (``power_down_asap`` drains them first)."""
        chosen = to_power_down(self._partition_nodes(pool), names)
        if chosen:
            self.driver.update_nodes(chosen, "power_down_asap")  # type: ignore[attr-defined]
            log.info("pool %s: powering down %s", pool, ",".join(chosen))
        return chosen
