"""The cycle's mutable copy of the cluster as numpy arrays, one entry per node (sorted by name).

Per node: allocatable and used CPU (millicores) and memory (MiB), and per GPU device its free
amount in milli-GPU (``1000`` = idle, ``0`` = fully taken). MIG-partitioned devices are not
usable whole; their slices are tracked per profile. Summaries the filters read in one vector
operation are kept up to date after every change to a node: ``gpu_free`` (idle devices),
``island_free`` (most idle devices inside one NVLink island), ``share_top`` (largest free
amount on one device) and ``mig_free[profile]``. Every such change is logged in ``changes``
(node indexes, in order), which per-shape caches read to re-derive only the nodes that changed.

A device (or slice) is handed out only when it has the amount free, so whole GPUs are never
over-committed; shares only go to nodes whose pool declares GPU sharing (the filters check).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from crossdock.queue.snapshot import Allocation, Node, soft_taints

FULL = 1000


@dataclass
class Assignment:
    """What one worker of a job took on one node; enough to undo it."""

    node: int
    cpu_milli: int
    memory_mib: int
    devices: list[tuple[int, int]] = field(default_factory=list)
    """(device column, milli-GPU taken)."""
    slices: list[tuple[str, str]] = field(default_factory=list)
    """(profile, slice id)."""
    group: int | None = None
    service: str | None = None

    def gpu_ids(self, inv: "Inventory") -> tuple[str, ...]:
        if not self.devices and not self.slices:
            return ()
        ids = inv.dev_ids[self.node]
        return tuple([ids[c] for c, _ in self.devices] + [s for _, s in self.slices])


NO_POD_LIMIT = 2**62
"""``pods_alloc`` of a node without a pod limit."""


class Inventory:
    def __init__(self, nodes: Sequence[Node]):
        self.nodes = sorted(nodes, key=lambda n: n.name)
        self.index = {n.name: i for i, n in enumerate(self.nodes)}
        n = len(self.nodes)
        self.n = n
        self.cpu_alloc = np.array([x.cpu_milli for x in self.nodes], np.int64)
        self.mem_alloc = np.array([x.memory_mib for x in self.nodes], np.int64)
        self.cpu_used = np.zeros(n, np.int64)
        self.mem_used = np.zeros(n, np.int64)
        self.pods_alloc = np.array([NO_POD_LIMIT if x.max_pods is None else x.max_pods for x in self.nodes], np.int64)
        self.pods_used = np.zeros(n, np.int64)
        """Workers (allocations) on each node, against ``pods_alloc`` (a Node's ``max_pods``)."""
        self.pod_limited = bool((self.pods_alloc < NO_POD_LIMIT).any())
        self.cpu_free = self.cpu_alloc.copy()
        self.mem_free = self.mem_alloc.copy()
        self.res_used = np.zeros((3, n), np.int64)
        """CPU, memory and GPUs in use (whole or partly), one row each, for the resource scores."""
        self.schedulable = np.array([x.schedulable for x in self.nodes], bool)
        self.tainted = np.array([i for i, x in enumerate(self.nodes) if x.taints], np.int64)
        """Indexes of the nodes with taints (the TaintToleration filter looks only at these)."""
        soft = [soft_taints(x.taints) for x in self.nodes]
        self.soft_tainted = np.array([i for i, s in enumerate(soft) if s], np.int64)
        """Indexes of the nodes with ``PreferNoSchedule`` taints (the TaintToleration score's)."""
        self.pool_names = sorted({x.pool for x in self.nodes})
        pid = {p: i for i, p in enumerate(self.pool_names)}
        self.pool_id = np.array([pid[x.pool] for x in self.nodes], np.int32)
        self.sharing = np.array([x.gpu_sharing for x in self.nodes], bool)
        whole = [[g for g in x.gpus if not g.mig] for x in self.nodes]
        width = max((len(w) for w in whole), default=0) or 1
        self.dev_ids = [[g.id for g in w] for w in whole]
        self.dev_col = [{g.id: c for c, g in enumerate(w)} for w in whole]
        self.dev_exists = np.zeros((n, width), bool)
        self.dev_free = np.zeros((n, width), np.int64)
        self.dev_island = np.full((n, width), -1, np.int64)
        for i, w in enumerate(whole):
            self.dev_exists[i, :len(w)] = True
            self.dev_free[i, :len(w)] = FULL
            self.dev_island[i, :len(w)] = [g.island if g.island is not None else -1 for g in w]
        self.model = [(w[0].model.lower() if w else (x.gpus[0].model.lower() if x.gpus else "")) for w, x in
                      zip(whole, self.nodes)]
        self.model_names = sorted(set(self.model))
        self.model_id = np.array([self.model_names.index(m) for m in self.model], np.int64)
        self.gpu_total = self.dev_exists.sum(axis=1).astype(np.int64)
        self.res_alloc = np.stack([self.cpu_alloc, self.mem_alloc, self.gpu_total])
        self.island_cap = np.zeros(n, np.int64)
        for i in range(n):
            isl = self.dev_island[i][self.dev_exists[i]]
            if len(isl) and (isl >= 0).any():
                self.island_cap[i] = np.bincount(isl[isl >= 0]).max()
        self.gpu_free = self.gpu_total.copy()
        self.island_free = np.where(self.island_cap > 0, self.island_cap, self.gpu_total)
        self.share_top = np.where(self.gpu_total > 0, FULL, 0).astype(np.int64)
        self.slice_free: list[dict[str, list[str]]] = [{} for _ in range(n)]
        self.slice_home: dict[str, tuple[int, str]] = {}
        for i, x in enumerate(self.nodes):
            for g in x.gpus:
                for k, profile in enumerate(g.mig):
                    sid = slice_id(g.id, profile, k)
                    self.slice_free[i].setdefault(profile, []).append(sid)
                    self.slice_home[sid] = (i, profile)
        profiles = sorted({p for s in self.slice_free for p in s})
        self.mig_free = {p: np.array([len(s.get(p, ())) for s in self.slice_free], np.int64) for p in profiles}
        self.group_nodes: dict[int, set[int]] = {}
        """Anti-affinity group -> nodes running one of its workers."""
        self.service_nodes: dict[str, dict[int, int]] = {}
        """Inference service -> node -> its replicas there (the ServiceSpread plugin)."""
        shapes: dict[tuple, int] = {}
        self.shape_id = np.array([shapes.setdefault((x.cpu_milli, x.memory_mib, self.model[i], tuple(self.dev_island[i]),
                                                     int(self.gpu_total[i]), (x.pool, soft[i]) if soft[i] else ()),
                                                    len(shapes))
                                  for i, x in enumerate(self.nodes)], np.int64)
        self.sig = self.shape_id.copy()
        """Equal for nodes in the same state (same shape, same use): scores are computed once per value."""
        self.dev_island_of = [[int(k) for k in self.dev_island[i, :len(w)]] for i, w in enumerate(whole)]
        self.listeners: list = []
        """Callables ``f(node_index)`` run after a node changed (per-node caches of score plugins)."""
        self.changes: list[int] = []
        """Every node index :meth:`refresh` was called for, in order (outside simulations): a per-node
        cache remembers how far it has read and re-derives only the nodes listed after that."""
        self.quiet = False
        """Set while simulating (release, check, restore): per-node caches and ``version`` stay as they are,
        since the node ends exactly as it was."""
        self.version = 0
        """Bumped whenever capacity is given back (rollback, simulation); caches keyed on it."""

    def _use(self, i: int, cpu: int, mem: int, pods: int) -> None:
        self.pods_used[i] += pods
        self.cpu_used[i] += cpu
        self.mem_used[i] += mem
        self.cpu_free[i] -= cpu
        self.mem_free[i] -= mem
        self.res_used[0, i] += cpu
        self.res_used[1, i] += mem

    def refresh(self, i: int) -> None:
        """Recompute node ``i``'s GPU summaries from its device row."""
        total = int(self.gpu_total[i])
        free = self.dev_free[i, :total].tolist()  # devices fill a row's first columns; a short row is quicker in Python
        idle = free.count(FULL)
        self.gpu_free[i] = idle
        self.res_used[2, i] = total - idle
        if self.island_cap[i] > 0:
            per: dict[int, int] = {}
            for f, k in zip(free, self.dev_island_of[i]):
                if f == FULL and k >= 0:
                    per[k] = per.get(k, 0) + 1
            self.island_free[i] = max(per.values()) if per else 0
        else:
            self.island_free[i] = idle
        self.share_top[i] = max(free) if free else 0
        for p, arr in self.mig_free.items():
            arr[i] = len(self.slice_free[i].get(p, ()))
        if self.quiet:
            return
        used = self.cpu_used[i] or self.mem_used[i] or self.pods_used[i] or idle < total
        self.sig[i] = self._state_sig(i) if used else self.shape_id[i]
        self.changes.append(i)
        for listener in self.listeners:
            listener(i)

    def refresh_all(self) -> None:
        """:meth:`refresh` for every node at once (after loading a snapshot's allocations)."""
        ex = self.dev_exists
        idle = ex & (self.dev_free == FULL)
        self.gpu_free[:] = idle.sum(axis=1)
        self.res_used[2] = self.gpu_total - self.gpu_free
        islands = int(self.dev_island.max(initial=-1)) + 1
        per_island = np.stack([(idle & (self.dev_island == k)).sum(axis=1) for k in range(islands)]
                              or [np.zeros(self.n, np.int64)])
        self.island_free[:] = np.where(self.island_cap > 0, per_island.max(axis=0), self.gpu_free)
        self.share_top[:] = np.where(ex, self.dev_free, -1).max(axis=1, initial=-1).clip(min=0)
        for p, arr in self.mig_free.items():
            arr[:] = [len(s.get(p, ())) for s in self.slice_free]
        for i in np.flatnonzero((self.cpu_used != 0) | (self.mem_used != 0) | (self.pods_used != 0)
                                | (ex & (self.dev_free != FULL)).any(axis=1)):
            self.sig[i] = self._state_sig(i)
        self.changes.extend(range(self.n))

    def _state_sig(self, i: int) -> int:
        """``sig`` of node ``i`` in use: a hash of ints only, which Python does not salt per process
        (it salts bytes and strings), so the order of the states a score call sees is the input's."""
        return hash((int(self.shape_id[i]), int(self.cpu_used[i]), int(self.mem_used[i]), int(self.pods_used[i]),
                     *self.dev_free[i].tolist()))

    # --- snapshot allocations ----------------------------------------------------------------
    def load(self, allocations) -> None:
        """Apply a snapshot's allocations (before any per-node cache listens)."""
        for a in allocations:
            self.apply(a, refresh=False)
        self.refresh_all()

    def apply(self, a: Allocation, refresh: bool = True) -> None:
        i = self.index.get(a.node)
        if i is None:
            return
        self._use(i, a.cpu_milli, a.memory_mib, 1)
        cols = self.dev_col[i]
        for gid in a.gpu_ids:
            if gid in cols:
                self.dev_free[i, cols[gid]] = 0
            elif gid in self.slice_home:
                _, profile = self.slice_home[gid]
                free = self.slice_free[i].get(profile, [])
                if gid in free:
                    free.remove(gid)
        for gid, frac in a.gpu_share.items():
            if gid in cols:
                self.dev_free[i, cols[gid]] -= max(1, round(frac * FULL))
        if a.job_id is not None:
            self.group_nodes.setdefault(a.group if a.group is not None else a.job_id, set()).add(i)
        if a.service is not None:
            self._count_service(a.service, i, 1)
        if refresh:
            self.refresh(i)

    def release(self, a: Allocation) -> None:
        """Give back what ``a`` holds (a preemption victim, simulated)."""
        i = self.index.get(a.node)
        if i is None:
            return
        self._use(i, -a.cpu_milli, -a.memory_mib, -1)
        cols = self.dev_col[i]
        for gid in a.gpu_ids:
            if gid in cols:
                self.dev_free[i, cols[gid]] = FULL
            elif gid in self.slice_home:
                self.slice_free[i].setdefault(self.slice_home[gid][1], []).append(gid)
                self.slice_free[i][self.slice_home[gid][1]].sort()
        for gid, frac in a.gpu_share.items():
            if gid in cols:
                self.dev_free[i, cols[gid]] += max(1, round(frac * FULL))
        if a.service is not None:
            self._count_service(a.service, i, -1)
        self.version += not self.quiet
        self.refresh(i)

    # --- saving and restoring one node (simulations) -----------------------------------------
    def save(self, i: int) -> tuple:
        return (int(self.cpu_used[i]), int(self.mem_used[i]), int(self.pods_used[i]), self.dev_free[i].copy(),
                {p: list(s) for p, s in self.slice_free[i].items()})

    def restore(self, i: int, saved: tuple) -> None:
        self.cpu_used[i], self.mem_used[i], self.pods_used[i], row, slices = saved
        self.cpu_free[i] = self.cpu_alloc[i] - self.cpu_used[i]
        self.mem_free[i] = self.mem_alloc[i] - self.mem_used[i]
        self.res_used[0, i], self.res_used[1, i] = self.cpu_used[i], self.mem_used[i]
        self.dev_free[i] = row
        self.slice_free[i] = {p: list(s) for p, s in slices.items()}
        self.version += not self.quiet
        self.refresh(i)

    # --- taking capacity ---------------------------------------------------------------------
    def take(self, i: int, cpu: int, mem: int, devices: list[tuple[int, int]], slices: list[tuple[str, str]],
             group: int | None, service: str | None = None) -> Assignment:
        self._use(i, cpu, mem, 1)
        for c, amount in devices:
            if self.dev_free[i, c] < amount:
                raise AssertionError(f"device {self.dev_ids[i][c]} over-committed")
            self.dev_free[i, c] -= amount
        for profile, sid in slices:
            self.slice_free[i][profile].remove(sid)
        if group is not None:
            self.group_nodes.setdefault(group, set()).add(i)
        if service is not None:
            self._count_service(service, i, 1)
        self.refresh(i)
        return Assignment(i, cpu, mem, devices, slices, group, service)

    def undo(self, a: Assignment) -> None:
        i = a.node
        self._use(i, -a.cpu_milli, -a.memory_mib, -1)
        for c, amount in a.devices:
            self.dev_free[i, c] += amount
        for profile, sid in a.slices:
            self.slice_free[i][profile].append(sid)
            self.slice_free[i][profile].sort()
        if a.group is not None:
            self.group_nodes.get(a.group, set()).discard(i)
        if a.service is not None:
            self._count_service(a.service, i, -1)
        self.version += not self.quiet
        self.refresh(i)

    def _count_service(self, service: str, i: int, change: int) -> None:
        counts = self.service_nodes.setdefault(service, {})
        left = counts.get(i, 0) + change
        if left > 0:
            counts[i] = left
        else:
            counts.pop(i, None)


def slice_id(device_id: str, profile: str, k: int) -> str:
    """The id of the ``k``-th MIG slice of a device, e.g. ``node1-gpu0/mig-1g.10gb-3``."""
    return f"{device_id}/mig-{profile}-{k}"
