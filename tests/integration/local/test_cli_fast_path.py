"""The CLI's fast path on a single-user install: ``crossdock up`` serves its owner's CLI on a
private socket, and ``submit``, ``queue``, ``show``, ``cancel`` and ``wait`` through it print the
same bytes and exit with the same status as the full path (``CROSSDOCK_SOCKET=none``) — errors
included — while the client loads only the standard library; without ``up`` (or with a socket
left by a killed one) the CLI takes the full path and works as before. The socket serves no one
but its owner, even when its directory is opened to others."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from crossdock.backends.redis_store import embedded
from crossdock.cli.thin import user_socket
from tests.integration.local.test_up import up_env  # noqa: F401
from tests.integration.local.test_users import second_user
from tests.waiting import eventually

pytestmark = [pytest.mark.redis, pytest.mark.celery]

STAMP = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d[+-]\d\d:\d\d")
HEAVY = ("pydantic", "redis", "celery", "typer", "click", "rich", "yaml")
TRACED = """import atexit, json, os, sys
def _note():
    with open(os.environ["LOADED"], "w") as f:
        json.dump(sorted(sys.modules), f)
atexit.register(_note)
sys.argv = ["crossdock", *sys.argv[1:]]
from crossdock.cli.main import main
main()
"""
"""``crossdock ARGS`` that writes the modules it loaded to $LOADED at exit."""


class Cli:
    def __init__(self, env: dict[str, str], tmp: Path) -> None:
        self.env, self.tmp = env, tmp
        self.full_env = {**env, "CROSSDOCK_SOCKET": "none"}

    def run(self, *args: str, full: bool = False) -> tuple[subprocess.CompletedProcess, list[str]]:
        loaded = self.tmp / "loaded.json"
        loaded.unlink(missing_ok=True)
        r = subprocess.run([sys.executable, "-c", TRACED, *args], env={
            **(self.full_env if full else self.env), "LOADED": str(loaded)}, capture_output=True, text=True,
            timeout=120, cwd=self.tmp)
        return r, json.loads(loaded.read_text()) if loaded.exists() else []

    def fast(self, *args: str) -> subprocess.CompletedProcess:
        r, modules = self.run(*args)
        heavy = sorted(m for m in modules if m.split(".")[0] in HEAVY or m.startswith("crossdock.queue"))
        assert heavy == [], f"crossdock {' '.join(args)} took the full path: {heavy[:8]}\n{r.stderr}"
        return r

    def full(self, *args: str) -> subprocess.CompletedProcess:
        return self.run(*args, full=True)[0]

    def same(self, *args: str, now: bool = False) -> subprocess.CompletedProcess:
        """``crossdock ARGS`` on both paths: the same output, errors and exit status (``now``: but for
        the times of day, which say when the command ran)."""
        fast, full = self.fast(*args), self.full(*args)

        def seen(r: subprocess.CompletedProcess) -> tuple[int, str, str]:
            return r.returncode, *(STAMP.sub("<now>", t) if now else t for t in (r.stdout, r.stderr))

        assert seen(fast) == seen(full), args
        return fast

    def submit_held(self) -> str:
        r = self.full("submit", "--parsable", "--hold", "-J", "held", "--wrap", "true")
        assert r.returncode == 0, r.stderr
        return r.stdout.strip()


@pytest.fixture
def short_env(up_env):
    """``up_env`` with its state in a directory of /tmp of its own, which a test may open to another
    user (pytest's directories are not theirs to enter)."""
    state, env = up_env
    home = Path(f"/tmp/cd-fast-{uuid.uuid4().hex[:8]}")
    home.mkdir(mode=0o700)
    short = home / "state"
    yield short, {**env, "CROSSDOCK_STATE_DIR": str(short)}
    embedded.stop(short, timeout=5)
    shutil.rmtree(home, ignore_errors=True)


def start_up(state: Path, env: dict[str, str], log: Path) -> subprocess.Popen:
    """``crossdock up`` with nothing that changes a job (no scheduler, no worker), serving its socket."""
    with open(log, "ab") as out:
        up = subprocess.Popen([sys.executable, "-m", "crossdock", "up", "--workers", "0", "--no-scheduler"],
                              env=env, stdout=out, stderr=subprocess.STDOUT)
    sock = Path(user_socket(str(state)))
    eventually("up to serve its owner's socket", lambda: sock.is_socket() or up.poll() is not None, 60)
    assert up.poll() is None, log.read_text()[-3000:]
    return up


def serve(state: Path, env: dict[str, str], tmp: Path) -> Iterator[tuple[Cli, Path]]:
    up = start_up(state, env, tmp / "up.log")
    try:
        yield Cli(env, tmp), Path(user_socket(str(state)))
    finally:
        up.send_signal(signal.SIGTERM)
        up.wait(60)


@pytest.fixture
def served(up_env, tmp_path):
    yield from serve(*up_env, tmp_path)


@pytest.fixture
def served_short(short_env, tmp_path):
    yield from serve(*short_env, tmp_path)


def test_the_fast_path_prints_what_the_full_path_prints(served):
    cli, _sock = served
    held, other = cli.submit_held(), cli.submit_held()
    # submit: a held job each (ids differ), a dry run and bad input alike
    fast = cli.fast("submit", "--parsable", "--hold", "--wrap", "true")
    assert fast.returncode == 0 and fast.stdout.strip().isdigit(), fast.stderr
    dry = cli.same("submit", "--dry-run", "--json", "-J", "dry", "-c", "2", "--wrap", "true", now=True)
    assert json.loads(dry.stdout)["name"] == "dry" and "job to start at" in dry.stderr, dry
    bad = cli.same("submit", "-t", "soon", "-c", "0", "--wrap", "true")
    assert bad.returncode == 2 and len(bad.stderr.splitlines()) == 2, bad.stderr
    # queue: listings, formats, JSON, filters; a bad state or queue is one line, exit 2
    for args in (["queue"], ["queue", "-t", "all", "-o", "%i %j %T %u"], ["queue", "--json"],
                 ["queue", "--me", "-h"], ["queue", "-j", held]):
        assert cli.same(*args).returncode == 0
    assert held in cli.same("queue", "-o", "%i").stdout.split()
    assert cli.same("queue", "-t", "bogus").returncode == 2
    assert cli.same("queue", "-p", "nosuchqueue").returncode == 2
    usage = cli.same("queue", "--no-such-option")  # Click's own usage error
    assert usage.returncode == 2 and "--no-such-option" in usage.stderr and usage.stdout == "", usage
    # show: one job, JSON, an unknown one
    assert "JobName=held" in cli.same("show", "job", held).stdout
    assert json.loads(cli.same("show", "--json", held).stdout)["spec"]["name"] == "held"
    missing = cli.same("show", "999999")
    assert missing.returncode == 2 and missing.stderr.startswith("crossdock: error: "), missing.stderr
    # wait: a timeout (124), an unknown job (2)
    timed_out = cli.same("wait", "--timeout", "0.3", held)
    assert timed_out.returncode == 124 and "timed out" in timed_out.stderr, timed_out.stderr
    assert cli.same("wait", "999999").returncode == 2
    # cancel: each path cancels its own job, quietly; then a second time, an unknown one, no ids
    fast, full = cli.fast("cancel", held), cli.full("cancel", other)
    assert (fast.returncode, fast.stdout, fast.stderr) == (full.returncode, full.stdout, full.stderr) == (0, "", "")
    again = cli.same("cancel", held)
    assert again.returncode == 0 and f"job {held} already" in again.stderr, again.stderr
    assert cli.same("cancel", "-v", other).returncode == 0
    assert cli.same("cancel", "999999").returncode == 2
    assert cli.same("cancel").returncode == 2
    # wait on ended jobs: the summary and their exit status
    ended = cli.same("wait", held, other)
    assert ended.returncode == 1 and "CANCELLED" in ended.stdout, ended
    assert " CA " in cli.same("queue", "-t", "all", "-j", held).stdout


def test_without_up_the_cli_takes_the_full_path(up_env, tmp_path):
    state, env = up_env
    cli = Cli(env, tmp_path)
    r, modules = cli.run("submit", "--parsable", "--hold", "--wrap", "true")
    assert r.returncode == 0 and r.stdout.strip().isdigit(), r.stderr
    assert "pydantic" in modules  # submitted in this process
    job = r.stdout.strip()
    listed, modules = cli.run("queue", "-o", "%i")
    assert listed.returncode == 0 and job in listed.stdout.split() and "typer" in modules
    # a socket left by an up that was killed: refused, and the CLI goes on without it
    up = start_up(state, env, tmp_path / "up.log")
    up.send_signal(signal.SIGKILL)
    up.wait(30)
    assert Path(user_socket(str(state))).is_socket()
    left, modules = cli.run("cancel", job)
    assert left.returncode == 0 and left.stderr == "" and "typer" in modules, left.stderr
    shown, _ = cli.run("show", job)
    assert "JobState=CANCELLED" in shown.stdout, shown


@pytest.mark.security
def test_the_owners_socket_refuses_another_user_even_when_its_directory_is_open(served_short):
    cli, sock = served_short
    assert stat.S_IMODE(sock.parent.stat().st_mode) == 0o700 and stat.S_IMODE(sock.stat().st_mode) == 0o600
    job = cli.submit_held()
    t2 = second_user()
    for path in (sock.parent.parent.parent, sock.parent.parent, sock.parent):  # as if opened up by mistake
        path.chmod(0o755)
    sock.chmod(0o666)
    probe = ("import socket, sys\n"  # the service answers before it reads anything: its refusal
             "s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1])\n"
             "print(s.makefile().readline())\n"
             "try:\n"
             "    s.sendall(b'{\"op\":\"cli_argv\",\"args\":{\"command\":\"cancel\",\"argv\":[\"' + sys.argv[2].encode()"
             " + b'\"]}}\\n')\n"
             "    print(repr(s.recv(100)))\n"
             "except OSError as exc:\n"
             "    print(type(exc).__name__)\n")
    r = subprocess.run(["/usr/bin/python3", "-I", "-c", probe, str(sock), job], user=t2.pw_uid, group=t2.pw_gid,
                       extra_groups=[], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    refusal, after = r.stdout.splitlines()[0], r.stdout.splitlines()[-1]
    answer = json.loads(refusal)
    assert after in ("BrokenPipeError", "ConnectionResetError", "b''"), r.stdout  # closed: nothing read
    assert answer["error"]["type"] == "PermissionDenied" and "serves only" in answer["error"]["message"], answer
    assert "JobState=PENDING" in cli.full("show", job).stdout  # nothing was done for them
