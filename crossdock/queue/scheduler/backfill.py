"""Backfill: the highest-priority blocked job gets a reservation; smaller jobs may use the gap.

:func:`earliest_start` replays the running jobs' ends (start + time limit, soonest first) on a
simulated copy of the nodes the job may use, until enough nodes would hold it; that time and
those nodes are its reservation. Jobs without a time limit never end in this replay, so a job
that needs their capacity gets no reservation (and nothing is held for it).

While the reservation stands, a lower job may start on a reserved node only if its own time
limit ends it before the reservation starts (the ``ReservedCapacity`` filter), so given
accurate time limits no backfilled job delays the reserved one.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Callable

import numpy as np

from crossdock.queue.scheduler.framework import CycleState
from crossdock.queue.scheduler.inventory import Assignment
from crossdock.queue.scheduler.registry import Profile
from crossdock.queue.scheduler.request import Request
from crossdock.queue.snapshot import Allocation

Event = tuple[datetime, int, Callable[[], None]]


def ending_events(state: CycleState, allocations: list[Allocation],
                  admitted: list[tuple[datetime, Assignment]]) -> list[Event]:
    inv = state.inventory
    events: list[Event] = []
    for k, a in enumerate(allocations):
        if a.start_time is None or a.time_limit_seconds is None or a.node not in inv.index:
            continue
        end = max(a.start_time + timedelta(seconds=a.time_limit_seconds), state.now)
        events.append((end, inv.index[a.node], (lambda a=a: inv.release(a))))
    for end, asg in admitted:
        quiet = Assignment(asg.node, asg.cpu_milli, asg.memory_mib, asg.devices, asg.slices, None)
        events.append((end, asg.node, (lambda quiet=quiet: inv.undo(quiet))))
    events.sort(key=lambda e: (e[0], e[1]))
    return events


def earliest_start(state: CycleState, profile: Profile, req: Request, events: list[Event]
                   ) -> tuple[datetime, list[int]] | None:
    inv = state.inventory
    static = profile.static_nodes(state, req)
    allowed = np.zeros(inv.n, bool)
    allowed[static] = True
    ready = [int(i) for i in profile.feasible(state, req, static)]
    saved: dict[int, tuple] = {}
    found = None
    inv.quiet = True
    try:
        for end, i, give_back in events:
            if not allowed[i] or i in ready:
                continue
            if i not in saved:
                saved[i] = inv.save(i)
            give_back()
            if len(profile.feasible(state, req, np.array([i], np.int64))):
                ready.append(i)
                if len(ready) >= req.nodes:
                    found = (end, sorted(ready[:req.nodes]))
                    break
    finally:
        for i, s in saved.items():
            inv.restore(i, s)
        inv.quiet = False
    return found
