"""The profile a queue's config selects: ``profile_for(placement, plugin_weights)``.

Importing this module imports :mod:`crossdock.queue.scheduler.plugins`, which registers every
plugin; the registry itself imports none, so plugins import the registry and not the reverse.
Profiles are built once per (placement, weights) and shared.
"""

from __future__ import annotations

from typing import Mapping

import crossdock.queue.scheduler.plugins  # noqa: F401  (registers every plugin)
from crossdock.queue.scheduler.registry import (FILTERS, PERMITS, PLACEMENT_SCORES, POST_FILTERS, PRE_FILTERS,
                                                REGISTRY, RESERVES, Profile, create)

_PROFILES: dict[tuple, Profile] = {}


def profile_for(placement: str, plugin_weights: Mapping[str, int] | None = None) -> Profile:
    weights = dict(PLACEMENT_SCORES.get(placement) or PLACEMENT_SCORES["binpack"])
    for name, w in (plugin_weights or {}).items():
        if name in REGISTRY and hasattr(REGISTRY[name], "score"):
            weights[name] = int(w)
    key = (placement, tuple(sorted(weights.items())))
    prof = _PROFILES.get(key)
    if prof is None:
        prof = Profile([create(n) for n in FILTERS], [(create(n), w) for n, w in weights.items() if w > 0],
                       [create(n) for n in PRE_FILTERS], [create(n) for n in RESERVES],
                       [create(n) for n in PERMITS], [create(n) for n in POST_FILTERS])
        _PROFILES[key] = prof
    return prof
