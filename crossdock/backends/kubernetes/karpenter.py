"""Pools whose nodes Karpenter makes (``provisioner: karpenter``).

crossdock asks Karpenter for nodes with what Karpenter itself supports for capacity asked for
outside its pod-driven provisioning: **NodeClaims**. Per pool, crossdock keeps

* a NodePool ``crossdock-<pool>`` (the template's labels, taints and instance type) that Karpenter
  never grows or shrinks on its own: ``limits: {cpu: "0"}`` stops its provisioning for pending
  pods, ``disruption`` (``consolidationPolicy: WhenEmpty``, ``consolidateAfter: Never``,
  ``budgets: [{nodes: "0"}]``) stops consolidation and drift replacement, ``expireAfter: Never``
  stops expiry. The core is the only one deciding how many nodes the pool has;
* a node class, by default a KWOKNodeClass ``crossdock-<pool>`` (Karpenter's kwok cloud
  provider); another cloud's class can be named instead (``CROSSDOCK_KARPENTER_NODE_CLASS`` =
  ``group/Kind/name``, e.g. ``karpenter.k8s.aws/EC2NodeClass/default``, which crossdock uses as is);
* one NodeClaim ``<pool>-<hex>`` per node, owned by the NodePool, created by ``add_nodes`` and
  deleted by ``remove_nodes``. Karpenter launches the instance, registers the Node (removing its
  ``karpenter.sh/unregistered`` taint), and on deletion drains and terminates it.

The instance type is ``node_template.labels["node.kubernetes.io/instance-type"]`` when set (a
real cloud's), else ``instance_type_name(template)``; the kwok provider reads its instance types
from a file, and :func:`instance_type` writes the entry for a template so that a node's
allocatable equals the template exactly (the provider subtracts a 100m CPU / 10 MiB overhead).

Names: a NodeGroup lists a node by its Node name once the NodeClaim has one, by the NodeClaim's
name before; ``remove_nodes`` takes either.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from kubernetes import client
from kubernetes.client.rest import ApiException

from crossdock.backends.kubernetes.informer import list_all
from crossdock.backends.kubernetes.provisioning import (LABEL_NODE_POOL, Removal, api_error, dns_name, is_ready,
                                                        is_stopping, label_value, new_name, node_labels,
                                                        read_node, removing, resources, room, selector, taints,
                                                        template_of)
from crossdock.queue.config import ClusterConfig, NodeTemplate, Pool
from crossdock.queue.ports import BackendUnavailable, NodeGroup

log = logging.getLogger(__name__)

GROUP, VERSION = "karpenter.sh", "v1"
KWOK_GROUP, KWOK_VERSION, KWOK_CLASSES = "karpenter.kwok.sh", "v1alpha1", "kwoknodeclasses"
LABEL_NODEPOOL = "karpenter.sh/nodepool"
LABEL_INSTANCE_TYPE = "node.kubernetes.io/instance-type"
LABEL_HOSTNAME = "kubernetes.io/hostname"
HASH_ANNOTATIONS = ("karpenter.sh/nodepool-hash", "karpenter.sh/nodepool-hash-version")
KWOK_OVERHEAD_MILLICPU, KWOK_OVERHEAD_MIB = 100, 10
"""The kube-reserved overhead Karpenter's kwok provider takes from each instance type."""
ZONE = "local-a"


def node_class_ref(text: str | None) -> dict[str, str] | None:
    """``group/Kind/name`` (``CROSSDOCK_KARPENTER_NODE_CLASS``) → a nodeClassRef; None: crossdock's
    own KWOKNodeClass per pool."""
    if not text:
        return None
    parts = text.split("/")
    if len(parts) != 3 or not all(parts):
        raise BackendUnavailable(f"CROSSDOCK_KARPENTER_NODE_CLASS={text!r}: write group/Kind/name,"
                                 " e.g. karpenter.k8s.aws/EC2NodeClass/default", retryable=False)
    return dict(zip(("group", "kind", "name"), parts))


def nodepool_name(pool: str) -> str:
    return f"crossdock-{dns_name(pool)}"


def instance_type_name(template: NodeTemplate) -> str:
    """The instance type of a template's nodes: its ``node.kubernetes.io/instance-type`` label, else
    ``crossdock-<cpus>c-<memory>mi[-<gpus>g[-<model>]]``."""
    if LABEL_INSTANCE_TYPE in template.labels:
        return template.labels[LABEL_INSTANCE_TYPE]
    name = f"crossdock-{template.cpus}c-{template.memory_mib}mi"
    if template.gpus:
        name += f"-{template.gpus}g" + (f"-{dns_name(template.gpu_model)}" if template.gpu_model else "")
    return name


def instance_type(template: NodeTemplate) -> dict[str, Any]:
    """The kwok provider's instance-types file entry for ``template`` (``INSTANCE_TYPES_FILE_PATH``)."""
    res = resources(template)
    res["cpu"] = f"{template.cpus * 1000 + KWOK_OVERHEAD_MILLICPU}m"
    res["memory"] = f"{template.memory_mib + KWOK_OVERHEAD_MIB}Mi"
    return {
        "name": instance_type_name(template),
        "offerings": [{"Price": float(template.cpus + 10 * template.gpus), "Available": True, "Requirements": [
            {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
            {"key": "topology.kubernetes.io/zone", "operator": "In", "values": [ZONE]},
        ]}],
        "architecture": "amd64", "operatingSystems": ["linux"], "resources": res,
    }


def _labels(pool_name: str, pool: Pool, template: NodeTemplate) -> dict[str, str]:
    labels = node_labels(pool_name, pool, template, "karpenter")
    labels.pop(LABEL_INSTANCE_TYPE, None)  # a requirement, not a label, for Karpenter
    return labels


def _requirements(template: NodeTemplate) -> list[dict[str, Any]]:
    return [{"key": LABEL_INSTANCE_TYPE, "operator": "In", "values": [instance_type_name(template)]},
            {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}]


def node_pool(pool_name: str, pool: Pool, template: NodeTemplate, node_class: Mapping[str, str]) -> dict[str, Any]:
    """The NodePool of ``pool``: a template Karpenter launches from, never scaled by Karpenter itself."""
    spec_taints = taints(template, pool_name)
    return {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "NodePool",
        "metadata": {"name": nodepool_name(pool_name),
                     "labels": {LABEL_NODE_POOL: label_value(pool_name), "app.kubernetes.io/managed-by": "crossdock"}},
        "spec": {
            "template": {
                "metadata": {"labels": _labels(pool_name, pool, template)},
                "spec": {"nodeClassRef": dict(node_class), "requirements": _requirements(template),
                         "expireAfter": "Never", **({"taints": spec_taints} if spec_taints else {})},
            },
            "disruption": {"consolidationPolicy": "WhenEmpty", "consolidateAfter": "Never",
                           "budgets": [{"nodes": "0"}]},
            "limits": {"cpu": "0"},
        },
    }


def node_claim(pool_name: str, pool: Pool, template: NodeTemplate, name: str,
               nodepool: Mapping[str, Any]) -> dict[str, Any]:
    """One node of ``pool`` asked of Karpenter, owned by the pool's NodePool."""
    np_meta = nodepool["metadata"]
    np_spec = nodepool["spec"]["template"]["spec"]
    annotations = {k: v for k, v in (np_meta.get("annotations") or {}).items() if k in HASH_ANNOTATIONS}
    return {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "NodeClaim",
        "metadata": {
            "name": name,
            "labels": {**_labels(pool_name, pool, template), LABEL_NODEPOOL: np_meta["name"]},
            "annotations": annotations,
            "ownerReferences": [{"apiVersion": f"{GROUP}/{VERSION}", "kind": "NodePool", "name": np_meta["name"],
                                 "uid": np_meta["uid"], "blockOwnerDeletion": True}],
        },
        "spec": {"nodeClassRef": dict(np_spec["nodeClassRef"]), "requirements": _requirements(template),
                 "resources": {"requests": resources(template)}, "expireAfter": "Never",
                 **({"taints": np_spec["taints"]} if np_spec.get("taints") else {})},
    }


def _claim_ready(claim: Mapping[str, Any]) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (claim.get("status") or {}).get("conditions") or [])


class KarpenterNodes:
    """Nodes of ``provisioner: karpenter`` pools, as NodeClaims of a NodePool crossdock keeps."""

    provisioner = "karpenter"

    def __init__(self, config: ClusterConfig, core: client.CoreV1Api, custom: client.CustomObjectsApi, *,
                 node_class: Mapping[str, str] | None = None) -> None:
        self.config = config
        self.core = core
        self.custom = custom
        self.node_class = dict(node_class) if node_class else None
        self.removal = Removal(core)

    # --- the pool's NodePool and node class ----------------------------------------------------
    def _class_ref(self, pool: str) -> dict[str, str]:
        return self.node_class or {"group": KWOK_GROUP, "kind": "KWOKNodeClass", "name": nodepool_name(pool)}

    def _create_or_patch(self, plural: str, body: dict[str, Any], group: str, version: str) -> dict[str, Any]:
        name = body["metadata"]["name"]
        try:
            return self.custom.create_cluster_custom_object(group, version, plural, body)
        except ApiException as exc:
            if exc.status != 409:
                raise
        return self.custom.patch_cluster_custom_object(group, version, plural, name,
                                                       {"metadata": {"labels": body["metadata"].get("labels", {})},
                                                        "spec": body.get("spec", {})})

    def ensure(self, pool: str) -> dict[str, Any]:
        """Create or update the pool's node class and NodePool; return the NodePool."""
        spec, template = template_of(self.config, pool, self.provisioner)
        try:
            if self.node_class is None:
                self._create_or_patch(KWOK_CLASSES, {"apiVersion": f"{KWOK_GROUP}/{KWOK_VERSION}",
                                                     "kind": "KWOKNodeClass",
                                                     "metadata": {"name": nodepool_name(pool)}, "spec": {}},
                                      KWOK_GROUP, KWOK_VERSION)
            return self._create_or_patch("nodepools", node_pool(pool, spec, template, self._class_ref(pool)),
                                         GROUP, VERSION)
        except ApiException as exc:
            if exc.status == 404:
                raise BackendUnavailable(
                    f"pool {pool}: Karpenter's API ({GROUP}/{VERSION} NodePool, NodeClaim) is not installed on this"
                    " cluster; install Karpenter and its CRDs, or use provisioner: kwok", retryable=False) from exc
            raise api_error(exc, f"creating the NodePool of pool {pool}", pool) from exc
        except Exception as exc:  # noqa: BLE001
            raise api_error(exc, f"creating the NodePool of pool {pool}", pool) from exc

    # --- reading ------------------------------------------------------------------------------
    def _members(self, pool: str) -> list[tuple[str, dict[str, Any] | None, dict[str, Any] | None]]:
        """(name, NodeClaim, Node) of every node of the pool. A Node whose NodeClaim is gone (the
        kwok provider creates the Node after launching; a claim deleted in between leaves it)
        comes with None for the claim, so that it can still be removed."""
        sel = selector(pool, self.provisioner)
        try:
            found, _ = list_all(self.core.list_node, label_selector=sel)  # before the claims: see above
            claims = self.custom.list_cluster_custom_object(GROUP, VERSION, "nodeclaims", label_selector=sel)
        except ApiException as exc:
            if exc.status == 404:
                return []
            raise api_error(exc, f"listing the NodeClaims of pool {pool}", pool) from exc
        except Exception as exc:  # noqa: BLE001
            raise api_error(exc, f"listing the NodeClaims of pool {pool}", pool) from exc
        by_provider = {(n.get("spec") or {}).get("providerID"): n for n in found}
        by_host = {(n["metadata"].get("labels") or {}).get(LABEL_HOSTNAME): n for n in found}
        by_name = {n["metadata"]["name"]: n for n in found}
        out: list[tuple[str, dict[str, Any] | None, dict[str, Any] | None]] = []
        for claim in claims.get("items") or []:
            status = claim.get("status") or {}
            # Registration sets nodeName, launch the providerID; before launch is recorded, the
            # kwok provider's Node is known by its hostname label, the claim's name.
            node = (by_name.get(status.get("nodeName") or "") or by_provider.get(status.get("providerID") or "-")
                    or by_host.get(claim["metadata"]["name"]))
            if node is not None:
                by_name.pop(node["metadata"]["name"], None)
            out.append((node["metadata"]["name"] if node else claim["metadata"]["name"], claim, node))
        out.extend((name, None, node) for name, node in by_name.items())
        return out

    def node_group(self, pool: str) -> NodeGroup:
        template_of(self.config, pool, self.provisioner)
        ready, starting, stopping = [], [], []
        for name, claim, node in self._members(pool):
            if claim is None and node is not None:
                self._delete_orphan(pool, node)
                stopping.append(name)
            elif (claim is not None and is_stopping(claim)) or (node is not None and is_stopping(node)):
                stopping.append(name)
            elif node is not None and claim is not None and is_ready(node) and _claim_ready(claim):
                # Karpenter has initialised it: registered, startup taints gone, resources there.
                ready.append(name)
            else:
                starting.append(name)
        return NodeGroup(pool=pool, ready=tuple(sorted(ready)), starting=tuple(sorted(starting)),
                         stopping=tuple(sorted(stopping)))

    def _delete_orphan(self, pool: str, node: Mapping[str, Any]) -> None:
        """Delete a Node of the pool whose NodeClaim is gone. Karpenter's kwok provider creates the
        Node after it reports the launch, and deletes only the claim on termination: a claim
        deleted before its Node registered leaves the Node behind, which nothing else removes."""
        if node["metadata"].get("deletionTimestamp"):
            return
        name = node["metadata"]["name"]
        try:
            self.core.delete_node(name)
        except ApiException as exc:
            if exc.status != 404:
                raise api_error(exc, f"deleting node {name} of pool {pool}", pool) from exc
        except Exception as exc:  # noqa: BLE001
            raise api_error(exc, f"deleting node {name} of pool {pool}", pool) from exc
        log.info("pool %s: deleted node %s, whose NodeClaim is gone", pool, name)

    # --- acting -------------------------------------------------------------------------------
    def add_nodes(self, pool: str, count: int) -> list[str]:
        spec, template = template_of(self.config, pool, self.provisioner)
        wanted = room(spec, self.node_group(pool), count)
        if wanted <= 0:
            return []
        nodepool = self.ensure(pool)
        created: list[str] = []
        try:
            while len(created) < wanted:
                name = new_name(pool)
                try:
                    self.custom.create_cluster_custom_object(GROUP, VERSION, "nodeclaims",
                                                             node_claim(pool, spec, template, name, nodepool))
                except ApiException as exc:
                    if exc.status == 409:
                        continue
                    raise
                created.append(name)
        except Exception as exc:  # noqa: BLE001
            raise api_error(exc, f"creating a NodeClaim of pool {pool}", pool) from exc
        log.info("pool %s: asked Karpenter for NodeClaims %s", pool, ", ".join(created))
        return created

    def remove_nodes(self, pool: str, names: Sequence[str]) -> list[str]:
        template_of(self.config, pool, self.provisioner)
        index: dict[str, tuple[dict[str, Any] | None, dict[str, Any] | None]] = {}
        for name, claim, node in self._members(pool):
            index[name] = (claim, node)
            if claim is not None:
                index[claim["metadata"]["name"]] = (claim, node)
        removed: list[str] = []
        for name in dict.fromkeys(names):
            with removing(name, pool):
                if name not in index:
                    if read_node(self.core, name) is not None:
                        log.warning("not removing node %s: crossdock did not ask Karpenter for it in pool %s",
                                    name, pool)
                        continue
                    removed.append(name)  # already gone
                    continue
                claim, node = index[name]
                node_name = node["metadata"]["name"] if node else None
                if not self.removal.removable(node, node_name or name, pool, self.provisioner):
                    continue
                if node_name:
                    self.removal.cordon(node_name)
                if claim is not None:
                    self.custom.delete_cluster_custom_object(GROUP, VERSION, "nodeclaims", claim["metadata"]["name"])
                elif node is not None:
                    self._delete_orphan(pool, node)
            removed.append(name)
        if removed:
            log.info("pool %s: removed %s through Karpenter", pool, ", ".join(removed))
        return removed
