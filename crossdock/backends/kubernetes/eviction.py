"""Evicting crossdock's pods through the Eviction API (``policy/v1``), and PodDisruptionBudgets as
crossdock's disruption budgets.

An eviction is ``POST /api/v1/namespaces/{ns}/pods/{pod}/eviction``: the API server checks every
PodDisruptionBudget that selects the pod and either deletes the pod (with the grace period given,
the pod's ``DisruptionTarget`` condition saying ``EvictionByEvictionAPI``) or answers 429
TooManyRequests with a ``DisruptionBudget`` cause. That 429 is the budget's answer for now, not an
overload: it becomes :attr:`Eviction.REFUSED_BY_BUDGET` and nothing is retried here (the
descheduler tries again in a later cycle). A 429 without that cause (API priority and fairness
throttling) is a retryable outage like any other.

A PodDisruptionBudget becomes a :class:`DisruptionBudget` naming the crossdock jobs whose pods its
selector matches (resolved by the API server: the selector is sent as a label selector), with its
``maxUnavailable``/``minAvailable`` and, once the disruption controller has processed its current
generation, its ``status.disruptionsAllowed``.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from kubernetes import client
from kubernetes.client.rest import ApiException

from crossdock.backends.kubernetes import manifests as m
from crossdock.backends.kubernetes.informer import body
from crossdock.queue.deschedule.budgets import DisruptionBudget
from crossdock.queue.ports import Eviction

log = logging.getLogger(__name__)

BUDGET_CAUSE = "DisruptionBudget"
"""The ``details.causes[].reason`` of the API server's 429 for an eviction a budget refuses."""


def eviction_body(pod: str, namespace: str, grace_seconds: int) -> dict[str, Any]:
    return {"apiVersion": "policy/v1", "kind": "Eviction",
            "metadata": {"name": pod, "namespace": namespace},
            "deleteOptions": {"gracePeriodSeconds": max(0, int(grace_seconds))}}


def budget_refusal(exc: ApiException) -> str | None:
    """The budget's message when ``exc`` is a PodDisruptionBudget refusing an eviction; else None."""
    if exc.status != 429:
        return None
    try:
        status = json.loads(exc.body or "{}")
    except ValueError:
        return None
    causes = (status.get("details") or {}).get("causes") or []
    for cause in causes:
        if cause.get("reason") == BUDGET_CAUSE:
            return str(cause.get("message") or status.get("message") or "refused by a disruption budget")
    return None


def evict_pods(core: client.CoreV1Api, namespace: str, pods: Sequence[str], grace_seconds: int,
               error: Callable[[BaseException, str], Exception]) -> tuple[Eviction, str]:
    """Evict ``pods`` (one job's attempt) in order; (outcome, why).

    A budget's refusal of the first pod leaves the job untouched: REFUSED_BY_BUDGET. A refusal
    after some pod of it went still ends the attempt (its Job has ``backoffLimit: 0``): EVICTED.
    Pods already gone are skipped; none left: GONE. Other errors raise ``error(exc, what)``."""
    evicted = 0
    for pod in pods:
        try:
            body(core.create_namespaced_pod_eviction(pod, namespace, eviction_body(pod, namespace, grace_seconds),
                                                     _preload_content=False))
            evicted += 1
        except ApiException as exc:
            if exc.status == 404:
                continue
            refusal = budget_refusal(exc)
            if refusal is None:
                raise error(exc, f"evicting pod {namespace}/{pod}") from exc
            if evicted == 0:
                return Eviction.REFUSED_BY_BUDGET, refusal
            log.warning("pod %s/%s: %s; the attempt ends anyway (%d of its pods evicted)",
                        namespace, pod, refusal, evicted)
            return Eviction.EVICTED, refusal
        except Exception as exc:  # noqa: BLE001 - connection errors
            raise error(exc, f"evicting pod {namespace}/{pod}") from exc
    if evicted == 0:
        return Eviction.GONE, "no pod of the attempt is left"
    return Eviction.EVICTED, f"{evicted} pod(s) evicted"


def selector_string(selector: Mapping[str, Any] | None) -> str | None:
    """A ``metav1.LabelSelector`` as the API's ``labelSelector`` query; None: it selects nothing
    (a PDB with a null selector selects no pod; an empty one selects every pod)."""
    if selector is None:
        return None
    parts = [f"{k}={v}" for k, v in sorted((selector.get("matchLabels") or {}).items())]
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr["key"], expr["operator"], ",".join(expr.get("values") or [])
        parts.append({"In": f"{key} in ({values})", "NotIn": f"{key} notin ({values})",
                      "Exists": key, "DoesNotExist": f"!{key}"}[op])
    return ",".join(parts)


def _amount(value: Any) -> int | str | None:
    if value is None or isinstance(value, int):
        return value
    text = str(value)
    return int(text) if text.isdigit() else text


def budget_of(pdb: Mapping[str, Any], job_ids: frozenset[int]) -> DisruptionBudget | None:
    """The budget of one PodDisruptionBudget covering ``job_ids``; None when it sets neither bound."""
    meta, spec, status = pdb.get("metadata") or {}, pdb.get("spec") or {}, pdb.get("status") or {}
    max_unavailable, min_available = _amount(spec.get("maxUnavailable")), _amount(spec.get("minAvailable"))
    if (max_unavailable is None) == (min_available is None):
        return None
    processed = status.get("observedGeneration") == meta.get("generation") and "disruptionsAllowed" in status
    return DisruptionBudget(name=f"pdb/{meta.get('namespace', '')}/{meta.get('name', '')}", jobs=job_ids,
                            max_unavailable=max_unavailable, min_available=min_available,
                            disruptions_allowed=int(status["disruptionsAllowed"]) if processed else None)


def job_ids_of(pods: Sequence[Mapping[str, Any]]) -> frozenset[int]:
    out = set()
    for pod in pods:
        labels = (pod.get("metadata") or {}).get("labels") or {}
        if labels.get(m.LABEL_MANAGED_BY) != m.MANAGED_BY:
            continue
        try:
            out.add(int(labels[m.LABEL_JOB_ID]))
        except (KeyError, ValueError):
            continue
    return frozenset(out)
