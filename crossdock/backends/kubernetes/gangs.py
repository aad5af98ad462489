"""All-or-nothing start of multi-worker jobs on Kubernetes, with scheduling gates.

Kubernetes binds pods one at a time: a 4-worker gang with one worker per node on a pool
with 3 free nodes would start 3 workers that hold their GPUs and wait for the 4th. So a
gang's pods are created gated (``spec.schedulingGates: [crossdock.io/gang]``, which
kube-scheduler leaves alone) and the backend removes the gate from every worker at once,
only when as many distinct nodes as workers can each hold one worker now. Until then the
whole gang waits and holds nothing.

Pure functions over the API's JSON: which nodes match a pod's selectors, affinity and
tolerations, and how much each node has free.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from kubernetes.utils import parse_quantity

GATE = "crossdock.io/gang"


def gated(pod: Mapping[str, Any]) -> bool:
    return any(g.get("name") == GATE for g in (pod.get("spec") or {}).get("schedulingGates") or [])


def requests(pod_spec: Mapping[str, Any]) -> dict[str, int]:
    """What one pod asks for, in thousandths of each resource (plus one ``pods`` slot)."""
    total: dict[str, int] = {"pods": 1000}
    for c in pod_spec.get("containers") or []:
        res = c.get("resources") or {}
        asked = {**(res.get("limits") or {}), **(res.get("requests") or {})}
        for name, q in asked.items():
            total[name] = total.get(name, 0) + int(parse_quantity(q) * 1000)
    return total


def free_by_node(nodes: Iterable[Mapping[str, Any]], pods: Iterable[Mapping[str, Any]]) -> dict[str, dict[str, int]]:
    """Allocatable minus what the bound, unfinished pods ask for, per node (thousandths)."""
    free = {n["metadata"]["name"]: {k: int(parse_quantity(v) * 1000)
                                    for k, v in ((n.get("status") or {}).get("allocatable") or {}).items()}
            for n in nodes}
    for pod in pods:
        spec, status = pod.get("spec") or {}, pod.get("status") or {}
        node = spec.get("nodeName")
        if node not in free or status.get("phase") in ("Succeeded", "Failed"):
            continue
        for name, amount in requests(spec).items():
            free[node][name] = free[node].get(name, 0) - amount
    return free


def _expression(expr: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    key, op, values = expr.get("key", ""), expr.get("operator", "In"), expr.get("values") or []
    if op == "In":
        return labels.get(key) in values
    if op == "NotIn":
        return labels.get(key) not in values
    if op == "Exists":
        return key in labels
    if op == "DoesNotExist":
        return key not in labels
    return False  # Gt/Lt: not used by crossdock's manifests


def tolerated(taint: Mapping[str, Any], tolerations: Sequence[Mapping[str, Any]]) -> bool:
    for t in tolerations:
        if t.get("effect") and t.get("effect") != taint.get("effect"):
            continue
        if t.get("operator", "Equal") == "Exists" and t.get("key") in (None, "", taint.get("key")):
            return True
        if t.get("key") == taint.get("key") and (t.get("value") or "") == (taint.get("value") or ""):
            return True
    return False


def matches(pod_spec: Mapping[str, Any], node: Mapping[str, Any]) -> bool:
    """Could kube-scheduler put this pod on this node, capacity aside?"""
    meta, spec, status = node.get("metadata") or {}, node.get("spec") or {}, node.get("status") or {}
    labels = meta.get("labels") or {}
    if spec.get("unschedulable"):
        return False
    if not any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or []):
        return False
    if any(labels.get(k) != v for k, v in (pod_spec.get("nodeSelector") or {}).items()):
        return False
    required = (((pod_spec.get("affinity") or {}).get("nodeAffinity") or {})
                .get("requiredDuringSchedulingIgnoredDuringExecution") or {})
    terms = required.get("nodeSelectorTerms") or []
    fields = {"metadata.name": meta.get("name")}
    if terms and not any(all(_expression(e, labels) for e in t.get("matchExpressions") or [])
                         and all(_expression(e, fields) for e in t.get("matchFields") or []) for t in terms):
        return False
    tolerations = pod_spec.get("tolerations") or []
    return all(tolerated(t, tolerations) for t in spec.get("taints") or []
               if t.get("effect") in ("NoSchedule", "NoExecute"))


def fitting_nodes(pod_spec: Mapping[str, Any], nodes: Iterable[Mapping[str, Any]],
                  free: Mapping[str, Mapping[str, int]]) -> list[str]:
    """Nodes that match the pod and have room for one more of it now."""
    want = requests(pod_spec)
    return sorted(n["metadata"]["name"] for n in nodes
                  if matches(pod_spec, n)
                  and all(free.get(n["metadata"]["name"], {}).get(k, 0) >= v for k, v in want.items()))
