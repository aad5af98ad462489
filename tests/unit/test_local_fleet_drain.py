"""The local fleet's scale-in, with Celery's remote control scripted: a replica is stopped only
once it answers that it holds no task — one that took a task between the idle check and the
consumer's cancel drains first — and one that does not answer is never chosen."""

from __future__ import annotations

import signal
from types import SimpleNamespace

import pytest

from crossdock.queue.config import Fleet
from crossdock.workers import fleet as fleet_module
from crossdock.workers.fleet import LocalFleet, Replica

FLEET = Fleet(backend="local", name="prep")


class Proc:
    def __init__(self, pid):
        self.pid, self.returncode = pid, None

    def poll(self):
        return self.returncode


class Control:
    """Answers ``inspect`` from ``tasks`` (node → active task count; absent: no answer)."""

    def __init__(self):
        self.tasks: dict[str, int] = {}
        self.cancelled: list[str] = []

    def inspect(self, destination=None, timeout=None, limit=None):
        names = [n for n in destination if n in self.tasks]
        return SimpleNamespace(active=lambda: {n: [{}] * self.tasks[n] for n in names},
                               reserved=lambda: {n: [] for n in names})

    def cancel_consumer(self, queue, destination, reply, timeout):
        self.cancelled += destination


@pytest.fixture
def local(monkeypatch):
    control = Control()
    # the config in force: queue prep on the local pool, whose backend queue every replica consumes
    config = SimpleNamespace(queues={"prep": SimpleNamespace(pools=["local"])},
                             pools={"local": SimpleNamespace(backend="local")})
    f = LocalFleet(rt=SimpleNamespace(config=config), app=SimpleNamespace(control=control))
    f.fleets["prep"] = [Replica(f"r{i}@h", Proc(100 + i), "crossdock.local") for i in range(3)]
    killed: list[tuple[int, int]] = []
    monkeypatch.setattr(fleet_module.os, "kill", lambda pid, sig: killed.append((pid, sig)))
    return f, control, killed


def test_the_newest_idle_replicas_are_drained_then_stopped(local):
    f, control, killed = local
    control.tasks = {"r0@h": 0, "r1@h": 0, "r2@h": 0}
    assert f.scale_fleet(FLEET, 1) == 1
    assert control.cancelled == ["r2@h", "r1@h"]
    assert sorted(killed) == [(101, signal.SIGTERM), (102, signal.SIGTERM)]


def test_a_replica_that_took_a_task_meanwhile_drains_before_it_stops(local):
    f, control, killed = local
    control.tasks = {"r0@h": 1, "r1@h": 0, "r2@h": 0}

    def cancel(queue, destination, reply, timeout):  # r2 got a task just before its consumer went
        control.cancelled += destination
        if destination == ["r2@h"]:
            control.tasks["r2@h"] = 1

    control.cancel_consumer = cancel
    assert f.scale_fleet(FLEET, 1) == 1  # r0 is busy: r1 and r2 go, r2 once its task is done
    assert killed == [(101, signal.SIGTERM)]
    f.check()
    assert killed == [(101, signal.SIGTERM)]
    control.tasks["r2@h"] = 0
    f.check()
    assert killed == [(101, signal.SIGTERM), (102, signal.SIGTERM)]
    f.check()  # signalled once
    assert len(killed) == 2


def test_busy_or_silent_replicas_are_never_chosen(local):
    f, control, killed = local
    control.tasks = {"r0@h": 2, "r1@h": 0}  # r2 does not answer
    assert f.scale_fleet(FLEET, 0, busy={"r1@h"}) == 3
    assert control.cancelled == [] and killed == []


def test_replicas_that_exit_are_forgotten_and_drained_ones_no_longer_count(local):
    f, control, killed = local
    control.tasks = {"r0@h": 0, "r1@h": 1, "r2@h": 1}
    assert f.scale_fleet(FLEET, 2) == 2
    assert killed == [(100, signal.SIGTERM)]  # r0 is stopping: listed until it exits
    f.fleets["prep"][0].proc.returncode = 0
    f.fleets["prep"][1].proc.returncode = -9  # r1 crashed
    assert f.fleet_replicas(FLEET) == 1
    f.check()
    assert [r.nodename for r in f.fleets["prep"]] == ["r2@h"]
