"""Follow placed jobs to their end and heal both ways (the leader runs this between cycles).

A pass reads, backend by backend, what the rules of :mod:`crossdock.queue.reconcile` need, hands
it to :func:`~crossdock.queue.reconcile.reconcile` and carries out the actions it returns, in
order. Backends with a ``heartbeat`` are read for their watchers' heartbeats, the dispatch claims
and, for a silent job, what the backend tells of its watcher (``WatchedOutsideStore``); other
backends are asked for the ``status`` of every placed job in one call, and the state changes are
recorded in one MULTI (``JobStore.record_statuses``). Backends that ``SweepsOrphans`` have their
leftovers removed.
"""

from __future__ import annotations

import logging
import time
from typing import Callable

from crossdock.backends.registry import Backends
from crossdock.observe import metrics
from crossdock.queue.errors import LeaseLost
from crossdock.queue.models import Job
from crossdock.queue import reconcile as rules
from crossdock.queue.ports import BackendError, FollowerStore, StopsLost, SweepsOrphans, WatchedOutsideStore
from crossdock.queue.reconcile import (DISPATCHER_SILENT_SECONDS, LOST_AFTER_SECONDS, RESEND_AFTER_SECONDS, Limits,
                                       MarkLost, Resend, Seen, Settle, SettleLeftEnd, Update, Watcher)
from crossdock.queue.states import JobState, Reason
from crossdock.workers.app import SendTask
from crossdock.workers.replica_follow import record_replicas

log = logging.getLogger(__name__)

ORPHAN_SWEEP_SECONDS = 60.0
UNAVAILABLE = (BackendError, ImportError, OSError)


def limits() -> Limits:
    """The rules' timings, read at each pass from this module's constants (a test may shorten one)."""
    return Limits(RESEND_AFTER_SECONDS, LOST_AFTER_SECONDS, DISPATCHER_SILENT_SECONDS)


class Follower:
    def __init__(self, store: FollowerStore, backends: Backends, send: SendTask, holder: str,
                 kinds: Callable[[], set[str]], clock: Callable[[], float] = time.time,
                 lease: Callable[[], str | None] = lambda: None):
        self.store, self.backends, self.send, self.holder = store, backends, send, holder
        self.clock = clock
        self.lease = lease
        """The leader's lease that the pass's writes are fenced by (None: not fenced)."""
        """Epoch seconds: placement ages and silences are measured on it (a simulation drives it)."""
        self.kinds = kinds
        """The backend kinds the config's pools name (orphans are swept there even with nothing active)."""
        self._next_orphan_sweep = 0.0
        self._silent: dict[tuple[int, int], float] = {}
        """(job id, attempt) of a claimed dispatch -> when its task was first seen not alive."""

    def reconcile(self) -> None:
        """Resend lost dispatches, mark jobs whose watcher vanished, follow every backend."""
        active = self.store.get_many(self.store.active_ids())
        now = self.clock()
        by_backend: dict[str, list[Job]] = {}
        for job in active:
            by_backend.setdefault(job.backend or "local", []).append(job)
        placed = {(j.id, j.attempts) for j in active}
        self._silent = {k: t for k, t in self._silent.items() if k in placed}
        try:
            for kind, jobs in by_backend.items():
                try:
                    heartbeat = self.backends.capabilities(kind).heartbeat
                except UNAVAILABLE as exc:
                    log.warning("backend %s unavailable: %s", kind, exc)
                    continue
                if heartbeat:
                    self._follow(self._heartbeats(kind, jobs, now))
                else:
                    self._by_status(kind, jobs)
        except LeaseLost as exc:  # paused past the lease: the next leader follows these jobs
            log.warning("%s: follow pass given up: %s", self.holder, exc)
            return
        self._sweep_orphans(by_backend)

    def _by_status(self, kind: str, jobs: list[Job]) -> None:
        """One status pass over these jobs of ``kind``: read, decide, act."""
        seen = self._statuses(kind, jobs)
        if seen is not None:
            self._follow(seen)

    # --- read --------------------------------------------------------------------------------
    def _heartbeats(self, kind: str, jobs: list[Job], now: float) -> Seen:
        """The heartbeats, the claims of jobs not running yet, and what the backend tells of the
        watchers of claimed jobs that stopped beating."""
        store = self.store
        alive = store.alive([j.id for j in jobs])
        claims = {j.id: store.dispatch_claimed(j.id, j.attempts) for j in jobs if j.state is not JobState.RUNNING}
        silent = [j for j in jobs if not alive[j.id] and (j.state is JobState.RUNNING or claims[j.id])]
        watchers = {j.id: w for j in silent if (w := self._watcher(kind, j)) is not None}
        return Seen(kind, jobs, now, heartbeats=alive, claims=claims, watchers=watchers, silent_since=self._silent)

    def _watcher(self, kind: str, job: Job) -> Watcher | None:
        """What the backend tells of a silent job's watcher; None where it leaves no traces outside the store."""
        try:
            target = self.backends(kind)
            if not isinstance(target, WatchedOutsideStore):
                return None
            return Watcher.ALIVE if target.watcher_alive(job) else Watcher.DEAD
        except UNAVAILABLE as exc:
            log.warning("job %s: cannot tell whether its watcher lives (%s); not marking it lost", job.id, exc)
            return Watcher.UNKNOWN

    def _statuses(self, kind: str, jobs: list[Job]) -> Seen | None:
        """The backend's report (None: it is away this pass), the stop requests standing on the
        attempts it reports ended, and the claims of the jobs it does not report."""
        store = self.store
        try:
            with metrics.backend_call(kind, "status"):
                statuses = self.backends(kind).status(jobs)
        except UNAVAILABLE as exc:
            log.warning("status of %s unavailable: %s", kind, exc)
            return None
        record_replicas(store, jobs, statuses)  # readiness and drain of service replicas
        now = self.clock()
        # The stop requests standing when these attempts ended decide how they ended (one round trip).
        ended = [i for i, st in statuses.items() if st.state.terminal or st.state is JobState.PREEMPTED]
        stops = store.stop_requests(ended) if ended else {}
        unreported = [j for j in jobs if j.id not in statuses and j.state is not JobState.RUNNING]
        claims = {j.id: store.dispatch_claimed(j.id, j.attempts) for j in unreported}
        dispatchers = {j.id: store.dispatcher_alive(j.id, j.attempts) for j in unreported if claims[j.id]}
        return Seen(kind, jobs, now, statuses=statuses, claims=claims, dispatchers=dispatchers, stops=stops,
                    silent_since=self._silent)

    # --- act ---------------------------------------------------------------------------------
    def _follow(self, seen: Seen) -> None:
        plan = rules.reconcile(seen, limits())
        self._silent = plan.silent_since
        changes: list[Settle | Update] = []
        for action in plan.actions:
            match action:
                case Resend():
                    self._resend(action, seen.kind)
                case MarkLost():
                    self._lose(action, seen.kind)
                case SettleLeftEnd():
                    self._settle_left_end(action, seen.kind)
                case Settle() | Update():
                    changes.append(action)
        # One MULTI for every change of the pass (a 1,000-task array finishes together): a pass cut
        # short by a store outage lands whole or not at all, and the next pass reads the backend again.
        for done in self.store.record_statuses(changes, actor=seen.kind, lease=self.lease()):
            if done.moved and done.state is not None:
                log.info("job %s: %s -> %s", done.job_id, done.was, done.state.value)

    def _resend(self, resend: Resend, kind: str) -> None:
        job = resend.job
        log.warning("job %s: dispatch not picked up in %.0fs; resending", job.id, resend.waited)
        metrics.dispatch_resent(kind)
        self.store.retry_dispatch(job.id)
        self.send("crossdock.dispatch", [job.id, job.attempts], kind)

    def _settle_left_end(self, settle: SettleLeftEnd, kind: str) -> None:
        """A dead watcher's end, if it left one, is recorded instead of the job being lost (an
        attempt that exited 0 never runs again)."""
        job = settle.job
        try:
            target = self.backends(kind)
            settled = target.settle(job) if isinstance(target, WatchedOutsideStore) else None
        except UNAVAILABLE as exc:
            log.warning("job %s: cannot tell whether its watcher lives (%s); not marking it lost", job.id, exc)
            return
        if settled is not None:
            log.info("job %s: %s, recorded from what its dead watcher left", job.id, settled.value)
        elif settle.otherwise is not None:
            self._lose(settle.otherwise, kind)

    def _lose(self, lost: MarkLost, kind: str) -> None:
        job = lost.job
        log.warning("job %s lost: %s", job.id, lost.why)
        try:
            target = self.backends(kind)
            if isinstance(target, StopsLost):
                target.kill_orphan(job)
        except UNAVAILABLE as exc:
            log.warning("job %s: could not stop what is left of it: %s", job.id, exc)
        # A user's cancel wins, as for an attempt its backend reports ended (``stopped_outcome``):
        # the job ends CANCELLED and is not requeued (a cancel landing after this read stops the requeue).
        cancelled = job.cancel_requested
        # lost and requeued land together, or neither; only while this leader holds the lease
        with self.store.pipeline(transaction=True, lease=self.lease()) as pipe:
            self.store.transition(job.id, JobState.CANCELLED if cancelled else JobState.NODE_FAIL,
                                  attempt=job.attempts, reason=Reason.CANCELLED_BY_USER if cancelled else Reason.NODE_LOST,
                                  fields={"end_time": lost.at}, actor=self.holder, pipe=pipe)
            if lost.requeue and not cancelled:
                self.store.requeue(job.id, actor=self.holder, reason=Reason.NODE_LOST, attempt=job.attempts,
                                   unless="cancel_requested", only_from=(JobState.NODE_FAIL,), pipe=pipe)
            pipe.execute()

    def _sweep_orphans(self, by_backend: dict[str, list[Job]]) -> None:
        """Remove backend objects left by a crash or a requeue that belong to no active attempt."""
        now = time.monotonic()
        if now < self._next_orphan_sweep:
            return
        self._next_orphan_sweep = now + ORPHAN_SWEEP_SECONDS
        for kind in sorted(set(by_backend) | self.kinds()):
            try:
                target = self.backends(kind)
                if isinstance(target, SweepsOrphans):
                    for orphan in target.delete_orphans(by_backend.get(kind, [])):
                        log.warning("deleted orphaned %s object %s", kind, orphan.ref)
            except UNAVAILABLE as exc:
                log.warning("orphan sweep of %s failed: %s", kind, exc)
