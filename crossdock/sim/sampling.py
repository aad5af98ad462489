"""Build the arrival sequence of a static packing run from a pod list ("tune").

Two ways, both deterministic for a seed:

``trace`` (default, the FGD artifact's ``TunePodsByNodeTotalResource``): every pod of the list,
shuffled; then, while the total GPU request is below ``tune`` × the cluster's GPUs, pods drawn
uniformly with replacement are appended until the next draw would push it over (the artifact
compares the running total plus the drawn pod's *per-GPU* share, which we keep); when the list
already asks for more, random pods are removed until it fits.

``uniform``: pods drawn uniformly with replacement from the list until the next one would push
the total GPU request over ``tune`` × the cluster's GPUs, in draw order.
"""

from __future__ import annotations

import numpy as np

from crossdock.sim.trace import PodTable

SAMPLING_MODES = ("trace", "uniform")


def sample_workload(pods: PodTable, cluster_gpu_milli: int, tune: float, rng: np.random.Generator,
                    mode: str = "trace") -> np.ndarray:
    """Indices into ``pods``, in arrival order."""
    if mode not in SAMPLING_MODES:
        raise ValueError(f"unknown sampling mode {mode!r}; choose one of {', '.join(SAMPLING_MODES)}")
    if len(pods) == 0:
        raise ValueError("the pod list is empty")
    if tune < 0:
        raise ValueError(f"tune must be >= 0, got {tune}")
    request = pods.gpu_request_milli
    target = tune * cluster_gpu_milli
    n = len(pods)
    if mode == "uniform":
        if tune == 0:
            return rng.permutation(n)
        out: list[int] = []
        total = 0
        while True:
            i = int(rng.integers(n))
            if total + int(request[i]) > target:
                break
            out.append(i)
            total += int(request[i])
        return np.array(out, np.int64)
    order = rng.permutation(n)
    if tune == 0:
        return order
    total = int(request.sum())
    if total > target:
        keep = list(order)
        while total > target:
            j = int(rng.integers(len(keep)))
            total -= int(request[keep[j]])
            del keep[j]
        return np.array(keep, np.int64)
    extra: list[int] = []
    per_gpu = pods.gpu_milli
    while True:
        i = int(rng.integers(n))
        if total + int(per_gpu[i]) > target:
            break
        extra.append(i)
        total += int(request[i])
    return np.concatenate([order, np.array(extra, np.int64)])
