"""At most one run per attempt on Kubernetes: each pod starts behind a gate crossdock lifts once.

The Job controller can start a Job's program twice, even with ``parallelism: 1`` and
``backoffLimit: 0`` (Kubernetes' Job documentation says so): when the answer to a pod create is
lost (the API server restarted under it), its cache can miss that pod, so it creates another, and
kube-scheduler binds both before the controller deletes the excess. (A chaos run saw one job's
attempt run as two pods after two API server restarts.)

So every pod of a crossdock Job is created behind the scheduling gate ``crossdock.io/once``
(kube-scheduler leaves a gated pod alone), and the backend lifts it only from a pod that is the
only one that holds its slot: of its Job, or of its completion index in an Indexed Job. A
duplicate stays gated, never binds, and the Job controller deletes it as excess (a deleted excess
pod does not count as a failure). A pod holds its slot while it lives, and after its deletion if
it was ever bound (it ran); an unbound pod being deleted never runs and holds nothing. The pods'
watch delivers events in resourceVersion order, so a view that holds a duplicate holds the first
pod too; a slot with two holders waits for the controller to delete one.

Gangs keep their own gate (``gangs.py``), lifted under the same rule: one pod per index.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

GATE = "crossdock.io/once"
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"

RELEASE = [{"op": "test", "path": "/spec/schedulingGates", "value": [{"name": GATE}]},
           {"op": "remove", "path": "/spec/schedulingGates"}]
"""The JSON patch that lifts the gate, refused (422) unless it is the pod's only gate."""


def gated(pod: Mapping[str, Any]) -> bool:
    return any(g.get("name") == GATE for g in (pod.get("spec") or {}).get("schedulingGates") or [])


def slot(pod: Mapping[str, Any]) -> tuple[str, str] | None:
    """(Job name, completion index): what one run of the Job is; None for a pod of no Job."""
    meta = pod.get("metadata") or {}
    job = (meta.get("labels") or {}).get("job-name")
    if not job:
        return None
    return job, (meta.get("annotations") or {}).get(COMPLETION_INDEX, "")


def _bound(pod: Mapping[str, Any]) -> bool:
    return bool((pod.get("spec") or {}).get("nodeName"))


def holders(live: Iterable[Mapping[str, Any]], gone: Iterable[Mapping[str, Any]] = ()) -> list[Mapping[str, Any]]:
    """The pods that hold their slot: every live pod but an unbound one being deleted (it never
    ran and never will: the Job controller's excess), and every deleted pod that was bound (it ran)."""
    return ([p for p in live if _bound(p) or not (p.get("metadata") or {}).get("deletionTimestamp")]
            + [p for p in gone if _bound(p)])


def crowded(live: Iterable[Mapping[str, Any]], gone: Iterable[Mapping[str, Any]] = ()) -> set[tuple[str, str]]:
    """Slots that more than one pod holds."""
    seen: set[tuple[str, str]] = set()
    twice: set[tuple[str, str]] = set()
    for pod in holders(live, gone):
        key = slot(pod)
        if key is not None:
            (twice if key in seen else seen).add(key)
    return twice


def releasable(live: Iterable[Mapping[str, Any]], gone: Iterable[Mapping[str, Any]] = ()) -> list[Mapping[str, Any]]:
    """The gated live pods that hold their slot alone (``gone``: deleted pods still in view)."""
    live = list(live)
    twice = crowded(live, gone)
    return [p for p in live if gated(p) and slot(p) is not None and slot(p) not in twice
            and not (p.get("metadata") or {}).get("deletionTimestamp")]
