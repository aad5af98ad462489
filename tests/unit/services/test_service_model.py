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
