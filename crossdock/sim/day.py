"""A day of arrivals from a pod list with submit times: the trace folded onto one day.

The openb pod lists carry each pod's submit time (``creation_time``, seconds from the trace
start, over about 149 days). :func:`trace_day` keeps every pod's *time of day*
(``creation_time mod 86400``), so a day holds the whole list (8,152 pods in the default one)
with the trace's own diurnal shape: by hour of day the default list has 137–550 arrivals, the
quiet hours 9–14 a quarter of the busy ones. Nothing is resampled; ``fraction`` < 1 thins the
list (each pod kept with that probability, drawn from the seed) for smaller runs.

Runtime = ``deletion_time − scheduled_time`` (``creation_time`` for pods never scheduled),
clipped to ``[min_duration_s, max_duration_s]``: pods still Running when the trace was cut
have months-long lifetimes, services rather than batch work. CPU requests are rounded up to
whole cores, as a ``JobSpec`` holds them, so the simulator's placement and crossdock's
autoscaler see the same requests.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from crossdock.sim.trace import MILLI, PodTable

DAY_S = 86400.0


@dataclass(frozen=True, slots=True)
class DayJob:
    """One arrival: time of day (s), runtime (s) and its request (milli-CPU whole cores, MiB,
    GPUs and milli-GPU per GPU, 0 for CPU-only jobs)."""

    arrival: float
    duration: float
    cpu_milli: int
    mem_mib: int
    num_gpu: int = 0
    gpu_milli: int = 0


def trace_day(pods: PodTable, *, seed: int = 42, fraction: float = 1.0, max_duration_s: float = 4 * 3600,
              min_duration_s: float = 60.0) -> list[DayJob]:
    """The pod list as one day of arrivals, in arrival order (see the module docstring)."""
    if not pods.has_times:
        raise ValueError(f"{pods.source}: no creation_time/deletion_time columns; a day of arrivals needs submit times")
    if not 0 < fraction <= 1:
        raise ValueError(f"fraction: {fraction} must be in (0, 1]")
    if not 0 < min_duration_s <= max_duration_s:
        raise ValueError(f"durations: need 0 < min ({min_duration_s}) <= max ({max_duration_s})")
    rng = np.random.default_rng(seed)
    keep = rng.uniform(0, 1, len(pods)) < fraction if fraction < 1 else np.ones(len(pods), bool)
    start = np.where(pods.scheduled >= 0, pods.scheduled, pods.creation)
    duration = np.clip(pods.deletion - start, min_duration_s, max_duration_s)
    tod = (pods.creation % int(DAY_S)).astype(np.float64)
    cores = -(-pods.cpu // MILLI)
    jobs = [DayJob(float(tod[i]), float(duration[i]), int(max(cores[i], 1)) * MILLI, int(pods.mem[i]),
                   int(pods.num_gpu[i]), int(pods.gpu_milli[i]) if pods.num_gpu[i] else 0)
            for i in np.flatnonzero(keep)]
    jobs.sort(key=lambda j: (j.arrival, j.num_gpu, j.cpu_milli))
    return jobs


def hourly_arrivals(jobs: list[DayJob]) -> np.ndarray:
    """Arrivals per hour of the day (24 counts)."""
    return np.bincount([int(j.arrival // 3600) % 24 for j in jobs], minlength=24)
