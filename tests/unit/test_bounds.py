"""The config's ``limits:`` (pure): defaults as Slurm's, each refusal naming its key, every problem of
a spec at once, the per-user job count; and the socket's bounded reading of a request line."""

from __future__ import annotations

import io
import threading
from datetime import datetime, timezone

import pytest

from crossdock.gateway.bounded import CHUNK, Connections, TooLarge, next_request
from crossdock.queue.admission import admit
from crossdock.queue.bounds import check_job_counts, env_bytes
from crossdock.queue.config import parse_config
from crossdock.queue.config_limits import Limits
from crossdock.queue.errors import ConfigError, LimitExceeded
from crossdock.queue.models import ArraySpec, JobSpec

NOW = datetime(2026, 1, 1, tzinfo=timezone.utc)
BASE = {"priority_classes": {"batch": {"value": 1}}, "pools": {"local": {"backend": "local"}},
        "queues": {"batch": {"priority_class": "batch", "pools": ["local"]}}}
SMALL = parse_config({**BASE, "limits": {"max_script_size": 100, "max_env_vars": 2, "max_env_bytes": 30,
                                         "max_submit_jobs": 3}})


def test_the_defaults_are_slurms():
    lim = parse_config(BASE).limits
    assert (lim.max_script_size, lim.max_submit_jobs) == (4 * 1024 * 1024, 10_000)
    assert parse_config(BASE).scheduler.max_array_size == 1001


def test_a_bad_limit_is_a_config_error_with_its_path():
    with pytest.raises(ConfigError) as exc:
        parse_config({**BASE, "limits": {"max_connections_per_user": 0, "max_script_size": 1 << 40, "nope": 1}})
    assert sorted(exc.value.errors) == ["limits.max_connections_per_user: must be ≥ 1",
                                        "limits.max_script_size: must be ≤ 67108864",
                                        "limits.nope: unknown field; remove it or check its spelling"]


@pytest.mark.parametrize("kw,keys", [
    (dict(command=None, script="#!/bin/sh\n" + "#" * 200), ["limits.max_script_size"]),
    (dict(env={"A": "1", "B": "2", "C": "3"}), ["limits.max_env_vars"]),
    (dict(env={"A": "x" * 40}), ["limits.max_env_bytes"]),
    (dict(env={"A": "x" * 40, "B": "", "C": ""}, array=ArraySpec(task_ids=[0, 2000])),
     ["limits.max_env_vars", "limits.max_env_bytes", "scheduler.max_array_size"]),
], ids=["script", "env-vars", "env-bytes", "all-at-once"])
def test_a_spec_over_the_limits_is_refused_naming_every_key(kw, keys):
    with pytest.raises(LimitExceeded) as exc:
        admit(JobSpec(**{"command": ["true"], **kw}), SMALL, [], NOW)
    message = str(exc.value)
    assert [k for k in keys if k in message] == keys and "ask an admin to raise" in message


def test_env_bytes_count_as_exec_does():
    assert env_bytes({"A": "1", "BC": "é"}) == len("A=1\0") + len("BC=é\0".encode())


def test_jobs_per_user_count_what_each_owner_has():
    lim = SMALL.limits
    check_job_counts({"ann": 2}, {"ann": 1, "bob": 3}, lim)
    with pytest.raises(LimitExceeded, match=r"jobs: 2 pending or running \+ 2 submitted for 'ann'.*max_submit_jobs"):
        check_job_counts({"ann": 2}, {"ann": 2}, lim)


def _read(data: bytes, limit: int) -> bytes:
    with next_request(io.BufferedReader(io.BytesIO(data)), limit, threading.BoundedSemaphore(1), 1.0) as line:
        return line


def test_a_request_line_is_read_no_further_than_its_limit():
    assert _read(b'{"op":"x"}\nmore', 100) == b'{"op":"x"}\n'
    long = b"x" * (3 * CHUNK) + b"\n"
    assert _read(long, len(long)) == long
    with pytest.raises(TooLarge):
        _read(long, len(long) - 1)
    with pytest.raises(TooLarge):
        _read(b"y" * 200, 100)
    assert _read(b"", 100) == b""


def test_a_large_request_waits_for_its_users_slot():
    slot = threading.BoundedSemaphore(1)
    slot.acquire()
    with pytest.raises(TimeoutError):
        with next_request(io.BufferedReader(io.BytesIO(b"z" * (2 * CHUNK))), 10 * CHUNK, slot, 0.01):
            pass


def test_connections_are_capped_per_user_and_in_all():
    lim = Limits(max_connections_per_user=2, max_connections=3)
    conns = Connections()
    assert [conns.admit(1, lim), conns.admit(1, lim)] == [None, None]
    assert "limits.max_connections_per_user" in conns.admit(1, lim)
    assert conns.admit(2, lim) is None
    assert "limits.max_connections " in conns.admit(3, lim)
    conns.release(1)
    assert conns.admit(3, lim) is None and conns.open() == 3 and conns.open(1) == 1


def test_a_request_names_at_most_max_ids_jobs_and_the_client_asks_in_pieces():
    from crossdock.gateway import wire
    from crossdock.gateway.remote import _pieces
    from crossdock.queue.errors import InvalidArgument

    assert wire.OPS["jobs"].args["ids"](["1", 2]) == [1, 2]
    with pytest.raises(InvalidArgument, match="ids: 10001 in one request is over 10000; ask in pieces"):
        wire.OPS["jobs"].args["ids"](list(range(wire.MAX_IDS + 1)))
    with pytest.raises(InvalidArgument, match="not a list"):
        wire.OPS["cancel"].args["refs"]("12")
    assert [len(p) for p in _pieces(range(25_001))] == [10_000, 10_000, 5_001]
