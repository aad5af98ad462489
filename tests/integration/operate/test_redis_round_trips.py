"""The store's round-trip hook against a real Redis: a command is one round trip, a pipeline or a
transaction of many commands (Lua scripts included) is one, and a store built without the hook is
a plain redis-py client."""

from __future__ import annotations

import pytest
import redis

from crossdock import service
from crossdock.backends.redis_store.store import JobStore
from crossdock.backends.redis_store.timing import TimedRedis
from crossdock.backends.redis_store.unavailable import StoreClient
from crossdock.queue.models import JobSpec
from crossdock.queue.states import JobState

pytestmark = [pytest.mark.operate, pytest.mark.redis]


def test_each_round_trip_is_reported_once(redis_url, crossdock_env, runtime):
    seen: list[tuple[str, bool]] = []
    store = JobStore.from_url(redis_url, crossdock_env["CROSSDOCK_PREFIX"],
                              on_round_trip=lambda command, _seconds, ok: seen.append((command, ok)))
    assert isinstance(store.r, TimedRedis)
    store.pending_count()
    assert seen == [("ZCARD", True)]
    job_ids = [j.id for j in store.submit(service.check(runtime, [JobSpec(command=["true"])]))]
    seen.clear()
    with store.pipeline(transaction=True) as pipe:  # two Lua transitions in one MULTI
        store.transition(job_ids[0], JobState.SCHEDULED, pipe=pipe, bump_attempt=True)
        store.transition(job_ids[0], JobState.RUNNING, pipe=pipe)
        pipe.execute()
    assert [c for c, _ in seen if c != "SCRIPT"] == ["MULTI"]
    assert store.get(job_ids[0]).state is JobState.RUNNING
    seen.clear()
    with pytest.raises(redis.ResponseError):
        store.r.execute_command("NOSUCHCOMMAND")
    assert seen == [("NOSUCHCOMMAND", False)]
    assert type(JobStore.from_url(redis_url).r) is StoreClient  # no hook: not timed
