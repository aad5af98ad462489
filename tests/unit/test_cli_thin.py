"""The CLI's fast path client (``crossdock.cli.thin``): which socket it tries, what it leaves to the
full path, and that it trusts only a socket of its own user's."""

from __future__ import annotations

import os
import socket

import pytest

from crossdock.cli import thin


def test_the_user_socket_is_in_the_state_directory_or_under_tmp_when_that_is_too_long(monkeypatch, tmp_path):
    short = tmp_path.parent / "s"
    monkeypatch.setenv("CROSSDOCK_STATE_DIR", str(short))
    assert thin.user_socket() == str(short / "run" / "cli.sock")
    long = tmp_path / ("x" * 120)
    monkeypatch.setenv("CROSSDOCK_STATE_DIR", str(long))
    path = thin.user_socket()
    assert os.path.dirname(path) == f"/tmp/crossdock-{os.geteuid()}" and len(path) < thin.SUN_PATH_MAX
    monkeypatch.setenv("CROSSDOCK_STATE_DIR", str(long) + "y")
    assert thin.user_socket() != path  # one socket per state directory
    monkeypatch.delenv("CROSSDOCK_STATE_DIR")
    home = tmp_path.parent / "h"  # short enough for a socket path wherever pytest's tmp sits
    monkeypatch.setenv("HOME", str(home))
    assert thin.user_socket() == str(home / ".local" / "state" / "crossdock" / "run" / "cli.sock")


@pytest.mark.parametrize("command,argv", [
    ("submit", ["--batch", "jobs.txt"]),
    ("submit", ["--batch=jobs.txt"]),
    ("queue", ["--help"]),
    ("history", []),
    ("up", []),
], ids=["submit-batch", "submit-batch-equals", "help", "other-command", "up"])
def test_what_the_full_path_keeps(command, argv, monkeypatch, tmp_path):
    monkeypatch.setenv("CROSSDOCK_SOCKET", str(tmp_path / "nothing-listens"))
    monkeypatch.setattr(thin, "run", lambda *a: pytest.fail("went to the socket"))
    assert thin.served(command, argv) is None


@pytest.fixture
def listening(tmp_path, monkeypatch):
    """A state directory whose user socket listens (nothing answers on it)."""
    state = tmp_path / "state"
    (state / "run").mkdir(parents=True, mode=0o700)
    monkeypatch.setenv("CROSSDOCK_STATE_DIR", str(state))
    monkeypatch.delenv("CROSSDOCK_SOCKET", raising=False)
    monkeypatch.setattr(thin, "DEFAULT_SOCKET", str(tmp_path / "no-multi-user"))
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(thin.user_socket())
    sock.listen()
    calls = []
    monkeypatch.setattr(thin, "run", lambda command, argv, path: calls.append(path) or 0)
    yield state, calls
    sock.close()


def test_the_owners_socket_is_used_when_it_is_theirs_alone(listening, monkeypatch):
    state, calls = listening
    assert thin.served("queue", []) == 0 and calls == [thin.user_socket()]
    (state / "run").chmod(0o770)  # a directory others may write: someone could have put the socket there
    assert thin.served("queue", []) is None
    (state / "run").chmod(0o700)
    monkeypatch.setenv("CROSSDOCK_SOCKET", "none")  # direct mode: no socket at all
    assert thin.served("queue", []) is None and len(calls) == 1


def test_wait_on_a_terminal_keeps_its_live_display(listening, monkeypatch):
    _state, calls = listening
    monkeypatch.setattr(thin.sys.stdout, "isatty", lambda: True, raising=False)
    assert thin.served("wait", ["12"]) is None
    assert thin.served("wait", ["-q", "12"]) == 0 and len(calls) == 1


def test_no_listener_is_the_full_path(tmp_path, monkeypatch):
    monkeypatch.setenv("CROSSDOCK_SOCKET", str(tmp_path / "gone.sock"))
    assert thin.run("queue", [], str(tmp_path / "gone.sock")) is None
