"""Kubernetes node pools that crossdock grows and shrinks (``ProvisionsNodes``).

A pool with ``provisioner: kwok`` or ``provisioner: karpenter`` and a ``node_template`` gets
its nodes from one of two providers; the core decides how many and which, the providers only
carry it out:

* ``kwok`` (:class:`KwokNodes`): crossdock creates and deletes the Node objects itself, shaped
  by the template, for kwok to play the kubelet (the local plane, users' own simulations).
* ``karpenter`` (:class:`crossdock.backends.kubernetes.karpenter.KarpenterNodes`): crossdock
  creates and deletes Karpenter NodeClaims of the pool's NodePool; Karpenter launches,
  registers, drains and terminates the nodes.

Every node crossdock asks for carries ``crossdock.io/provisioner`` and ``crossdock.io/node-pool``
(besides the pool's ``selector``, which puts it in the pool's inventory), and
:meth:`remove_nodes` only ever touches nodes with both; it also refuses a node that still runs a
crossdock pod that is not terminating (the caller drains first). A node being removed is
cordoned before it goes.

A node is *ready* when its ``Ready`` condition is True and no system taint (``node.kubernetes.io/…``,
``karpenter.sh/…``) is left on it, *stopping* once removal began (the
``crossdock.io/removing`` annotation or a deletionTimestamp), *starting* otherwise. ``add_nodes``
never takes a pool past ``max_nodes``: ready and starting nodes count.

How a cluster running cluster-autoscaler would be driven instead: ``docs/node-pools.md``.
"""

from __future__ import annotations

import json
import logging
import re
import secrets
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from kubernetes import client
from kubernetes.client.rest import ApiException

from crossdock.backends.kubernetes import manifests as m
from crossdock.backends.kubernetes import nodes
from crossdock.backends.kubernetes.informer import list_all
from crossdock.queue.config import ClusterConfig, NodeTemplate, Pool
from crossdock.queue.errors import ConfigError
from crossdock.queue.ports import BackendUnavailable, NodeGroup, ProvisionsNodes

log = logging.getLogger(__name__)

LABEL_PROVISIONER = "crossdock.io/provisioner"
"""On nodes (and NodeClaims) crossdock asked for: which provider made them."""
LABEL_NODE_POOL = "crossdock.io/node-pool"
"""On nodes (and NodeClaims) crossdock asked for: the pool they were made for."""
ANNOTATION_REMOVING = "crossdock.io/removing"
"""Set (epoch seconds) when crossdock cordons a node to remove it."""
DEFAULT_MAX_PODS = 110
PROVISIONERS = ("kwok", "karpenter")

_TAINT = re.compile(r"^(?P<key>[^=:\s]+)(=(?P<value>[^:\s]*))?:(?P<effect>NoSchedule|PreferNoSchedule|NoExecute)$")


def dns_name(text: str) -> str:
    """``text`` as a DNS label: lower case, ``[a-z0-9-]``, at most 40 characters (room for a suffix)."""
    out = re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")[:40].strip("-")
    return out or "pool"


def label_value(text: str) -> str:
    out = re.sub(r"[^A-Za-z0-9_.-]+", "-", text)[:63].strip("-_.")
    return out or "pool"


def new_name(pool: str) -> str:
    """A fresh node name for ``pool``: ``<pool>-<6 hex digits>``."""
    return f"{dns_name(pool)}-{secrets.token_hex(3)}"


def template_of(config: ClusterConfig, pool_name: str, provisioner: str) -> tuple[Pool, NodeTemplate]:
    pool = config.pools.get(pool_name)
    if pool is None:
        raise ConfigError([f"pools.{pool_name}: no such pool; known: {', '.join(config.pools) or 'none'}"])
    if pool.provisioner != provisioner:
        raise ConfigError([f"pools.{pool_name}.provisioner: {pool.provisioner!r}, not {provisioner!r};"
                           f" set provisioner: {provisioner} to let crossdock add its nodes"])
    if pool.node_template is None:
        raise ConfigError([f"pools.{pool_name}.node_template: missing; a pool with provisioner {provisioner}"
                           " needs one, e.g. node_template: {cpus: 16, memory_mib: 65536}"])
    return pool, pool.node_template


def taints(template: NodeTemplate, pool_name: str) -> list[dict[str, str]]:
    """``key=value:Effect`` / ``key:Effect`` → Node taints."""
    out = []
    for i, text in enumerate(template.taints):
        match = _TAINT.match(text.strip())
        if not match:
            raise ConfigError([f"pools.{pool_name}.node_template.taints[{i}]: {text!r} is not a taint;"
                               " write key=value:Effect or key:Effect (NoSchedule, PreferNoSchedule, NoExecute)"])
        taint = {"key": match["key"], "effect": match["effect"]}
        if match["value"]:
            taint["value"] = match["value"]
        out.append(taint)
    return out


def resources(template: NodeTemplate) -> dict[str, str]:
    """The capacity (and allocatable) of a node of ``template``."""
    out = {"cpu": str(template.cpus), "memory": f"{template.memory_mib}Mi",
           "pods": str(template.max_pods or DEFAULT_MAX_PODS)}
    if template.gpus:
        out[m.GPU_RESOURCE] = str(template.gpus)
    return out


def node_labels(pool_name: str, pool: Pool, template: NodeTemplate, provisioner: str) -> dict[str, str]:
    """Labels every node of the pool carries: the template's, the pool's selector (so that the
    inventory puts the node in the pool), GPU feature-discovery labels, crossdock's own."""
    labels = {"kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64", **template.labels, **pool.selector}
    if template.gpus:
        labels["nvidia.com/gpu.present"] = "true"
        labels["nvidia.com/gpu.count"] = str(template.gpus)
        model = template.gpu_model or pool.gpu.model
        if model:
            labels[m.LABEL_GPU_PRODUCT] = model
    labels[LABEL_PROVISIONER] = provisioner
    labels[LABEL_NODE_POOL] = label_value(pool_name)
    return labels


def selector(pool_name: str, provisioner: str) -> str:
    return f"{LABEL_PROVISIONER}={provisioner},{LABEL_NODE_POOL}={label_value(pool_name)}"


def kwok_node(pool_name: str, pool: Pool, template: NodeTemplate, name: str) -> dict[str, Any]:
    """The Node object of one kwok node of ``pool``."""
    labels = {**node_labels(pool_name, pool, template, "kwok"), m.LABEL_HOSTNAME: name, "type": "kwok"}
    res = resources(template)
    spec_taints = taints(template, pool_name)
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": labels,
                     "annotations": {"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"}},
        "spec": {"taints": spec_taints} if spec_taints else {},
        "status": {"capacity": dict(res), "allocatable": dict(res)},
    }


def _meta(obj: Mapping[str, Any]) -> dict[str, Any]:
    return dict(obj.get("metadata") or {})


SYSTEM_TAINTS = ("node.kubernetes.io/", "karpenter.sh/")
"""Taint prefixes of a node that is not up yet or is going (not-ready, unreachable, unregistered,
disrupted): such a node takes no work, whatever its Ready condition says."""


def is_ready(node: Mapping[str, Any]) -> bool:
    """Ready condition True and no system taint: the node takes work now."""
    if any(str(t.get("key", "")).startswith(SYSTEM_TAINTS) for t in (node.get("spec") or {}).get("taints") or []):
        return False
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (node.get("status") or {}).get("conditions") or [])


def is_stopping(obj: Mapping[str, Any]) -> bool:
    meta = _meta(obj)
    return bool(meta.get("deletionTimestamp")) or ANNOTATION_REMOVING in (meta.get("annotations") or {})


def owned(obj: Mapping[str, Any], pool_name: str, provisioner: str) -> bool:
    labels = _meta(obj).get("labels") or {}
    return labels.get(LABEL_PROVISIONER) == provisioner and labels.get(LABEL_NODE_POOL) == label_value(pool_name)


def room(pool: Pool, group: NodeGroup, count: int) -> int:
    """How many of ``count`` more nodes fit under ``max_nodes`` (ready and starting count)."""
    if pool.max_nodes is None:
        return max(count, 0)
    return max(0, min(count, pool.max_nodes - len(group.ready) - len(group.starting)))


@contextmanager
def removing(name: str, pool: str) -> Iterator[None]:
    """Around removing one node: a 404 (gone already) is success, any other error one
    :func:`api_error` naming the node and its pool."""
    try:
        yield
    except ApiException as exc:
        if exc.status != 404:
            raise api_error(exc, f"removing node {name} of pool {pool}", pool) from exc
    except Exception as exc:  # noqa: BLE001
        raise api_error(exc, f"removing node {name} of pool {pool}", pool) from exc


def api_error(exc: BaseException, what: str, pool_name: str) -> Exception:
    """Retryable for an unreachable or overloaded API; not for a refused object or missing rights."""
    if isinstance(exc, ApiException):
        try:
            reason = json.loads(exc.body or "{}").get("message") or exc.reason
        except ValueError:
            reason = exc.body or exc.reason
        msg = f"{what}: {exc.status} {reason}"
        if exc.status in (400, 422):
            return BackendUnavailable(f"{msg} (check pools.{pool_name}.node_template)", retryable=False)
        if exc.status in (401, 403):
            return BackendUnavailable(f"{msg} (check the kubeconfig's credentials and RBAC)", retryable=False)
        return BackendUnavailable(msg, retryable=True)
    return BackendUnavailable(f"{what}: Kubernetes API unreachable: {exc}", retryable=True)


class Removal:
    """What removing a node takes on any provider: the ownership and busy checks, the cordon."""

    def __init__(self, core: client.CoreV1Api) -> None:
        self.core = core

    def busy(self, node: str) -> list[str]:
        """crossdock pods on ``node`` that still run and are not terminating."""
        pods, _ = list_all(self.core.list_pod_for_all_namespaces,
                           field_selector=f"spec.nodeName={node},status.phase!=Succeeded,status.phase!=Failed")
        return [f"{_meta(p).get('namespace')}/{_meta(p).get('name')}" for p in pods
                if nodes.is_crossdock_pod(p) and not _meta(p).get("deletionTimestamp")]

    def cordon(self, node: str) -> None:
        self.core.patch_node(node, {"spec": {"unschedulable": True},
                                    "metadata": {"annotations": {ANNOTATION_REMOVING: str(int(time.time()))}}})

    def removable(self, node: Mapping[str, Any] | None, name: str, pool_name: str, provisioner: str) -> bool:
        """Whether crossdock may remove ``node`` (None: it has none yet) now; logs why not."""
        if node is None:
            return True
        if not owned(node, pool_name, provisioner):
            log.warning("not removing node %s: crossdock's %s provisioner did not create it for pool %s",
                        name, provisioner, pool_name)
            return False
        running = self.busy(name)
        if running:
            log.warning("not removing node %s of pool %s: crossdock pods still run there: %s",
                        name, pool_name, ", ".join(running[:5]))
            return False
        return True


class KwokNodes:
    """Nodes of ``provisioner: kwok`` pools: Node objects crossdock creates for kwok to run."""

    provisioner = "kwok"

    def __init__(self, config: ClusterConfig, core: client.CoreV1Api) -> None:
        self.config = config
        self.core = core
        self.removal = Removal(core)

    def _nodes(self, pool_name: str) -> list[dict[str, Any]]:
        try:
            found, _ = list_all(self.core.list_node, label_selector=selector(pool_name, self.provisioner))
        except Exception as exc:  # noqa: BLE001 - mapped to crossdock's errors
            raise api_error(exc, f"listing the nodes of pool {pool_name}", pool_name) from exc
        return found

    def node_group(self, pool: str) -> NodeGroup:
        template_of(self.config, pool, self.provisioner)
        return group_of(pool, self._nodes(pool))

    def add_nodes(self, pool: str, count: int) -> list[str]:
        spec, template = template_of(self.config, pool, self.provisioner)
        wanted = room(spec, self.node_group(pool), count)
        created: list[str] = []
        try:
            while len(created) < wanted:
                name = new_name(pool)
                try:
                    self.core.create_node(kwok_node(pool, spec, template, name))
                except ApiException as exc:
                    if exc.status == 409:  # the random name is taken: draw another
                        continue
                    raise
                created.append(name)
        except Exception as exc:  # noqa: BLE001
            if created:
                log.info("pool %s: added %d of %d kwok nodes before an error", pool, len(created), wanted)
            raise api_error(exc, f"creating a node of pool {pool}", pool) from exc
        if created:
            log.info("pool %s: added kwok nodes %s", pool, ", ".join(created))
        return created

    def remove_nodes(self, pool: str, names: Sequence[str]) -> list[str]:
        template_of(self.config, pool, self.provisioner)
        removed: list[str] = []
        for name in dict.fromkeys(names):
            with removing(name, pool):
                node = read_node(self.core, name)
                if not self.removal.removable(node, name, pool, self.provisioner):
                    continue
                if node is not None:
                    self.removal.cordon(name)
                    self.core.delete_node(name)
            removed.append(name)
        if removed:
            log.info("pool %s: removed kwok nodes %s", pool, ", ".join(removed))
        return removed


def read_node(core: client.CoreV1Api, name: str) -> dict[str, Any] | None:
    try:
        resp = core.read_node(name, _preload_content=False)
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise
    try:
        return json.loads(resp.data)
    finally:
        resp.release_conn()


def group_of(pool: str, found: Iterable[Mapping[str, Any]]) -> NodeGroup:
    """A pool's NodeGroup from its Node objects."""
    ready, starting, stopping = [], [], []
    for node in found:
        name = _meta(node)["name"]
        (stopping if is_stopping(node) else ready if is_ready(node) else starting).append(name)
    return NodeGroup(pool=pool, ready=tuple(sorted(ready)), starting=tuple(sorted(starting)),
                     stopping=tuple(sorted(stopping)))


class Provisioners:
    """The provider of each autoscaled pool, by its ``provisioner``; what the backend delegates to."""

    def __init__(self, config: ClusterConfig, api_client: client.ApiClient, *,
                 karpenter_node_class: str | None = None) -> None:
        self.config = config
        self.api_client = api_client
        self.karpenter_node_class = karpenter_node_class
        self._providers: dict[str, ProvisionsNodes] = {}

    def of(self, pool: str) -> ProvisionsNodes:
        spec = self.config.pools.get(pool)
        if spec is None:
            raise ConfigError([f"pools.{pool}: no such pool; known: {', '.join(self.config.pools) or 'none'}"])
        kind = spec.provisioner
        if kind not in PROVISIONERS:
            raise ConfigError([f"pools.{pool}.provisioner: {kind!r}; Kubernetes pools offer"
                               f" {', '.join(PROVISIONERS)} (None: the pool is static)"])
        if kind not in self._providers:
            core = client.CoreV1Api(self.api_client)
            if kind == "kwok":
                self._providers[kind] = KwokNodes(self.config, core)
            else:
                from crossdock.backends.kubernetes.karpenter import KarpenterNodes, node_class_ref

                self._providers[kind] = KarpenterNodes(self.config, core, client.CustomObjectsApi(self.api_client),
                                                       node_class=node_class_ref(self.karpenter_node_class))
        return self._providers[kind]
