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
