"""Slurm jobs whose batch script never reached their node.

slurmctld marks a job RUNNING when it allocates it, then sends the batch launch to the node; a
launch the node did not take (its slurmd down for a moment) waits in the controller's agent queue
for a retry. A controller that restarts meanwhile loses that queue: the job stays RUNNING in its
saved state while nothing of it runs, and Slurm finds out only at the node's next registration,
every 20th ping (about 33 minutes with the default ``SlurmdTimeout``).

:class:`LaunchWatch` tells such an attempt from a running one by asking its node for the batch
step (``sstat``, through the driver's ``batch_launched``), once the attempt has been running for
its grace (:func:`grace_s`: twice the time Slurm itself allows a launch, at least
:data:`LAUNCH_GRACE_S`), and calls it lost only when the node answers twice, :data:`RECHECK_S`
apart, that it has no such step. An attempt whose step answered is not asked again.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

LAUNCH_GRACE_S = 60.0
"""The least time an attempt runs before its launch is checked."""
RECHECK_S = 10.0
"""Between the node's first "no such step" and the second that makes the attempt lost."""
CHECKS_PER_PASS = 16
"""Nodes asked in one pass at most (each is a round trip): after a restart of crossdock with
many jobs running, their launches are confirmed over several passes."""
LAUNCH_LOST = "LaunchLost"
"""The reason of an attempt whose node never got its batch script."""

Attempt = tuple[int, int]
"""(crossdock job id, attempt)."""


def grace_s(slurm_launch_s: float) -> float:
    """How long an attempt runs before its launch is checked, when Slurm calls a batch job missing
    ``slurm_launch_s`` after its start (``BatchStartTimeout`` + ``MessageTimeout``, 20 s by default;
    a site whose prolog runs long raises ``BatchStartTimeout`` for Slurm's sake, and so for this)."""
    return max(LAUNCH_GRACE_S, 2 * slurm_launch_s)


@dataclass
class _Seen:
    since: float
    missing_at: float | None = None
    launched: bool = False


class LaunchWatch:
    """Which running attempts lost their launch; ``probe(ref)`` asks the node (True: the batch
    step is there, False: the node has none, None: no answer)."""

    def __init__(self, probe: Callable[[str], bool | None], clock: Callable[[], float],
                 grace: float = LAUNCH_GRACE_S):
        self._probe, self._clock, self.grace = probe, clock, grace
        self._seen: dict[Attempt, _Seen] = {}

    def lost(self, running: Mapping[Attempt, str]) -> list[Attempt]:
        """Of the attempts Slurm reports running now (attempt → Slurm reference), those whose node
        has twice said it has no batch step for them. Attempts no longer running are forgotten."""
        now = self._clock()
        self._seen = {key: self._seen.get(key) or _Seen(now) for key in running}
        lost: list[Attempt] = []
        asked = 0
        for key, ref in running.items():
            seen = self._seen[key]
            if seen.launched or now - seen.since < self.grace:
                continue
            if seen.missing_at is not None and now - seen.missing_at < RECHECK_S:
                continue
            if asked == CHECKS_PER_PASS:
                break
            asked += 1
            known = self._probe(ref)
            if known:
                seen.launched = True
            elif known is None:
                seen.missing_at = None  # no answer proves nothing: start over
            elif seen.missing_at is None:
                seen.missing_at = now
            else:
                lost.append(key)
        return lost
