"""Durable writes (``wait_replicas`` in the store's URL): read from the URL, every problem named at
once; a WAIT after each command or pipeline that writes, none after reads; a write too few replicas
acknowledged raises ``NotReplicated`` (a ``StoreUnavailable``: its outcome unknown) and stays on
the master. The real Redis here has no replica, so a WAIT for one always falls short; the failover
itself is ``tests/integration/local/test_sentinel_durability.py``."""

from __future__ import annotations

import uuid

import pytest

from crossdock.backends.redis_store.durability import BadDurability, Durability, NotReplicated, split, writes
from crossdock.backends.redis_store.store import JobStore
from crossdock.queue.errors import StoreUnavailable
from crossdock.queue.models import Job, JobSpec
from crossdock.workers.app import celery_url

pytestmark = pytest.mark.redis


@pytest.mark.parametrize("url, rest, durability", [
    ("redis://:pw@h:6379/0?wait_replicas=1&wait_timeout_ms=200", "redis://:pw@h:6379/0", Durability(1, 200)),
    ("redis+sentinel://a:1,b:2/m/0?sentinel_password=x&wait_replicas=2", "redis+sentinel://a:1,b:2/m/0?sentinel_password=x",
     Durability(2, 1000)),
    ("redis://h/0?wait_replicas=0", "redis://h/0", None),
    ("unix:///run/r.sock?db=1", "unix:///run/r.sock?db=1", None),
], ids=["plain", "sentinel-keeps-its-own", "zero-is-off", "none-asked"])
def test_the_url_says_how_durable(url, rest, durability):
    assert split(url) == (rest, durability)


def test_every_bad_value_is_named_at_once():
    with pytest.raises(BadDurability) as err:
        split("redis://h/0?wait_replicas=one&wait_timeout_ms=-5")
    assert "wait_replicas='one' is not a whole number" in str(err.value)
    assert "wait_timeout_ms='-5' is not a whole number" in str(err.value)
    with pytest.raises(BadDurability, match="wait_timeout_ms=0 would wait for ever"):
        split("redis://h/0?wait_replicas=1&wait_timeout_ms=0")


@pytest.mark.parametrize("commands, written", [
    ([("HGETALL", "k"), ("ZRANGE", "z", 0, -1)], False),
    ([("HGETALL", "k"), ("HSET", "k", "f", "v")], True),
    ([("EVALSHA", "abc", 1, "k")], True),
    ([("SCRIPT LOAD", "return 1")], False),
], ids=["reads", "one-write", "a-script-counts-as-a-write", "script-load"])
def test_what_counts_as_a_write(commands, written):
    assert writes(commands) is written


def test_celery_gets_the_url_without_the_stores_durability():
    assert celery_url("redis://h:1/0?wait_replicas=1&wait_timeout_ms=5") == "redis://h:1/0"


def waits(store: JobStore) -> int:
    return int(store.r.info("commandstats").get("cmdstat_wait", {}).get("calls", 0))


def test_writes_wait_for_replicas_and_reads_do_not(redis_url):
    sep = "&" if "?" in redis_url else "?"
    prefix = f"d{uuid.uuid4().hex[:8]}"
    plain = JobStore.from_url(redis_url, prefix)
    durable = JobStore.from_url(f"{redis_url}{sep}wait_replicas=1&wait_timeout_ms=20", prefix)
    before = waits(plain)
    assert durable.get_many([1, 2]) == []  # a pipeline of reads
    assert durable.r.get(f"{prefix}:nothing") is None  # a command that reads
    assert waits(plain) == before
    with pytest.raises(NotReplicated, match=r"0 of the 1 replicas .* within 20 ms; its outcome is unknown") as err:
        durable.r.set(f"{prefix}:written", "yes")
    assert isinstance(err.value, StoreUnavailable) and waits(plain) == before + 1
    assert plain.r.get(f"{prefix}:written") == "yes"  # on the master all the same: not acknowledged
    job = Job(id=0, spec=JobSpec(command=["true"], user="alice"))
    with pytest.raises(NotReplicated, match="stored once"):
        durable.submit([job], token="t1")
    plain.submit([job], token="t2")
    with pytest.raises(NotReplicated):  # a replay acknowledges only once its first write is replicated
        durable.submit([job], token="t2")


def test_health_says_when_no_write_can_be_acknowledged(redis_url):
    from crossdock.backends.redis_store.durability import health

    store = JobStore.from_url(redis_url, "h")
    assert health(store.r, Durability(1, 100)) == {
        "name": "durable writes", "ok": False,
        "detail": "wait_replicas=1: 0 replica(s) online; no write is acknowledged until enough are (the store looks"
                  " away meanwhile)"}
    assert health(store.r, Durability(0, 100))["ok"]
