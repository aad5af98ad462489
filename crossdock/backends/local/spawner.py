"""Starts local supervisors by fork from a process that has them loaded (a fork server).

A supervisor is a Python process per job; started with ``python -m …supervisor`` it spends most
of its first half second importing redis, pydantic and crossdock, which bounds how many local
jobs a machine starts per second. The spawner is one single-threaded process per state directory
(``python -m crossdock.backends.local.spawner``) that imports the supervisor once and, per request
on its Unix socket (in the service's private run directory, 0600), forks: the child detaches
(``setsid``, a second fork) and runs the supervisor with the environment, log file and arguments
the request carries, exactly as the command line would have. Forking a single-threaded process
that holds no connection is safe; the supervisor opens its own.

The local backend asks it first and falls back to the command line when it does not answer
(then starts one for the next job). It serves one code version (a request carrying another
stamp is refused and the spawner exits, so an upgrade never runs old code) and exits after
``IDLE_SECONDS`` without a request (or once its socket is gone or another's), or when asked to
(:func:`stop`, which ``crossdock up`` does as it stops), so nothing lingers once the service stops.
"""

from __future__ import annotations

import functools
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

IDLE_SECONDS = 30.0
CHECK_SECONDS = 2.0


@functools.lru_cache(maxsize=1)
def stamp() -> str:
    """What code this process loaded (the newest of crossdock's source files when first asked):
    the spawner serves only requests from processes that loaded the same."""
    package = Path(__file__).resolve().parents[2]
    return str(max(p.stat().st_mtime_ns for p in package.rglob("*.py")))


def socket_path(state_dir: Path) -> Path:
    return state_dir / "run" / "spawner.sock"


def spawn(state_dir: Path, args: list[str], env: dict[str, str], log_path: Path) -> bool:
    """Ask the spawner to start ``supervisor args``; False when none answers (start one)."""
    path = socket_path(state_dir)
    request = {"args": args, "env": env, "log": str(log_path), "stamp": stamp()}
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(10)
            sock.connect(str(path))
            sock.sendall(json.dumps(request).encode() + b"\n")
            answer = json.loads(sock.makefile("rb").readline() or b"{}")
    except (OSError, ValueError):
        answer = {}
    if answer.get("ok"):
        return True
    start(state_dir, env)
    return False


def stop(state_dir: Path, timeout: float = 5.0) -> bool:
    """Ask the spawner of ``state_dir`` to exit now (``crossdock up`` stopping: no dispatch comes
    until the next one starts another); False when none answered. Jobs it started run on."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(timeout)
            sock.connect(str(socket_path(state_dir)))
            sock.sendall(b'{"stop": true}\n')
            return bool(json.loads(sock.makefile("rb").readline() or b"{}").get("ok"))
    except (OSError, ValueError):
        return False


_started: dict[Path, float] = {}


def start(state_dir: Path, env: dict[str, str]) -> None:
    """Start a spawner for ``state_dir`` in the background (it detaches; at most one try every
    few seconds from this process, and a second spawner only replaces the first)."""
    now = time.monotonic()
    if now - _started.get(state_dir, -1e9) < 5:
        return
    _started[state_dir] = now
    run = state_dir / "run"
    run.mkdir(mode=0o700, parents=True, exist_ok=True)
    subprocess.Popen([sys.executable, "-m", "crossdock.backends.local.spawner", str(state_dir)], env=env,
                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                     close_fds=True, start_new_session=True)


def serve(state_dir: Path) -> int:
    from crossdock.backends.local import supervisor  # the point: imported once, forked many times
    from crossdock.backends.redis_store import connect

    connect.redis_version()  # looked up here once, not in every child (it reads package metadata)

    path = socket_path(state_dir)
    mine = stamp()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o177)
    try:
        listener.bind(str(path) + f".{os.getpid()}")
        os.rename(str(path) + f".{os.getpid()}", path)  # a second spawner replaces it: the first exits idle
    finally:
        os.umask(old)
    bound = os.stat(path).st_ino
    listener.listen(64)
    listener.settimeout(CHECK_SECONDS)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    last = time.monotonic()
    try:
        while True:
            try:
                conn, _ = listener.accept()
            except TimeoutError:  # idle, or replaced by a newer spawner, or its state directory gone
                if time.monotonic() - last > IDLE_SECONDS or not _ours(path, bound):
                    return 0
                continue
            last = time.monotonic()
            with conn:
                conn.settimeout(10)
                try:
                    request = json.loads(conn.makefile("rb").readline())
                except (OSError, ValueError):
                    continue
                if request.get("stop"):  # any version's: its socket is this user's alone
                    if _ours(path, bound):  # gone before the answer: the caller sees no spawner left
                        path.unlink(missing_ok=True)
                    conn.sendall(b'{"ok": true}\n')
                    return 0
                if request.get("stamp") != mine:
                    conn.sendall(b'{"ok": false, "why": "another version"}\n')
                    return 0
                try:
                    pid = os.fork()
                except OSError:  # out of processes: the backend starts this one itself
                    conn.sendall(b'{"ok": false, "why": "fork failed"}\n')
                    continue
                if pid == 0:
                    listener.close()
                    conn.close()
                    _child(supervisor, request)
                os.waitpid(pid, 0)  # the first child exits once its own child runs the supervisor
                conn.sendall(b'{"ok": true}\n')
    finally:
        listener.close()
        if _ours(path, bound):  # not a newer spawner's
            path.unlink(missing_ok=True)


def _ours(path: Path, bound: int) -> bool:
    try:
        return os.stat(path).st_ino == bound
    except OSError:
        return False


def _child(supervisor, request: dict) -> None:
    """In the fork: detach, take the request's environment and log, run the supervisor, exit."""
    try:
        os.setsid()
        if os.fork():
            os._exit(0)
        os.environ.clear()
        os.environ.update({str(k): str(v) for k, v in request["env"].items()})
        fd = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.close(fd)
        os.close(null)
        sys.stdout = os.fdopen(1, "w", buffering=1)
        sys.stderr = os.fdopen(2, "w", buffering=1)
        code = supervisor.main(["supervisor", *[str(a) for a in request["args"]]])
    except BaseException:  # noqa: BLE001 - the fork must never return into the server loop
        import traceback

        traceback.print_exc()
        code = 1
    os._exit(code if isinstance(code, int) else 1)


if __name__ == "__main__":
    sys.exit(serve(Path(sys.argv[1])))
