"""In-memory fleets and node pools for tests: the fake backend's ``ScalesFleet`` and ``ProvisionsNodes``.

- A fleet's replicas are names ``<fleet>-<n>``; :attr:`FakeFleets.busy` holds those a test says
  run a task (besides the ``busy`` the caller passes). A scale-in stops idle replicas only,
  newest first, and answers the count it reached.
- A provisioned pool's nodes are made from its ``node_template``, named ``<pool>-<n>``; they are
  ``starting`` for ``node_start_seconds`` on the backend's clock, then ready and in the inventory.
  :attr:`FakeNodes.removed` lists every node removed, in order.
"""

from __future__ import annotations

import itertools
import threading
from types import MappingProxyType
from typing import Any, Callable, Collection, Sequence

from crossdock.queue.config import ClusterConfig
from crossdock.queue.ports import NodeGroup
from crossdock.queue.snapshot import GpuDevice, Node


class FakeFleets:
    def __init__(self) -> None:
        self.replicas: dict[str, list[str]] = {}
        """Fleet name → its replicas, oldest first."""
        self.busy: set[str] = set()
        self.scaled: list[tuple[str, int, int]] = []
        """Every scale_fleet call: (fleet, asked, reached)."""
        self._seq = itertools.count(1)
        self._fleet_lock = threading.Lock()

    def fleet_replicas(self, fleet: Any) -> int:
        with self._fleet_lock:
            return len(self.replicas.get(fleet.name, ()))

    def scale_fleet(self, fleet: Any, replicas: int, busy: Collection[str] = frozenset()) -> int:
        with self._fleet_lock:
            names = self.replicas.setdefault(fleet.name, [])
            while len(names) < replicas:
                names.append(f"{fleet.name}-{next(self._seq)}")
            for name in reversed(list(names)):
                if len(names) <= replicas:
                    break
                if name not in self.busy and name not in busy:
                    names.remove(name)
            self.scaled.append((fleet.name, replicas, len(names)))
            return len(names)


class FakeNodes:
    def __init__(self, config: ClusterConfig | None, clock: Callable[[], float], kind: str = "fake",
                 node_start_seconds: float = 0.0) -> None:
        self.nodes_config, self.nodes_clock, self.nodes_kind = config, clock, kind
        self.node_start_seconds = node_start_seconds
        self.provisioned: dict[str, dict[str, float]] = {}
        """Pool → its added nodes → when each is ready (on the clock)."""
        self.removed: list[str] = []
        self._node_seq = itertools.count(1)
        self._nodes_lock = threading.Lock()

    def node_group(self, pool: str) -> NodeGroup:
        now = self.nodes_clock()
        with self._nodes_lock:
            nodes = self.provisioned.get(pool, {})
            return NodeGroup(pool, ready=tuple(n for n, at in nodes.items() if at <= now),
                             starting=tuple(n for n, at in nodes.items() if at > now))

    def add_nodes(self, pool: str, count: int) -> list[str]:
        self._template(pool)  # a pool without a template adds nothing: refuse loudly
        with self._nodes_lock:
            names = [f"{pool}-{next(self._node_seq)}" for _ in range(count)]
            ready_at = self.nodes_clock() + self.node_start_seconds
            self.provisioned.setdefault(pool, {}).update(dict.fromkeys(names, ready_at))
            return names

    def remove_nodes(self, pool: str, names: Sequence[str]) -> list[str]:
        with self._nodes_lock:
            nodes = self.provisioned.get(pool, {})
            gone = [n for n in names if nodes.pop(n, None) is not None]
            self.removed += gone
            return gone

    def provisioned_nodes(self) -> tuple[Node, ...]:
        """The ready added nodes, as the inventory lists them."""
        out = []
        for pool, group in ((p, self.node_group(p)) for p in list(self.provisioned)):
            t = self._template(pool)
            model = t.gpu_model or self.nodes_config.pools[pool].gpu.model or "GPU"
            for name in group.ready:
                gpus = tuple(GpuDevice(f"{name}:{k}", k, model) for k in range(t.gpus))
                out.append(Node(name, pool, self.nodes_kind, t.cpus * 1000, t.memory_mib, gpus,
                                MappingProxyType(dict(t.labels))))
        return tuple(out)

    def _template(self, pool: str):
        cfg = self.nodes_config.pools.get(pool) if self.nodes_config is not None else None
        if cfg is None or cfg.node_template is None:
            raise ValueError(f"pools.{pool}.node_template: the fake provisioner adds nodes from it; set one")
        return cfg.node_template
