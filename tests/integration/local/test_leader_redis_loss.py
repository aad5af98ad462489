"""The leader loop survives losing Redis: it backs off while Redis is away and schedules again
once it is back (a dedicated Redis, stopped and started again on the same socket)."""

from __future__ import annotations

import time

import pytest

from crossdock import service
from crossdock.backends.redis_store import embedded
from crossdock.queue.models import JobSpec
from crossdock.queue.states import JobState
from crossdock.runtime import Runtime
from crossdock.workers.loops import BACKING_OFF, RUNNING
from tests.conftest import Cluster
from tests.waiting import eventually

pytestmark = [pytest.mark.redis, pytest.mark.celery]


@pytest.fixture
def own_redis(tmp_path, crossdock_env, monkeypatch):
    """A Redis of this test's own, which it may stop and start again."""
    state = tmp_path / "own-redis"
    url = embedded.ensure_running(state)
    monkeypatch.setenv("CROSSDOCK_REDIS_URL", url)
    yield state
    embedded.stop(state, timeout=5)


def test_the_leader_loop_survives_losing_redis_and_schedules_afterwards(own_redis, tmp_path):
    rt = Runtime.from_env()
    cluster = Cluster(rt, tmp_path)
    try:
        first, = service.submit(rt, [JobSpec(command=["true"], workdir=str(tmp_path))])
        assert cluster.wait(first.id).state is JobState.COMPLETED
        loop = cluster.scheduler.parts["loop"]

        assert embedded.stop(own_redis, timeout=10) is not None
        eventually("the loop to back off", lambda: loop.state == BACKING_OFF and loop.failures >= 2)
        assert cluster.thread.is_alive()
        assert "ConnectionError" in loop.last_error

        embedded.ensure_running(own_redis)  # the same socket, the same append-only file
        back = time.monotonic()
        second, = service.submit(rt, [JobSpec(command=["sh", "-c", "exit 0"], workdir=str(tmp_path))])
        done = cluster.wait(second.id, timeout=90)
        print(f"a job submitted once Redis was back completed {time.monotonic() - back:.2f}s later")
        assert done.state is JobState.COMPLETED and done.exit_code == 0
        assert loop.state == RUNNING and cluster.thread.is_alive()
        assert rt.store.get(first.id).state is JobState.COMPLETED  # kept across the restart
    finally:
        cluster.close()
