"""The live config's records and the leader's switch, on a real Redis (no scheduler loop): a stored
text keeps its version, a leader switches once and records the diff, a later leader takes the
version in force without a second event, a stored config that cannot be read is refused, the faces
follow the version in force."""

from __future__ import annotations

import copy

import pytest
import yaml

from crossdock import runtime as runtime_module
from crossdock.runtime import Runtime
from crossdock.workers.liveconfig import Switch
from tests.conftest import TEST_CONFIG

pytestmark = [pytest.mark.operate, pytest.mark.redis]


def weighted(weight: float) -> str:
    data = copy.deepcopy(TEST_CONFIG)
    data["queues"]["training"]["weight"] = weight
    return yaml.safe_dump(data)


def applied(rt):
    return [e for e in rt.store.live_config.events() if e["event"] == "config_applied"]


def test_same_text_keeps_its_version(runtime):
    live = runtime.store.live_config
    assert live.store(weighted(2), "a.yaml", "root") == (1, True)
    assert live.store(weighted(2), "b.yaml", "root") == (1, False)
    assert live.store(weighted(3), "a.yaml", "root") == (2, True)


def test_leader_switches_once_and_a_later_leader_takes_it_silently(runtime, crossdock_env):
    runtime.switched_by_leader = True
    assert runtime.config.queues["training"].weight == 1
    runtime.store.live_config.store(weighted(4), "a.yaml", "alice")
    assert Switch(runtime, "leader-1")() is True
    assert runtime.config.queues["training"].weight == 4 and runtime.config_version == 1
    [event] = applied(runtime)
    assert (event["diff"], event["by"], event["actor"]) == ("queues.training: weight 1 → 4", "alice", "leader-1")
    assert Switch(runtime, "leader-1")() is False  # nothing new

    later = Runtime.from_env()  # a standby that becomes leader: it reads the version in force
    later.switched_by_leader = True
    assert later.config.queues["training"].weight == 4
    assert Switch(later, "leader-2")() is False and len(applied(runtime)) == 1


def test_a_stored_config_the_leader_cannot_read_is_refused(runtime):
    runtime.switched_by_leader = True
    runtime.config
    runtime.store.live_config.store("queues: {}\n", "broken.yaml", "root")
    assert Switch(runtime, "leader-1")() is False
    refused = [e for e in runtime.store.live_config.events() if e["event"] == "config_refused"]
    assert refused and refused[-1]["version"] == "1" and "priority_classes" in refused[-1]["errors"]
    assert runtime.store.live_config.in_force_version() == 0 and runtime.config.queues["training"].weight == 1


def test_faces_follow_the_version_in_force(runtime, crossdock_env, monkeypatch):
    face = Runtime.from_env()
    assert face.config.queues["training"].weight == 1
    runtime.switched_by_leader = True
    runtime.config
    runtime.store.live_config.store(weighted(7), "a.yaml", "root")
    Switch(runtime, "leader-1")()
    monkeypatch.setattr(runtime_module, "CONFIG_REFRESH_SECONDS", 0.0)
    assert face.config.queues["training"].weight == 7 and face.config_version == 1
