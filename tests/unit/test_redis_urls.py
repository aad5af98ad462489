"""Sentinel URLs: parsed for redis-py, spelled for kombu, bad ones refused with the fix."""

import pytest

from crossdock.backends.redis_store.connect import BadRedisURL, SentinelURL, is_sentinel, kombu_broker, parse_sentinel
from crossdock.workers.app import celery_url, transport_options


@pytest.mark.parametrize("url, parsed", [
    ("redis+sentinel://127.0.0.1:26380/mymaster",
     SentinelURL((("127.0.0.1", 26380),), "mymaster")),
    ("redis+sentinel://:s3cret@a:1,b,[::1]:3/mymaster/2?sentinel_password=x",
     SentinelURL((("a", 1), ("b", 26379), ("::1", 3)), "mymaster", 2, None, "s3cret", "x")),
    ("rediss+sentinel://user:pw@a:1/m", SentinelURL((("a", 1),), "m", 0, "user", "pw", None, True)),
], ids=["one", "several-with-password-and-db", "tls-user"])
def test_parse(url, parsed):
    assert is_sentinel(url) and parse_sentinel(url) == parsed


@pytest.mark.parametrize("url, needle", [
    ("redis+sentinel://a:26379", "names the master"),
    ("redis+sentinel://a:x/m", "port 'x' is not a number"),
    ("redis+sentinel://a:1/m/zero", "database 'zero' is not a number"),
    ("redis+sentinel://a:1,,b/m", "empty sentinel host"),
], ids=["no-master", "bad-port", "bad-db", "empty-host"])
def test_bad_urls_say_what_to_fix(url, needle):
    with pytest.raises(BadRedisURL, match=needle):
        parse_sentinel(url)


def test_kombu_spelling_and_transport_options():
    url = "redis+sentinel://:pw@a:1,b:2/crossdock/3?sentinel_password=sp"
    assert kombu_broker(url) == ("sentinel://:pw@a:1/3;sentinel://:pw@b:2/3",
                                 {"master_name": "crossdock", "sentinel_kwargs": {"password": "sp"}})
    assert celery_url(url) == "sentinel://:pw@a:1/3;sentinel://:pw@b:2/3"
    assert transport_options(url) == {"visibility_timeout": 3600, "master_name": "crossdock",
                                      "sentinel_kwargs": {"password": "sp"}}
    assert transport_options("redis://h:6379/0") == {"visibility_timeout": 3600}
    assert not is_sentinel("redis://h:6379/0") and celery_url("unix:///s.sock") == "redis+socket:///s.sock"


def test_a_new_connection_does_not_read_package_metadata(monkeypatch):
    """redis-py looks its version up for every connection; a local supervisor makes one, and the
    lookup (package metadata parsed as e-mail) was a fifth of its CPU."""
    from importlib import metadata

    from crossdock.backends.redis_store import connect

    connect.redis_version()  # once per process (the spawner does it before it forks)
    calls = []
    monkeypatch.setattr(metadata, "version", lambda name: calls.append(name) or "0")
    for url in ("redis://127.0.0.1:1/0", "unix:///nonexistent/redis.sock"):
        pool = connect.client(url).connection_pool
        pool.release(pool.make_connection())  # no connect: only what it names itself as
    assert calls == []
