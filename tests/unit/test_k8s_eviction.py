"""The pure parts of Kubernetes eviction (``crossdock/backends/kubernetes/eviction.py``) and of the
upstream descheduler's policy (``crossdock/dev/k8s/descheduler.py``)."""

from __future__ import annotations

import json

import pytest
from kubernetes.client.rest import ApiException

from crossdock.backends.kubernetes import eviction
from crossdock.dev.k8s import descheduler
from crossdock.queue.ports import Eviction

pytestmark = pytest.mark.descheduler

PDB_429 = {"kind": "Status", "status": "Failure", "reason": "TooManyRequests", "code": 429,
           "message": "Cannot evict pod as it would violate the pod's disruption budget.",
           "details": {"causes": [{"reason": "DisruptionBudget",
                                   "message": "The disruption budget pair needs 1 healthy pods and has 1 currently"}]}}
APF_429 = {"kind": "Status", "status": "Failure", "reason": "TooManyRequests", "code": 429,
           "message": "Too many requests, please try again later.", "details": {"retryAfterSeconds": 1}}


def api_exception(status: int, body: dict | None) -> ApiException:
    exc = ApiException(status=status, reason="x")
    exc.body = json.dumps(body) if body is not None else None
    return exc


@pytest.mark.parametrize("status, body, refusal", [
    (429, PDB_429, "The disruption budget pair needs 1 healthy pods and has 1 currently"),
    (429, APF_429, None),  # throttling, not a budget: an outage to retry, not a refusal
    (500, PDB_429 | {"code": 500}, None),
    (429, None, None),
], ids=["pdb", "priority-and-fairness", "not-429", "no-body"])
def test_only_a_budget_cause_is_a_refusal(status, body, refusal):
    assert eviction.budget_refusal(api_exception(status, body)) == refusal


class FakeCore:
    """Answers each pod's eviction from a table: 201, or an ApiException."""

    def __init__(self, answers: dict[str, ApiException | None]) -> None:
        self.answers, self.sent = answers, []

    def create_namespaced_pod_eviction(self, pod, namespace, body, _preload_content):
        self.sent.append((pod, body["deleteOptions"]["gracePeriodSeconds"]))
        if (exc := self.answers[pod]) is not None:
            raise exc

        class Resp:
            data = b"{}"

            def release_conn(self):
                pass

        return Resp()


def errors(exc, what):
    return RuntimeError(f"{what}: {exc.status}")


@pytest.mark.parametrize("answers, outcome, sent", [
    ({"a": None}, Eviction.EVICTED, ["a"]),
    ({"a": api_exception(429, PDB_429), "b": None}, Eviction.REFUSED_BY_BUDGET, ["a"]),
    ({"a": None, "b": api_exception(429, PDB_429)}, Eviction.EVICTED, ["a", "b"]),  # a gang broken anyway
    ({"a": api_exception(404, {}), "b": None}, Eviction.EVICTED, ["a", "b"]),
    ({"a": api_exception(404, {})}, Eviction.GONE, ["a"]),
], ids=["evicted", "refused-first", "refused-after-one", "one-gone", "all-gone"])
def test_evict_pods_outcomes(answers, outcome, sent):
    core = FakeCore(answers)
    got, _why = eviction.evict_pods(core, "ns", list(answers), 3, errors)
    assert got is outcome
    assert core.sent == [(p, 3) for p in sent]


def test_other_errors_raise_the_backends_error():
    core = FakeCore({"a": api_exception(429, APF_429)})
    with pytest.raises(RuntimeError, match="evicting pod ns/a: 429"):
        eviction.evict_pods(core, "ns", ["a"], 0, errors)


@pytest.mark.parametrize("selector, query", [
    (None, None),
    ({}, ""),
    ({"matchLabels": {"b": "2", "a": "1"}}, "a=1,b=2"),
    ({"matchExpressions": [{"key": "k", "operator": "In", "values": ["x", "y"]},
                           {"key": "n", "operator": "NotIn", "values": ["z"]},
                           {"key": "e", "operator": "Exists"}, {"key": "d", "operator": "DoesNotExist"}]},
     "k in (x,y),n notin (z),e,!d"),
], ids=["null-selects-nothing", "empty-selects-all", "labels", "expressions"])
def test_selector_string(selector, query):
    assert eviction.selector_string(selector) == query


def test_a_processed_pdb_carries_its_disruptions_allowed():
    pdb = {"metadata": {"name": "p", "namespace": "ns", "generation": 2},
           "spec": {"minAvailable": 1}, "status": {"observedGeneration": 2, "disruptionsAllowed": 1}}
    b = eviction.budget_of(pdb, frozenset({7, 8}))
    assert (b.name, b.jobs, b.min_available, b.max_unavailable, b.disruptions_allowed) == (
        "pdb/ns/p", frozenset({7, 8}), 1, None, 1)
    stale = {**pdb, "status": {"observedGeneration": 1, "disruptionsAllowed": 5}}
    assert eviction.budget_of(stale, frozenset()).disruptions_allowed is None  # computed by the plan instead
    assert eviction.budget_of({**pdb, "spec": {"maxUnavailable": "50%"}}, frozenset()).max_unavailable == "50%"
    assert eviction.budget_of({**pdb, "spec": {}}, frozenset()) is None


def test_upstream_policy_is_high_node_utilization_on_gpus():
    policy = descheduler.high_node_utilization({"nvidia.com/gpu": 80}, pod_labels={"app": "fill"},
                                               node_selector="crossdock.io/pool=p", priority_threshold=1000,
                                               max_total=6)
    (profile,) = policy["profiles"]
    args = {c["name"]: c["args"] for c in profile["pluginConfig"]}
    assert policy["apiVersion"] == "descheduler/v1alpha2" and policy["nodeSelector"] == "crossdock.io/pool=p"
    assert policy["maxNoOfPodsToEvictTotal"] == 6
    assert profile["plugins"] == {"balance": {"enabled": ["HighNodeUtilization"]}}
    assert args["HighNodeUtilization"] == {"thresholds": {"nvidia.com/gpu": 80},
                                           "evictionModes": ["OnlyThresholdingResources"]}
    assert args["DefaultEvictor"] == {"nodeFit": True, "priorityThreshold": {"value": 1000},
                                      "labelSelector": {"matchLabels": {"app": "fill"}}}
