"""A small synthetic day and cluster for the elastic simulation tests."""

from __future__ import annotations

import math

import numpy as np

from crossdock.queue.config import ClusterConfig, parse_config
from crossdock.sim.day import DayJob

ROUTE = {"gpu": "gpu", "cpu": "cpu"}


def small_config(gpu_max: int = 6, cpu_max: int = 4, unneeded_s: float = 600, interval_s: float = 1.0) -> ClusterConfig:
    return parse_config({
        "priority_classes": {"batch": {"value": 100}},
        "pools": {
            "gpu": {"backend": "k8s", "gpu": {"model": "G3", "sharing": True}, "provisioner": "kwok",
                    "min_nodes": 0, "max_nodes": gpu_max,
                    "node_template": {"cpus": 64, "memory_mib": 262144, "gpus": 8, "gpu_model": "G3"}},
            "cpu": {"backend": "k8s", "provisioner": "kwok", "min_nodes": 0, "max_nodes": cpu_max,
                    "node_template": {"cpus": 32, "memory_mib": 131072}},
        },
        "queues": {
            "gpu": {"priority_class": "batch", "pools": ["gpu"], "placement": "binpack",
                    "elastic": {"metric": "queue_length", "per_replica": 8, "max": gpu_max}},
            "cpu": {"priority_class": "batch", "pools": ["cpu"], "placement": "most-requested",
                    "elastic": {"metric": "queue_length", "per_replica": 4, "max": cpu_max}},
        },
        "autoscaler": {"interval_seconds": interval_s, "scale_down_unneeded_seconds": unneeded_s,
                       "scale_down_delay_after_add_seconds": unneeded_s},
    })


def synthetic_day(seed: int = 7, hours: float = 24.0, peak_per_hour: float = 60.0) -> list[DayJob]:
    """Poisson arrivals whose rate follows one sine over the day (peak at 18:00, a tenth of it at
    06:00), by thinning; 1-GPU, half-GPU and 2-GPU jobs and 4-core CPU jobs of ~20 minutes."""
    rng = np.random.default_rng(seed)
    n = rng.poisson(peak_per_hour * hours)
    t = np.sort(rng.uniform(0, hours * 3600, n))
    rate = 0.55 - 0.45 * np.cos(2 * math.pi * (t / 86400 - 0.25))
    t = t[rng.uniform(0, 1, n) < rate]
    jobs = []
    for at in t:
        kind = rng.integers(4)
        duration = float(max(60.0, rng.lognormal(math.log(1200), 0.5)))
        if kind == 3:
            jobs.append(DayJob(float(at), duration, 4000, 8192))
        else:
            num, milli = ((1, 1000), (1, 500), (2, 1000))[kind]
            jobs.append(DayJob(float(at), duration, 8000 * num, 16384 * num, num, milli))
    return jobs
