"""Which devices of one node a worker gets. Pure functions over one node's device row.

- Whole GPUs come from idle devices only. On a node with NVLink islands, a worker asking for
  at most an island's worth of GPUs gets them all from one island, the fullest island that
  still fits (best fit keeps whole islands free for bigger jobs); larger asks span islands.
- A share goes to the device with the least free amount that still holds it (best fit), so
  partially used devices fill up before idle ones are broken.
- MIG slices are taken in slice order from the requested profile.

``choose_whole``/``choose_share`` take numpy rows; ``whole_of``/``share_of`` are the same choices
on one node's devices as plain lists (a node has a handful of GPUs: lists are quicker there).
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


def whole_of(free: list[int], island: list[int], count: int, island_cap: int) -> list[int] | None:
    """:func:`choose_whole` on the node's devices as lists (every column exists)."""
    idle = [c for c, f in enumerate(free) if f == FULL]
    if len(idle) < count:
        return None
    if count == 0:
        return []
    if island_cap > 0 and count <= island_cap:
        sizes: dict[int, int] = {}
        for c in idle:
            k = island[c]
            if k >= 0:
                sizes[k] = sizes.get(k, 0) + 1
        fits = [(n, k) for k, n in sizes.items() if n >= count]
        if not fits:
            return None
        best = min(fits)[1]  # fewest idle that still fit; lowest island on ties
        return [c for c in idle if island[c] == best][:count]
    return idle[:count]


def share_of(free: list[int], amount: int) -> int | None:
    """:func:`choose_share` on the node's devices as a list (every column exists)."""
    best = None
    for c, f in enumerate(free):
        if f >= amount and (best is None or f < free[best]):
            best = c
    return best
