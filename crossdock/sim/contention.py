"""The case study's models of what placement does to running work (pure functions, numpy only).

- **CPU on a node** (:func:`cfs_shares`): the Linux CFS gives every cgroup CPU in proportion to its
  ``cpu.shares`` (Kubernetes sets ``shares = request · 1024``) while the node is contended, and
  lends what a cgroup does not use to the others (work-conserving); a cgroup with a CFS quota
  (its CPU limit) never gets more than the limit. That is weighted max-min fairness, computed by
  water-filling.
- **An inference replica's P99** (:func:`inference_p99_ms`): a processor-sharing queue whose speed
  is the CPU it gets. At utilisation ``rho = demand / cpu`` the sojourn time scales as
  ``1 / (1 − rho)`` (M/M/1-PS); the replica is sized (its HPA target) so that it runs at ``rho0``
  with all the CPU it can use, where its P99 is ``base_ms``. A CFS quota below the CPU the
  replica's threads would use in a burst throttles it for the rest of each period: a request that
  arrives once the quota is spent waits ``period · (1 − limit / parallel demand)``.
- **All-reduce efficiency of a multi-worker job** (:func:`allreduce_efficiency`): ring all-reduce
  is bandwidth-bound (Patarasuk & Yuan 2009), so an iteration takes ``compute + comm / bandwidth
  share``; workers sharing one node share its NVLink domain and NIC, so the bandwidth share is
  ``comm_efficiency[k]`` for ``k`` workers on the node, and a job inside one NVLink domain talks
  over NVLink only.

Sources and the choice of every parameter: docs/casestudy.md.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np


def cfs_shares(capacity: float, demand: np.ndarray, weight: np.ndarray, limit: np.ndarray) -> np.ndarray:
    """CPU (cores) each cgroup of one node gets: weighted max-min fair water-filling of
    ``capacity`` over ``min(demand, limit)`` with weights ``weight`` (CPU requests)."""
    want = np.minimum(np.asarray(demand, float), np.asarray(limit, float))
    w = np.maximum(np.asarray(weight, float), 1e-3)
    got = np.zeros_like(want)
    active = want > 0
    left = float(capacity)
    while active.any() and left > 1e-9:
        fair = left * w[active] / w[active].sum()
        need = want[active] - got[active]
        done = need <= fair + 1e-12
        if done.any():  # satisfy those under their fair share, hand the rest round again
            idx = np.flatnonzero(active)[done]
            left -= float((want[idx] - got[idx]).sum())
            got[idx] = want[idx]
            active[idx] = False
            continue
        got[active] += fair
        break
    return got


def inference_p99_ms(cpu: float, demand: float, limit: float | None, parallel: float, *, base_ms: float,
                     rho0: float, period_ms: float, timeout_ms: float) -> float:
    """P99 latency of one replica that gets ``cpu`` cores for ``demand`` cores of work; its
    threads would use ``parallel`` cores when busy; ``limit``: its CFS quota in cores (None: none)."""
    rho = demand / max(cpu, 1e-9)
    if rho >= 0.999:
        return timeout_ms
    queue = base_ms * (1 - rho0) / (1 - rho)
    throttle = 0.0 if limit is None else period_ms * max(0.0, 1 - limit / max(parallel, 1e-9))
    return float(min(timeout_ms, queue + throttle))


def allreduce_efficiency(workers_per_node: Sequence[int], *, compute_to_comm: float, nvlink_speedup: float,
                         comm_efficiency: Mapping[int, float]) -> float:
    """Throughput of a data-parallel job as a fraction of its compute-only throughput.
    ``workers_per_node``: how many of its workers each of its nodes holds; ``compute_to_comm``:
    compute time over inter-node all-reduce time with one worker per node; ``nvlink_speedup``: how
    much faster the all-reduce is inside one NVLink domain; ``comm_efficiency[k]``: the bandwidth
    share left to each of ``k`` workers that share a node's NVLink domain and NIC."""
    counts = [k for k in workers_per_node if k > 0]
    if not counts:
        return 0.0
    if len(counts) == 1:  # the whole job in one NVLink domain
        comm = 1.0 / nvlink_speedup
    else:
        worst = max(counts)
        share = comm_efficiency.get(worst, min(comm_efficiency.values()) ** (worst - 1))
        comm = 1.0 / share
    return float(compute_to_comm / (compute_to_comm + comm))
