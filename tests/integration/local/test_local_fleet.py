"""The local fleet with real Celery workers on a real Redis: replicas are worker processes that
answer Celery's remote control; a scale-in stops idle ones only (consumer cancelled, then a warm
shutdown that exits 0), never one known to be busy, and answers the count it reached."""

from __future__ import annotations


import pytest

from crossdock.queue.config import Fleet
from crossdock.workers.app import make_app
from crossdock.workers.fleet import LocalFleet, celery_busy
from tests.waiting import eventually

pytestmark = [pytest.mark.redis, pytest.mark.celery, pytest.mark.autoscale]


@pytest.fixture
def fleet(runtime, tmp_path):
    app = make_app(runtime.redis_url)
    f = LocalFleet(runtime, app, tmp_path / "fleet.log", loglevel="INFO")
    yield f
    f.stop()


def answering(app, names):
    return set(app.control.inspect(destination=list(names), timeout=1.0, limit=len(names)).ping() or {})


def test_replicas_start_answer_and_only_idle_ones_stop(runtime, fleet):
    spec = Fleet(backend="local", name="preprocessing")
    assert fleet.fleet_replicas(spec) == 0
    assert fleet.scale_fleet(spec, 3) == 3
    reps = list(fleet.fleets["preprocessing"])
    names = [r.nodename for r in reps]
    assert all(r.queues == "crossdock.local" for r in reps)  # the queue's pools are local
    eventually("3 replicas answering", lambda: answering(fleet.app, names) == set(names))
    assert celery_busy(fleet.app)() == set()  # nobody runs a task
    # asked for 1 with the newest said to be busy: the two idle ones go, the busy one stays
    keep = reps[-1].nodename
    assert fleet.scale_fleet(spec, 1, busy={keep}) == 1
    stopped = [r for r in reps if r.nodename != keep]
    eventually("the idle replicas exited", lambda: all(r.proc.poll() is not None for r in stopped))
    assert [r.proc.returncode for r in stopped] == [0, 0]  # a warm shutdown, not a kill
    assert reps[-1].proc.poll() is None and not reps[-1].draining
    fleet.check()
    assert [r.nodename for r in fleet.fleets["preprocessing"]] == [keep]
    # a replica that does not answer counts as busy: it is not stopped
    fleet.fleets["preprocessing"][0].nodename = "fleet-nobody@nowhere"
    assert fleet.scale_fleet(spec, 0) == 1
