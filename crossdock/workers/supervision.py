"""What ``crossdock up`` runs and keeps running: the scheduling loop (a thread), a Celery worker
(a process), the local worker fleets the autoscaler scales (``fleet.py``) and, on the embedded
default, the Redis server in the state directory.

:meth:`Service.supervise` calls :meth:`Service.check` every half second: a loop thread that
ended, a worker that exited or an embedded Redis that died is restarted, up to ``RESTART_LIMIT``
times within ``RESTART_WINDOW`` seconds each, beyond which :class:`GaveUp` says in one line what
keeps dying; it also writes ``state_dir/up.json``, which ``crossdock health`` reads.

Nothing is left behind. The worker runs in its own session (a terminal's Ctrl-C reaches ``up``
alone, which then stops the worker in order), is stopped with a bounded warm shutdown (SIGTERM,
then SIGKILL of its group after ``WORKER_STOP_SECONDS``: tasks are acknowledged late and
idempotent, so a killed one is simply delivered again), and watches its parent: when ``up``
dies, even by SIGKILL, the worker stops itself (:func:`watch_parent`; Celery's pool
children die with the worker through PR_SET_PDEATHSIG). One ``up`` per state directory: a lock
file held for its life (:class:`UpLock`); the next ``up`` refuses while it is held, and once it
is free, first stops the worker an ``up`` that was killed may have left. Local jobs run under
their own detached supervisors and keep running through all of this.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import deque
from pathlib import Path
from typing import Any, Protocol, Sequence

from crossdock.backends.local import spawner
from crossdock.backends.redis_store import embedded, upgrade
from crossdock.queue.errors import CrossdockError
from crossdock.runtime import Runtime
from crossdock.workers.app import celery_sender, make_app, queue_for
from crossdock.workers.consumers import add_queues
from crossdock.workers.leader import Scheduler

log = logging.getLogger(__name__)

PARENT_PID_ENV = "CROSSDOCK_PARENT_PID"
"""Set for a worker started by :func:`start_worker`: the pid whose death ends the worker."""
WORKER_MODULE = "crossdock.workers.worker"
WORKER_STOP_SECONDS = 3.0
SCHEDULER_JOIN_SECONDS = 2.0
RESTART_LIMIT, RESTART_WINDOW = 5, 60.0
QUEUE_FOLLOW_SECONDS = 20.0
"""How long a running worker has to confirm a queue the config in force added before it is
started again with it (a worker that is busy starting does not answer remote control)."""


class GaveUp(CrossdockError):
    """A part of the service kept dying; ``crossdock up`` exits non-zero with this line."""


class AlreadyRunning(CrossdockError):
    def __init__(self, pid: int | None, state_dir: Path):
        super().__init__(f"crossdock up is already running (pid {pid or '?'}) on the state directory {state_dir};"
                         " stop it first, or set CROSSDOCK_STATE_DIR to another directory")
        self.pid = pid


# --- the worker process -------------------------------------------------------------------------
def worker_queues(rt: Runtime) -> str:
    """The dispatch queues of every backend kind the config in force uses (and local's)."""
    kinds = sorted({p.backend for p in rt.config.pools.values()} | {"local"})
    return ",".join(queue_for(k) for k in kinds)


def start_worker(rt: Runtime, concurrency: int, logfile: Path | None = None,
                 loglevel: str = "WARNING", queues: str | None = None, nodename: str | None = None) -> subprocess.Popen:
    """A Celery worker for every backend queue the config uses (or ``queues``), in its own
    session, that dies with this process."""
    argv = [sys.executable, "-m", "celery", "-A", WORKER_MODULE, "--quiet", "worker",  # --quiet: no banner
            "-Q", queues or worker_queues(rt), "-c", str(concurrency), "-P", "prefork", "--without-gossip",
            "--without-mingle", "--loglevel", loglevel,
            *(["-n", nodename] if nodename else [])]
    env = {**rt.child_env(), PARENT_PID_ENV: str(os.getpid())}
    out = open(logfile, "ab") if logfile else None
    try:
        return subprocess.Popen(argv, env=env, stdout=out, stderr=out, stdin=subprocess.DEVNULL,
                                start_new_session=True)
    finally:
        if out:
            out.close()


def _killpg(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def stop_workers(procs: Sequence[subprocess.Popen], timeout: float = WORKER_STOP_SECONDS) -> list[int]:
    """Celery's warm shutdown (finish the running task) for all of ``procs`` at once, within one
    ``timeout``, then SIGKILL of each group; returns the pids that had to be killed. A warm
    shutdown waits on a broker that is away for as long as it is away, and an idle prefork
    worker spends ~4 s joining its pool's threads: killing it is harmless (tasks are
    acknowledged late and idempotent, so a killed one is simply delivered again)."""
    live = [p for p in procs if p.poll() is None]
    for proc in live:  # the main process only: it lets its pool children finish their task
        try:
            os.kill(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + timeout
    killed = []
    for proc in live:
        try:
            proc.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            killed.append(proc.pid)
    for proc in procs:
        _killpg(proc.pid, signal.SIGKILL)  # the worker, or pool children it left
        proc.wait()
    if killed:
        log.info("Celery worker(s) %s not stopped after %.0fs; killed (their tasks, acknowledged late, are"
                 " delivered again)", ", ".join(map(str, killed)), timeout)
    return killed


def stop_worker(proc: subprocess.Popen, timeout: float = WORKER_STOP_SECONDS) -> None:
    """:func:`stop_workers` for one worker."""
    stop_workers([proc], timeout)


def watch_parent(poll: float = 0.5, grace: float = WORKER_STOP_SECONDS) -> None:
    """In a worker started by :func:`start_worker`: stop this process group once the parent is
    gone (the worker is reparented). Returns at once elsewhere."""
    try:
        parent = int(os.environ[PARENT_PID_ENV])
    except (KeyError, ValueError):
        return

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(poll)
        log.warning("crossdock: the process that started this worker (pid %s) is gone; stopping", parent)
        os.kill(os.getpid(), signal.SIGTERM)  # warm shutdown: the pool finishes its tasks
        time.sleep(grace)
        _killpg(os.getpgrp(), signal.SIGKILL)

    threading.Thread(target=watch, name="watch-parent", daemon=True).start()


def is_worker(pid: int, state_dir: Path) -> bool:
    """Whether ``pid`` is a live Celery worker of this state directory (not a reused pid)."""
    try:
        proc = Path(f"/proc/{pid}")
        return (WORKER_MODULE.encode() in (proc / "cmdline").read_bytes()
                and f"CROSSDOCK_STATE_DIR={state_dir}\0".encode() in (proc / "environ").read_bytes())
    except OSError:
        return False


# --- one up per state directory -------------------------------------------------------------------
class UpLock:
    """``state_dir/up.pid``: locked (flock) while an ``up`` runs; holds its pid and its workers'."""

    def __init__(self, state_dir: Path):
        self.path = state_dir / "up.pid"
        self.fd: int | None = None

    def acquire(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise AlreadyRunning(self.read().get("pid"), self.path.parent) from None
        self.fd = fd
        left = [p for p in self.read().get("workers", []) if is_worker(p, self.path.parent)]
        for pid in left:  # an up that was killed: its worker stops by itself within a second or so
            log.warning("stopping worker %s left by a previous crossdock up", pid)
            _killpg(pid, signal.SIGKILL)
        deadline = time.monotonic() + 5
        while any(is_worker(p, self.path.parent) for p in left) and time.monotonic() < deadline:
            time.sleep(0.05)
        self.record([])

    def read(self) -> dict[str, Any]:
        try:
            return json.loads(self.path.read_text() or "{}")
        except (OSError, ValueError):
            return {}

    def record(self, workers: list[int]) -> None:
        if self.fd is None:
            return
        data = json.dumps({"pid": os.getpid(), "workers": workers}).encode()
        os.ftruncate(self.fd, 0)
        os.pwrite(self.fd, data, 0)

    def release(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def holder(self) -> int | None:
        """The pid of the ``up`` holding the lock, None when none does."""
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except OSError:
            return None
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return self.read().get("pid") or -1
        finally:
            os.close(fd)
        return None


# --- the service ----------------------------------------------------------------------------------
class Restarts:
    """Counts restarts of one part; :class:`GaveUp` past ``limit`` within ``window`` seconds."""

    def __init__(self, what: str, limit: int = RESTART_LIMIT, window: float = RESTART_WINDOW):
        self.what, self.limit, self.window = what, limit, window
        self.times: deque[float] = deque()
        self.total = 0

    def note(self) -> None:
        now = time.monotonic()
        while self.times and now - self.times[0] > self.window:
            self.times.popleft()
        if len(self.times) >= self.limit:
            raise GaveUp(f"{self.what} died {len(self.times) + 1} times within {self.window:.0f}s; giving up")
        self.times.append(now)
        self.total += 1


class Part(Protocol):
    """Another part a face hands the service to keep running (the multi-user socket server)."""

    name: str

    def start(self) -> None: ...

    def alive(self) -> bool: ...

    def report(self) -> dict[str, Any]: ...

    def stop(self) -> None: ...


class Service:
    """The scheduler loop in a thread, a Celery worker process, (``embedded_redis``) the Redis of
    the state directory and any other ``parts``, kept running by :meth:`check` and stopped
    together by :meth:`stop`.

    The worker's queues follow the config in force: a config applied while ``up`` runs that adds
    a backend kind (a first Slurm pool) has the worker consume that kind's queue too, through
    Celery's remote control (``add_consumer``, confirmed by the worker); one that does not confirm
    within ``QUEUE_FOLLOW_SECONDS`` is started again with every queue. A kind the config drops
    stays consumed until the next start (cancels of its jobs still go through it)."""

    def __init__(self, rt: Runtime, workers: int = 2, scheduler: bool = True, logfile: Path | None = None,
                 embedded_redis: bool = False, lock: UpLock | None = None, parts: Sequence[Part] = (),
                 router: bool = True):
        self.rt, self.concurrency, self.logfile, self.lock = rt, workers, logfile, lock
        self.embedded_redis = embedded_redis
        self.stop_event = threading.Event()
        self.started_at = time.time()
        self.restarts = {part: Restarts(what) for part, what in
                         (("scheduler", "the scheduler loop"), ("worker", "the Celery worker"),
                          ("redis", "the embedded Redis"))}
        self.parts = list(parts)
        if router:  # the local services' router (crossdock.workers.router), where a pool is local
            from crossdock.workers.routes import router_part

            self.parts.extend(router_part(rt))
        self.restarts.update({part.name: Restarts(f"the {part.name} part") for part in self.parts})
        self.worker: subprocess.Popen | None = None
        self.nodename = f"up-{os.getpid()}@{socket.gethostname()}"
        """The worker's Celery node name: remote control reaches this worker and no other."""
        self.queues: set[str] = set()
        """The queues the worker consumes: those it was started with and those it confirmed since."""
        self.queues_missing_since: float | None = None
        self.app = app = make_app(rt.redis_url)  # connects on first use
        self.thread: threading.Thread | None = None
        self.fleet = None
        self.scheduler = None
        if scheduler:
            from crossdock.workers.fleet import LocalFleet, celery_busy  # it starts workers as this module does

            self.fleet = LocalFleet(rt, app, logfile, on_change=self._record_pids)
            self.scheduler = Scheduler(rt, celery_sender(app), fleets={"local": self.fleet}, busy=celery_busy(app))
        upgrade.ensure_format(rt.store)  # before anything runs a job: the specs an earlier release stored, sealed
        for part in self.parts:  # first: one that cannot start (its socket is another's) leaves nothing running
            part.start()
        if workers:
            self._start_worker()
        if self.scheduler:
            self._start_scheduler()

    def _start_worker(self) -> None:
        queues = worker_queues(self.rt)
        self.worker = start_worker(self.rt, self.concurrency, self.logfile, queues=queues, nodename=self.nodename)
        self.queues, self.queues_missing_since = set(queues.split(",")), None
        self._record_pids()

    def missing_queues(self) -> set[str]:
        """The queues the config in force needs that the worker does not consume yet."""
        return set(worker_queues(self.rt).split(",")) - self.queues if self.worker is not None else set()

    def _follow_queues(self) -> None:
        """Have the running worker consume the queues the config in force added."""
        missing = self.missing_queues()
        if not missing:
            self.queues_missing_since = None
            return
        now = time.monotonic()
        self.queues_missing_since = self.queues_missing_since or now
        try:
            confirmed = add_queues(self.app, self.nodename, missing)
        except Exception as exc:  # the broker away: asked again at the next check
            log.warning("asking worker %s to consume %s failed: %s", self.nodename, ", ".join(sorted(missing)), exc)
            confirmed = set()
        if confirmed:
            self.queues |= confirmed
            log.info("worker %s now consumes %s (the config in force uses it)", self.nodename,
                     ", ".join(sorted(confirmed)))
        if missing - confirmed and now - self.queues_missing_since > QUEUE_FOLLOW_SECONDS:
            log.warning("worker %s did not take %s within %.0fs; starting it again with every queue", self.nodename,
                        ", ".join(sorted(missing - confirmed)), QUEUE_FOLLOW_SECONDS)
            assert self.worker is not None
            stop_worker(self.worker)
            self._start_worker()

    def _record_pids(self) -> None:
        if self.lock:
            self.lock.record(([self.worker.pid] if self.worker else []) + (self.fleet.pids() if self.fleet else []))

    def _start_scheduler(self) -> None:
        assert self.scheduler is not None
        self.thread = threading.Thread(target=self.scheduler.run, args=(self.stop_event,), daemon=True,
                                       name="scheduler")
        self.thread.start()

    def check(self) -> None:
        """Restart whatever died; :class:`GaveUp` when one part keeps dying."""
        if self.embedded_redis and embedded.pid(self.rt.settings.state_dir) is None:
            self.restarts["redis"].note()
            log.error("the embedded Redis is gone; starting it again (its append-only file keeps the jobs)")
            try:
                embedded.ensure_running(self.rt.settings.state_dir)
            except (CrossdockError, OSError, subprocess.SubprocessError) as exc:
                raise GaveUp(f"the embedded Redis could not be started again: {exc}") from None
        if self.thread is not None and not self.thread.is_alive():
            self.restarts["scheduler"].note()
            log.error("the scheduler loop ended (%s); starting it again",
                      self.scheduler.parts["loop"].last_error if self.scheduler else "?")
            self._start_scheduler()
        if self.worker is not None and self.worker.poll() is not None:
            self.restarts["worker"].note()
            log.error("the Celery worker %s exited with status %s; starting another", self.worker.pid,
                      self.worker.returncode)
            _killpg(self.worker.pid, signal.SIGKILL)  # pool children it may have left
            self._start_worker()
        elif self.worker is not None:
            self._follow_queues()
        if self.fleet is not None:
            try:
                self.fleet.check()
            except Exception as exc:  # the broker away: the fleet is checked again in half a second
                log.warning("checking the local fleet failed: %s", exc)
            self._record_pids()
        for part in self.parts:
            if not part.alive():
                self.restarts[part.name].note()
                log.error("the %s part stopped; starting it again", part.name)
                part.start()

    def supervise(self, done: threading.Event, every: float = 0.5) -> str | None:
        """Check and report every ``every`` s until ``done``; the line saying why if it gives up."""
        while not done.wait(every):
            try:
                self.check()
            except GaveUp as exc:
                return str(exc)
            try:
                self.write_report()
            except OSError as exc:  # a full disk must not stop the service
                log.warning("could not write %s: %s", self.rt.settings.state_dir / "up.json", exc)
        return None

    def report(self) -> dict[str, Any]:
        """This service's parts, as ``crossdock health`` reads them (``state_dir/up.json``)."""
        state_dir = self.rt.settings.state_dir
        worker = None if self.worker is None else {
            "pid": self.worker.pid, "alive": self.worker.poll() is None, "queues": ",".join(sorted(self.queues)),
            "missing": ",".join(sorted(self.missing_queues())), "node": self.nodename,
            "restarts": self.restarts["worker"].total}
        scheduler = None if self.scheduler is None else {
            **self.scheduler.report(), "thread_alive": bool(self.thread and self.thread.is_alive()),
            "restarts": self.restarts["scheduler"].total}
        return {"pid": os.getpid(), "started_at": self.started_at, "updated_at": time.time(),
                "state_dir": str(state_dir), "config": str(self.rt.settings.config_path),
                "redis": {"url": embedded.shown(self.rt.redis_url), "embedded": self.embedded_redis,
                          "pid": embedded.pid(state_dir) if self.embedded_redis else None,
                          "restarts": self.restarts["redis"].total},
                "workers": ([worker] if worker else []) + (self.fleet.report() if self.fleet else []),
                "scheduler": scheduler,
                **{part.name: {**part.report(), "restarts": self.restarts[part.name].total} for part in self.parts}}

    def write_report(self) -> None:
        path = self.rt.settings.state_dir / "up.json"
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(self.report()))
        os.replace(tmp, path)

    def stop(self) -> None:
        """Bounded: the loop stops at its next wait (a store call under way may take redis-py's
        own retries, ~5 s, so the thread, a daemon, is not waited for longer than
        ``SCHEDULER_JOIN_SECONDS``), the workers' bounded warm shutdown, all at once, then the
        local backend's spawner of this state directory (it would otherwise wait out its idle time)."""
        self.stop_event.set()
        for part in self.parts:
            part.stop()
        stop_workers(([self.worker] if self.worker else []) + (self.fleet.release() if self.fleet else []))
        if self.thread:
            self.thread.join(SCHEDULER_JOIN_SECONDS)
        spawner.stop(self.rt.settings.state_dir)  # the local jobs it started run on, detached
        if self.lock:
            self.lock.record([])
