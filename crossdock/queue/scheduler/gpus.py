"""Which devices of one node a worker gets. Pure functions over one node's device row.

- Whole GPUs come from idle devices only. On a node with NVLink islands, a worker asking for
  at most an island's worth of GPUs gets them all from one island, the fullest island that
  still fits (best fit keeps whole islands free for bigger jobs); larger asks span islands.
- A share goes to the device with the least free amount that still holds it (best fit), so
  partially used devices fill up before idle ones are broken.
- MIG slices are taken in slice order from the requested profile.
"""

from __future__ import annotations

from typing import Mapping

import numpy as np

FULL = 1000


def choose_whole(free: np.ndarray, exists: np.ndarray, island: np.ndarray, count: int,
                 island_cap: int) -> list[int] | None:
    idle = np.flatnonzero(exists & (free == FULL))
    if len(idle) < count:
        return None
    if count == 0:
        return []
    if island_cap > 0 and count <= island_cap:
        isl = island[idle]
        sizes = np.bincount(isl[isl >= 0]) if (isl >= 0).any() else np.zeros(0, np.int64)
        fits = np.flatnonzero(sizes >= count)
        if len(fits) == 0:
            return None
        best = int(fits[np.argmin(sizes[fits])])  # fewest idle that still fit; lowest island on ties
        return [int(c) for c in idle[isl == best][:count]]
    return [int(c) for c in idle[:count]]


def choose_share(free: np.ndarray, exists: np.ndarray, amount: int) -> int | None:
    ok = exists & (free >= amount)
    if not ok.any():
        return None
    cand = np.where(ok, free, FULL + 1)
    return int(np.argmin(cand))


def choose_slices(slice_free: Mapping[str, list[str]], profile: str, count: int) -> list[str] | None:
    free = slice_free.get(profile, [])
    if len(free) < count:
        return None
    return list(free[:count])
