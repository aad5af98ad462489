"""One embedded Redis per state directory, whoever starts it and however slow it answers: a second
server would take over the socket, leave the first running unseen, and both would append to one AOF."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from crossdock.backends.redis_store import embedded
from crossdock.queue.errors import CrossdockError

pytestmark = pytest.mark.redis

START = "import sys; from pathlib import Path; from crossdock.backends.redis_store import embedded;" \
        " print(embedded.ensure_running(Path(sys.argv[1])))"


def servers_of(state: Path) -> list[int]:
    """The redis-server processes serving this state dir's socket."""
    sock = str(embedded.socket_path(state)).encode()
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            if b"redis-server" in cmdline and sock in cmdline:
                found.append(int(entry.name))
    return found


@pytest.fixture
def state(tmp_path):
    path = tmp_path / "state"
    yield path
    for pid in servers_of(path):
        os.kill(pid, signal.SIGCONT)
        os.kill(pid, signal.SIGKILL)


def test_processes_starting_it_at_once_share_one_server(state):
    starters = [subprocess.Popen([sys.executable, "-c", START, str(state)], stdout=subprocess.PIPE, text=True)
                for _ in range(4)]
    urls = {p.communicate(timeout=60)[0].strip() for p in starters}
    assert [p.returncode for p in starters] == [0, 0, 0, 0]
    assert urls == {embedded.url_for(state)}
    assert servers_of(state) == [embedded.pid(state)]


def test_a_server_that_lives_but_does_not_answer_is_reported_not_doubled(state):
    embedded.ensure_running(state)
    server = embedded.pid(state)
    os.kill(server, signal.SIGSTOP)  # alive, answering nothing: a machine under load, an AOF loading
    with pytest.raises(CrossdockError) as exc:
        embedded.ensure_running(state, timeout=1)
    assert f"the embedded Redis (pid {server}) is running but has not answered for 1s" in str(exc.value)
    assert servers_of(state) == [server]
    os.kill(server, signal.SIGCONT)
    assert embedded.ensure_running(state) == embedded.url_for(state)
    assert servers_of(state) == [server]


def test_a_killed_server_is_started_again(state):
    embedded.ensure_running(state)
    first = embedded.pid(state)
    os.kill(first, signal.SIGKILL)  # its pidfile stays; the process goes
    deadline = time.monotonic() + 10
    while embedded.pid(state) == first and time.monotonic() < deadline:
        time.sleep(0.05)
    assert embedded.ensure_running(state) == embedded.url_for(state)
    second = embedded.pid(state)
    assert second not in (None, first) and servers_of(state) == [second]
