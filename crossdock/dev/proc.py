"""Process helpers shared by the local clusters: /proc reading, pid files, spawning, stopping,
waiting, ports.

Daemons here outlive the Python process that started them and are stopped by PID from any
process, so liveness is read from /proc, where zombies and reused PIDs can be told apart.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from crossdock.backends.local.ports import LOWEST_PORT, ephemeral_ports, free_port  # noqa: F401 (the dev services' ports)

GONE_STATES = (None, "Z", "X")
"""Process states (``proc_state``) of a process that no longer runs: none, zombie, dead."""


def proc_stat(pid: int) -> list[str] | None:
    """Fields of /proc/<pid>/stat after the command name (state first), or None."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat[stat.rindex(")") + 2:].split()


def proc_state(pid: int) -> str | None:
    """The state letter of a process (``R``, ``S``, ``Z``…), or None when there is none."""
    fields = proc_stat(pid)
    return fields[0] if fields else None


def start_time(pid: int) -> str | None:
    """The process's start time in clock ticks since boot: with the PID, its identity."""
    fields = proc_stat(pid)
    return fields[19] if fields else None


def read_pid(pidfile: Path) -> int | None:
    """The PID a pid file holds (its first word), or None."""
    try:
        return int(pidfile.read_text().split()[0])
    except (FileNotFoundError, ValueError, IndexError):
        return None


def live_pid(pidfile: Path, binary: str) -> int | None:
    """The PID in ``pidfile`` if that process is alive (zombies count as gone) and runs ``binary``."""
    pid = read_pid(pidfile)
    if pid is None or proc_state(pid) in GONE_STATES:
        return None
    try:
        argv0 = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode()
    except OSError:
        return None
    return pid if Path(argv0).name == binary else None


def spawn(argv: Sequence[str], logfile: Path, *, env: Mapping[str, str] | None = None,
          cwd: Path | None = None, append: bool = True) -> subprocess.Popen[bytes]:
    """Start a process that does not fork itself, in its own session, output to ``logfile``."""
    with open(logfile, "ab" if append else "wb") as out:
        return subprocess.Popen(list(argv), env=env, cwd=cwd, stdin=subprocess.DEVNULL, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)


def wait_until(predicate: Callable[[], object], timeout: float, *, interval: float = 0.1,
               check: Callable[[], None] | None = None) -> bool:
    """Poll ``predicate`` until it is true (True) or ``timeout`` seconds have passed (False).

    ``check`` runs before each poll and may raise to give up early (a daemon died).
    """
    deadline = time.monotonic() + timeout
    while True:
        if check is not None:
            check()
        if predicate():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval)


def terminate(pid: int, gone: Callable[[], bool], *, timeout: float, sig: int = signal.SIGTERM,
              interval: float = 0.1, kill_wait: float = 0.0) -> None:
    """Send ``sig``; SIGKILL when ``gone()`` is still false after ``timeout`` seconds, then wait
    up to ``kill_wait`` seconds more for it."""
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        return
    if wait_until(gone, timeout, interval=interval):
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    wait_until(gone, kill_wait)


def log_tail(path: Path, lines: int) -> str:
    """The last ``lines`` lines of a log, for error messages."""
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def port_is_free(port: int) -> bool:
    """Whether a daemon could bind ``port`` on 127.0.0.1 now (TIME_WAIT is fine, as for them)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def write_private(path: Path, data: bytes, mode: int = 0o600) -> None:
    """Create ``path`` with ``mode`` from the start (keys); an existing file is kept."""
    if path.exists():
        return
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
