"""Python's cyclic garbage collector paused around a scheduling cycle: ``with collection_paused(): …``.

The collector is process-wide state, so pausing it is the caller's choice (the scheduler loop,
benchmarks, the simulator), never the pure core's: ``crossdock.queue.cycle.run_cycle`` does not
touch it.

A cycle allocates many small containers that die young (reference counting frees them) and
builds no garbage cycle that must be reclaimed before it returns. With tens of thousands of jobs
and allocations alive in the process, each automatic full collection inside the cycle walks all
of them (about 0.1 s at 10,000 pending jobs) and stalls whichever placement allocated last. The
collector catches up after the cycle, between cycles, where no decision waits on it.
"""

from __future__ import annotations

import gc
from contextlib import contextmanager
from typing import Iterator

__all__ = ["collection_paused"]


@contextmanager
def collection_paused() -> Iterator[None]:
    """The cyclic collector paused for the block, resumed as it was afterwards (a block entered
    with the collector already off leaves it off)."""
    paused = gc.isenabled()
    if paused:
        gc.disable()
    try:
        yield
    finally:
        if paused:
            gc.enable()
