"""A store whose Redis is away raises ``StoreUnavailable``, whatever the call's shape: a command,
a script, a pipeline, a watching transaction, a client built elsewhere and handed in. No server
is needed: a Unix socket nobody listens on refuses every connection at once."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import redis

from crossdock.backends.redis_store.store import JobStore, probe
from crossdock.queue.errors import StoreUnavailable
from crossdock.queue.models import Job, JobSpec
from crossdock.queue.states import JobState


@pytest.fixture
def away(tmp_path) -> str:
    return f"unix://{tmp_path / 'nobody-listens.sock'}"


CALLS = {
    "command": lambda s: s.get(1),
    "pipeline": lambda s: s.get_many([1, 2]),
    "script": lambda s: s.transition(1, JobState.CANCELLED),
    "watching transaction": lambda s: s.submit([Job(id=0, spec=JobSpec(command=["true"], user="alice"))], token="t"),
    "lease": lambda s: s.acquire_lease("me", 5),
    "sub-store": lambda s: s.live_config.in_force_version(),
}


@pytest.mark.parametrize("call", CALLS.values(), ids=CALLS.keys())
def test_every_call_of_an_away_store_raises_store_unavailable(away, call):
    store = JobStore.from_url(away, "t", retries=0)
    with pytest.raises(StoreUnavailable, match=r"the store does not answer \(ConnectionError: .*\); try again"):
        call(store)


def test_a_timed_store_raises_it_too_and_reports_the_failed_round_trip(away):
    trips = []
    store = JobStore.from_url(away, "t", on_round_trip=lambda *trip: trips.append(trip), retries=0)
    with pytest.raises(StoreUnavailable):
        store.get_many([1])
    assert trips == [("PIPELINE", trips[0][1], False)]


def test_a_plain_client_handed_in_is_answered_the_same(away):
    store = JobStore(redis.Redis.from_url(away, decode_responses=True, retry=None), "t")
    with pytest.raises(StoreUnavailable) as raised:
        store.pending_ids()
    assert isinstance(raised.value.__cause__, redis.ConnectionError)  # kept for the log, not for callers


def test_a_submission_says_a_retry_with_its_token_is_stored_once(away):
    store = JobStore.from_url(away, "t", retries=0)
    with pytest.raises(StoreUnavailable, match="same idempotency token is stored once"):
        store.submit([Job(id=0, spec=JobSpec(command=["true"], user="alice"))], token="t")


def test_probe_names_redis_own_error(away):
    assert probe(away).startswith("ConnectionError: ")


@pytest.mark.parametrize("argv", [["queue"], ["cancel", "1"]], ids=["queue", "cancel"])
def test_the_cli_says_so_in_one_line_without_a_traceback(away, tmp_path, argv):
    env = dict(os.environ, CROSSDOCK_REDIS_URL=away, CROSSDOCK_STATE_DIR=str(tmp_path / "state"), CROSSDOCK_PREFIX="t")
    r = subprocess.run([sys.executable, "-m", "crossdock", *argv], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode in (1, 2) and "Traceback" not in r.stderr
    assert r.stderr.splitlines()[-1].startswith("crossdock: error: the store does not answer (ConnectionError: ")
