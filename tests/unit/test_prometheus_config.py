"""A ``services.metrics`` block for the Prometheus source: each wrong field named, with its fix."""

from __future__ import annotations

import pytest

from crossdock.backends.prometheus import from_config
from crossdock.queue.errors import ConfigError


@pytest.mark.parametrize(("block", "names"), [
    ({"url": "127.0.0.1:9090", "qps_query": "up"}, ["services.metrics.url"]),
    ({"url": "http://127.0.0.1:9090", "qps_query": " "}, ["services.metrics.qps_query"]),
    ({"url": "http://p:9090", "qps_query": "up", "window_seconds": 0}, ["services.metrics.window_seconds"]),
    ({"qps_query": ""}, ["services.metrics.url", "services.metrics.qps_query"]),
], ids=["no-scheme", "no-query", "zero-window", "both"])
def test_a_bad_prometheus_block_names_each_field(block, names):
    with pytest.raises(ConfigError) as err:
        from_config({"source": "prometheus", **block})
    assert [e.split(":", 1)[0] for e in err.value.errors] == names


def test_the_config_block_builds_the_source():
    from crossdock.queue.config import parse_config

    cfg = parse_config({
        "priority_classes": {"inference": {"value": 1000}},
        "pools": {"cpu": {"backend": "k8s", "selector": {"pool": "cpu"}}},
        "queues": {"inference": {"priority_class": "inference", "pools": ["cpu"]}},
        "services": {"metrics": {"source": "prometheus", "url": "http://127.0.0.1:9090/",
                                 "qps_query": 'sum(rate(r{service="{service}"}[10s]))', "window_seconds": 10,
                                 "cpu_query": 'sum by (replica) (c{service="{service}"})'}},
    })
    source = from_config(cfg.services.metrics)
    assert (source.url, source.window_seconds, source.p95) == ("http://127.0.0.1:9090", 10, None)
    assert source.cpu == 'sum by (replica) (c{service="{service}"})'
