"""The service model: spec validation names the field and the fix, states move by their table,
and a batch job's spec is untouched by the ``service`` field."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from crossdock.queue.models import JobSpec, ServiceReplica, validation_message
from crossdock.queue.services import (IllegalServiceTransition, ServiceMetrics, ServiceSpec, ServiceState,
                                      service_transition)

pytestmark = pytest.mark.services


def message(**kw) -> str:
    with pytest.raises(ValidationError) as exc:
        ServiceSpec(**kw)
    return validation_message(exc.value)


@pytest.mark.parametrize(("kw", "expected"), [
    ({"name": "Chat", "command": ["s"]}, "name: 'Chat' is not a service name"),
    ({"name": "chat"}, "command, image: give a command"),
    ({"name": "chat", "command": []}, "command: empty"),
    ({"name": "chat", "command": ["s"], "ready_path": "healthz"}, "ready_path: 'healthz' must start with '/'"),
    ({"name": "chat", "command": ["s"], "min_replicas": 3, "max_replicas": 2}, "min_replicas, max_replicas: 3 is above 2"),
    ({"name": "chat", "command": ["s"], "pools": ["l4", "l4"]}, "pools: ['l4', 'l4'] names a pool twice"),
    ({"name": "chat", "command": ["s"], "target_qps": 0}, "target_qps: invalid value 0"),
    ({"name": "chat", "command": ["s"], "port": 70000}, "port: invalid value 70000"),
    ({"name": "chat", "command": ["s"], "gpu_type": "L4"}, "gpu_type: 'L4' given with gpus 0"),
    ({"name": "chat", "command": ["s"], "replicas": 3}, "replicas: invalid value 3; Extra inputs are not permitted"),
], ids=["name", "nothing-to-run", "empty-command", "ready-path", "min-max", "pools-twice", "target", "port",
        "gpu-type", "unknown-field"])
def test_a_bad_spec_is_one_line_naming_the_field(kw, expected):
    msg = message(**kw)
    assert msg.startswith(expected) and "\n" not in msg


def test_same_workload_ignores_scaling_fields_only():
    base = ServiceSpec(name="chat", command=["s"])
    assert base.same_workload(base.model_copy(update={"max_replicas": 9, "target_qps": 5, "user": "bo"}))
    assert not base.same_workload(base.model_copy(update={"cpus": 2}))
    assert not base.same_workload(base.model_copy(update={"env": {"MODEL": "b"}}))


def test_batch_specs_are_stored_as_before():
    assert JobSpec(command=["true"]).model_dump(exclude_defaults=True) == {"command": ["true"]}
    replica = JobSpec(command=["s"], service=ServiceReplica(name="chat", replica=2, generation=3))
    again = JobSpec.model_validate_json(replica.model_dump_json(exclude_defaults=True))
    assert again.service == ServiceReplica(name="chat", replica=2, generation=3)


@pytest.mark.parametrize(("old", "new", "ok"), [
    (ServiceState.DEPLOYING, ServiceState.AVAILABLE, True),
    (ServiceState.AVAILABLE, ServiceState.DEGRADED, True),
    (ServiceState.UPDATING, ServiceState.AVAILABLE, True),
    (ServiceState.AVAILABLE, ServiceState.AVAILABLE, True),
    (ServiceState.DELETING, ServiceState.DELETED, True),
    (ServiceState.DELETING, ServiceState.AVAILABLE, False),
    (ServiceState.DELETED, ServiceState.DEPLOYING, False),
    (ServiceState.AVAILABLE, ServiceState.DEPLOYING, False),
])
def test_service_transitions(old, new, ok):
    if ok:
        assert service_transition("chat", old, new) is new
    else:
        with pytest.raises(IllegalServiceTransition, match=f"cannot go from {old} to {new}"):
            service_transition("chat", old, new)


def test_metrics_round_trip():
    m = ServiceMetrics(qps=3.5, p95_seconds=None, replica_qps={1: 3.5}, in_flight={1: 0}, window_seconds=5, at=2.0)
    assert ServiceMetrics.from_dict(m.to_dict()) == m


def _config(services: dict):
    from crossdock.queue.config import parse_config

    return parse_config({
        "priority_classes": {"inference": {"value": 1000}},
        "pools": {"l4": {"backend": "k8s"}, "cpu": {"backend": "k8s"}, "hpc": {"backend": "slurm", "partition": "cpu"}},
        "queues": {"inference": {"priority_class": "inference", "pools": ["l4", "cpu"], "cpu_request_ratio": 0.5}},
        "services": services})


def test_a_services_block_declares_services_and_names_bad_fields():
    from crossdock.queue.errors import ConfigError

    cfg = _config({"interval_seconds": 1, "deploy": {"chat": {"command": ["s"], "max_replicas": 4, "pools": ["l4"]}}})
    (spec,) = cfg.services.declared()
    assert (spec.name, spec.max_replicas, spec.pools, cfg.services.interval_seconds) == ("chat", 4, ["l4"], 1)
    assert _config({}).services.deploy == {} and _config({}).services.metrics.source == "router"
    for services, needle in [
        ({"deploy": {"chat": {"command": ["s"], "pools": ["hpc"]}}},
         "services.deploy.chat.pools: 'hpc' is not one of queue 'inference''s pools (l4, cpu)"),
        ({"deploy": {"chat": {"command": ["s"], "queue": "batch"}}}, "services.deploy.chat.queue: unknown queue 'batch'"),
        ({"deploy": {"chat": {"command": ["s"], "cpus": 0}}}, "services.deploy.chat.cpus: Input should be greater"),
        ({"deploy": {"Chat": {"command": ["s"]}}}, "services.deploy.Chat: name: 'Chat' is not a service name"),
        ({"metrics": {"source": "prometheus"}}, "a prometheus source needs the server's URL"),
        ({"interval_seconds": 0}, "services.interval_seconds: must be ≥ 0.1"),
    ]:
        with pytest.raises(ConfigError) as exc:
            _config(services)
        assert any(needle in e for e in exc.value.errors), exc.value.errors


@pytest.mark.parametrize(("cpus", "ratio", "used", "warned", "fix"), [
    (1, 1.0, 2.5, True, 2), (2, 1.0, 2.5, False, None), (4, 0.5, 2.6, True, 5), (1, 1.0, None, False, None),
    (1, 1.0, 1.25, False, None),
], ids=["below", "enough", "ratio", "unmeasured", "at-0.8"])
def test_throttling_warning_compares_the_request_with_0_8_of_measured_use(cpus, ratio, used, warned, fix):
    from crossdock.queue.services.replicas import throttling_warning

    found = throttling_warning(ServiceSpec(name="chat", command=["s"], cpus=cpus), ratio, used)
    assert (found is not None) == warned
    if warned:
        assert f"raise cpus to at least {fix}" in found and "below 0.8" in found
