"""Which services the local router fronts, and the port it asks for (crossdock/workers/routes.py)."""

from __future__ import annotations

import pytest

from crossdock.queue.config import ClusterConfig
from crossdock.queue.serving import ServiceRecord, ServiceSpec, ServiceStatus
from crossdock.workers.routes import address_port, fronted, router_settings

CFG = ClusterConfig.model_validate({
    "priority_classes": {"inference": {"value": 1000, "preemptible": False}},
    "pools": {"box": {"backend": "local", "nodes": [{"name": "n1", "cpus": 4, "memory_mib": 4096}]},
              "l4": {"backend": "fake", "nodes": [{"name": "g1", "cpus": 4, "memory_mib": 4096}]}},
    "queues": {"local-inf": {"priority_class": "inference", "pools": ["box"]},
               "kube-inf": {"priority_class": "inference", "pools": ["l4"]},
               "mixed": {"priority_class": "inference", "pools": ["l4", "box"]}},
    "default_queue": "local-inf",
    "services": {"interval_seconds": 0.5, "router": {"window_seconds": 3, "probe_seconds": 0.2}},
})


def record(**kw) -> ServiceRecord:
    return ServiceRecord(ServiceSpec(name="m", command=["serve"], **kw), 1, ServiceStatus())


@pytest.mark.parametrize("kw, expected", [
    ({}, True),
    ({"queue": "kube-inf"}, False),
    ({"queue": "mixed"}, True),
    ({"queue": "kube-inf", "pools": ["box"]}, True),
    ({"queue": "local-inf", "pools": ["l4"]}, False),
], ids=["default-queue-local", "queue-not-local", "fallback-pool-local", "own-pools-local", "own-pools-not-local"])
def test_fronted_when_a_pool_is_local(kw, expected):
    assert fronted(record(**kw), CFG) is expected


@pytest.mark.parametrize("address, port", [("127.0.0.1:8123", 8123), (None, 0), ("", 0), ("svc.ns", 0)])
def test_a_service_keeps_the_port_of_its_address(address, port):
    assert address_port(address) == port


def test_settings_come_from_config_and_publish_twice_per_pass():
    s = router_settings(CFG)
    assert (s.window_seconds, s.probe_seconds, s.publish_seconds) == (3, 0.2, 0.25)


@pytest.mark.parametrize("environ, port, span", [
    ({}, 9640 + 16, 32),                                   # the config's metrics base, past up's and workers' ports
    ({"CROSSDOCK_METRICS_ADDRESS": "127.0.0.1:9700"}, 9716, 32),
    ({"CROSSDOCK_METRICS_ADDRESS": "0"}, 0, 1),            # exporters off: any free port, as before
], ids=["config-base", "env-base", "metrics-off"])
def test_the_router_metrics_port_searches_from_the_exporters_base(environ, port, span):
    s = router_settings(CFG, environ)
    assert (s.metrics_port, s.metrics_port_span) == (port, span)
