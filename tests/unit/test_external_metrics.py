"""The external metrics API's answers (no server, no cluster): discovery, the backlog of a queue
from the store's counts, selectors, quantities, errors as Kubernetes Status objects."""

from __future__ import annotations

import pytest

from crossdock.backends.kubernetes.external_metrics import (BACKLOG_METRIC, GROUP_VERSION, BadQuery,
                                                            ExternalMetrics, apiservice_manifest, format_quantity,
                                                            parse_selector, service_manifest, store_backlog_source)

LIST = f"/apis/{GROUP_VERSION}/namespaces/ml/{BACKLOG_METRIC}"


def api(counts=None, queues=("prep", "train"), **kw) -> ExternalMetrics:
    counts = {"prep": 42} if counts is None else counts
    return ExternalMetrics(store_backlog_source(lambda: counts, queues), **kw)


def test_discovery_lists_the_backlog_metric():
    code, body = api().answer(f"/apis/{GROUP_VERSION}")
    assert code == 200 and body["groupVersion"] == GROUP_VERSION
    assert [(r["name"], r["namespaced"], r["verbs"]) for r in body["resources"]] == [(BACKLOG_METRIC, True, ["get"])]


def test_a_queues_backlog_is_one_series_with_the_selectors_labels():
    metrics = api()
    code, body = metrics.answer(f"{LIST}?labelSelector=queue%3Dprep")
    assert code == 200 and body["kind"] == "ExternalMetricValueList"
    (item,) = body["items"]
    assert (item["metricName"], item["metricLabels"], item["value"]) == (BACKLOG_METRIC, {"queue": "prep"}, "42")
    assert item["timestamp"].endswith("Z")
    (served,) = metrics.served
    assert (served.namespace, served.metric, dict(served.labels), served.value) == ("ml", BACKLOG_METRIC,
                                                                                    {"queue": "prep"}, 42.0)


def test_a_known_queue_without_jobs_is_zero_and_an_unknown_one_is_not_found():
    metrics = api()
    assert metrics.answer(f"{LIST}?labelSelector=queue=train")[1]["items"][0]["value"] == "0"
    code, body = metrics.answer(f"{LIST}?labelSelector=queue=nope")
    assert (code, body["kind"], body["reason"]) == (404, "Status", "NotFound")
    assert len(metrics.served) == 1


@pytest.mark.parametrize("path,code,reason", [
    (f"{LIST}", 400, "BadRequest"),                                   # no queue named
    (f"{LIST}?labelSelector=queue+in+(a,b)", 400, "BadRequest"),     # set-based
    (f"{LIST}?labelSelector=queue!%3Dprep", 400, "BadRequest"),      # inequality
    (f"/apis/{GROUP_VERSION}/namespaces/ml/other_metric?labelSelector=queue=prep", 404, "NotFound"),
    ("/apis/custom.metrics.k8s.io/v1beta2", 404, "NotFound"),
], ids=["no-queue", "set-based", "inequality", "other-metric", "other-api"])
def test_bad_queries_are_statuses(path, code, reason):
    got_code, body = api().answer(path)
    assert (got_code, body["kind"], body["reason"], body["code"]) == (code, "Status", reason, code)
    assert "\n" not in body["message"]


def test_a_failing_source_is_a_500_not_a_crash():
    def broken(namespace, metric, labels):
        raise ConnectionError("redis is away")

    code, body = ExternalMetrics(broken).answer(f"{LIST}?labelSelector=queue=prep")
    assert code == 500 and "redis is away" in body["message"]


def test_only_the_front_proxy_may_ask_when_names_are_required():
    metrics = api(allowed_names=["front-proxy-client"])
    assert metrics.answer(f"{LIST}?labelSelector=queue=prep", {"someone"})[0] == 403
    assert metrics.answer(f"{LIST}?labelSelector=queue=prep", {"front-proxy-client"})[0] == 200


@pytest.mark.parametrize("text,labels", [("", {}), ("queue=prep", {"queue": "prep"}),
                                         ("queue==prep, team=nlp", {"queue": "prep", "team": "nlp"})])
def test_equality_selectors(text, labels):
    assert parse_selector(text) == labels


def test_unsupported_selectors_name_the_fix():
    with pytest.raises(BadQuery, match="queue=NAME"):
        parse_selector("!queue")


@pytest.mark.parametrize("value,text", [(0, "0"), (25.0, "25"), (2.5, "2500m"), (0.0011, "2m")])
def test_quantities(value, text):
    assert format_quantity(value) == text


def test_registration_routes_through_an_external_name_service_to_localhost():
    svc = service_manifest("crossdock", "metrics", 8443)
    assert svc["spec"] == {"type": "ExternalName", "externalName": "localhost",
                           "ports": [{"name": "https", "port": 8443, "protocol": "TCP"}]}
    spec = apiservice_manifest("crossdock", "metrics", 8443)["spec"]
    assert spec["service"] == {"namespace": "crossdock", "name": "metrics", "port": 8443}
    assert (spec["group"], spec["version"], spec["insecureSkipTLSVerify"]) == ("external.metrics.k8s.io",
                                                                               "v1beta1", True)


def test_the_cli_prints_the_registration_for_kubectl():
    import json

    from typer.testing import CliRunner

    from crossdock.cli.main import app

    result = CliRunner().invoke(app, ["metrics-adapter", "--print-manifests", "--port", "7443", "--namespace", "ml"])
    assert result.exit_code == 0, result.output
    service, apiservice = json.loads(result.output)["items"]
    assert (service["kind"], service["metadata"]["namespace"], service["spec"]["ports"][0]["port"]) == (
        "Service", "ml", 7443)
    assert apiservice["spec"]["service"] == {"namespace": "ml", "name": "crossdock-metrics", "port": 7443}
