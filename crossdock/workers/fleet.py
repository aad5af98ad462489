"""The local worker fleet (``elastic.fleet.backend: local``), run by ``crossdock up``.

A local fleet replica is one Celery worker process of concurrency 1 that ``crossdock up`` starts
beside its own worker, serving the dispatch queues of the elastic queue's backends
(``crossdock.<kind>`` for every backend its pools use), named ``fleet-<fleet>-<up pid>-<n>@<host>``
(the fleet is named after its queue unless the config names it). It dies with ``up`` as the main
worker does. Dispatch is not routed per queue: a replica takes any dispatch task of those
backends, so the fleet is the dispatch capacity that follows the queue's backlog.

Scale-out starts processes. Scale-in never stops a replica that runs or holds a task:

1. the replicas are asked, through Celery's remote control (``inspect active`` and ``reserved``,
   answered by each worker itself), which are idle; one that does not answer counts as busy;
2. the chosen idle ones stop consuming (``cancel_consumer``): they take no new task;
3. a draining replica that then answers with no active and no reserved task (at once, or at a
   later pass when a task reached it between 1 and 2) gets SIGTERM: Celery's warm shutdown, with
   nothing left to finish. A draining replica no longer counts as one of the fleet's.

:func:`celery_busy` answers, for any fleet, which workers run a task now: the host part of their
Celery node name (a pod's name on Kubernetes, where the hostname is the pod's).
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Collection

from celery import Celery

from crossdock.runtime import Runtime
from crossdock.workers.app import queue_for
from crossdock.workers.consumers import add_queues
from crossdock.workers.supervision import start_worker, stop_workers, worker_queues

log = logging.getLogger(__name__)

INSPECT_SECONDS = 1.0
"""How long a replica has to answer (it usually does in milliseconds; a silent one counts as busy)."""
BROADCAST_SECONDS = 0.5
"""How long :func:`celery_busy` collects answers (a broadcast waits its whole timeout)."""


def celery_busy(app: Celery, timeout: float = BROADCAST_SECONDS) -> Callable[[], set[str]]:
    """A ``busy`` for the autoscaler: every worker that has an active or reserved task, by node
    name and by the host part of it."""

    def busy() -> set[str]:
        out: set[str] = set()
        inspect = app.control.inspect(timeout=timeout)
        for answer in (inspect.active() or {}, inspect.reserved() or {}):
            for node, tasks in answer.items():
                if tasks:
                    out |= {node, node.partition("@")[2]}
        return out

    return busy


@dataclass
class Replica:
    nodename: str
    proc: subprocess.Popen
    queues: str
    draining: bool = False
    stopping: bool = False


class LocalFleet:
    """``ScalesFleet`` for the local fleets of one ``crossdock up``."""

    def __init__(self, rt: Runtime, app: Celery, logfile: Path | None = None,
                 on_change: Callable[[], None] | None = None, loglevel: str = "WARNING"):
        self.rt, self.app, self.logfile, self.on_change, self.loglevel = rt, app, logfile, on_change, loglevel
        self.fleets: dict[str, list[Replica]] = {}
        self._seq = 0
        self._lock = threading.Lock()

    # --- ScalesFleet ------------------------------------------------------------------------
    def fleet_replicas(self, fleet: Any) -> int:
        with self._lock:
            return len(self._live(fleet.name))

    def scale_fleet(self, fleet: Any, replicas: int, busy: Collection[str] = frozenset()) -> int:
        with self._lock:
            self._settle(fleet.name)
            live = self._live(fleet.name)
            if replicas > len(live):
                for _ in range(replicas - len(live)):
                    self._start(fleet.name)
            elif replicas < len(live):
                tasks = self._tasks(live)
                idle = [r for r in reversed(live) if tasks.get(r.nodename) == 0 and r.nodename not in busy]
                for r in idle[:len(live) - replicas]:
                    self._drain(r)
                self._settle(fleet.name)
            if self.on_change:
                self.on_change()
            return len(self._live(fleet.name))

    # --- for the supervisor -------------------------------------------------------------------
    def check(self) -> None:
        """Forget replicas that exited (a crash: the next pass scales up again); stop drained ones;
        have the others consume the queues the config in force added to their queue's backends."""
        with self._lock:
            for name in list(self.fleets):
                self._settle(name)
                self._follow_queues(name)

    def pids(self) -> list[int]:
        return [r.proc.pid for reps in self.fleets.values() for r in reps]

    def report(self) -> list[dict[str, Any]]:
        """The replicas as ``crossdock health`` checks workers; those stopping on purpose are left out."""
        return [{"pid": r.proc.pid, "alive": r.proc.poll() is None, "queues": r.queues, "restarts": 0,
                 "fleet": name, "draining": r.draining}
                for name, reps in self.fleets.items() for r in reps if not r.stopping]

    def stop(self) -> None:
        stop_workers(self.release())

    def release(self) -> list[subprocess.Popen]:
        """Forget every replica and hand back their processes, for the caller to stop (with
        other workers, under one deadline)."""
        with self._lock:
            procs = [r.proc for reps in self.fleets.values() for r in reps]
            self.fleets.clear()
        return procs

    # --- inside -------------------------------------------------------------------------------
    def _live(self, name: str) -> list[Replica]:
        return [r for r in self.fleets.get(name, []) if not r.draining and r.proc.poll() is None]

    def _queues(self, name: str) -> str:
        queue = self.rt.config.queues.get(name)
        if queue is None:
            return worker_queues(self.rt)
        return ",".join(sorted({queue_for(self.rt.config.pools[p].backend) for p in queue.pools}))

    def _start(self, name: str) -> None:
        self._seq += 1
        nodename = f"fleet-{name}-{os.getpid()}-{self._seq}@{socket.gethostname()}"
        queues = self._queues(name)
        proc = start_worker(self.rt, 1, self.logfile, self.loglevel, queues=queues, nodename=nodename)
        self.fleets.setdefault(name, []).append(Replica(nodename, proc, queues))
        log.info("fleet %s: started replica %s (pid %s)", name, nodename, proc.pid)

    def _follow_queues(self, name: str) -> None:
        wanted = set(self._queues(name).split(","))
        for r in self._live(name):
            missing = wanted - set(r.queues.split(","))
            if missing and (added := add_queues(self.app, r.nodename, missing, INSPECT_SECONDS)):
                r.queues = ",".join(sorted(set(r.queues.split(",")) | added))
                log.info("fleet %s: replica %s now consumes %s", name, r.nodename, ", ".join(sorted(added)))

    def _tasks(self, replicas: list[Replica]) -> dict[str, int]:
        """Node name → its active and reserved tasks, for the replicas that answered."""
        names = [r.nodename for r in replicas]
        if not names:
            return {}
        inspect = self.app.control.inspect(destination=names, timeout=INSPECT_SECONDS, limit=len(names))
        active, reserved = inspect.active() or {}, inspect.reserved() or {}
        return {n: len(active[n]) + len(reserved.get(n, [])) for n in active if n in reserved}

    def _drain(self, r: Replica) -> None:
        for q in r.queues.split(","):
            self.app.control.cancel_consumer(q, destination=[r.nodename], reply=True, timeout=INSPECT_SECONDS)
        r.draining = True
        log.info("fleet: replica %s takes no new task; it stops once idle", r.nodename)

    def _settle(self, name: str) -> None:
        reps = self.fleets.get(name, [])
        gone = [r for r in reps if r.proc.poll() is not None]
        for r in gone:
            if not r.draining:
                log.warning("fleet %s: replica %s exited (status %s)", name, r.nodename, r.proc.returncode)
            reps.remove(r)
        draining = [r for r in reps if r.draining and not r.stopping]
        tasks = self._tasks(draining)
        for r in draining:
            if tasks.get(r.nodename) == 0:
                os.kill(r.proc.pid, signal.SIGTERM)  # warm shutdown, nothing to finish
                r.stopping = True
                log.info("fleet %s: stopping idle replica %s", name, r.nodename)
