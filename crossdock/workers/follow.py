"""Follow placed jobs to their end and heal both ways (the leader runs this between cycles).

Backends with a ``heartbeat`` are followed by their watcher's heartbeat: a SCHEDULED job whose
dispatch nobody picked up is sent again, one whose watcher never started or stopped reporting is
lost (NODE_FAIL, requeued when its spec allows) — unless the backend tells that the watcher lives
and was only cut off from the store, or records the end it left (``WatchedOutsideStore``). Other
backends are asked for the ``status`` of every placed job in one call; state changes are recorded
in one MULTI; jobs the backend no longer knows are lost or resent. Backends that ``SweepsOrphans`` have their leftovers removed.
"""

from __future__ import annotations

import logging
import time
from typing import Callable

from crossdock.backends.redis_store.store import utcnow
from crossdock.backends.registry import Backends
from crossdock.observe import metrics
from crossdock.queue.models import REQUEUED, Job
from crossdock.queue.ports import BackendError, StopsLost, SweepsOrphans, WatchedOutsideStore
from crossdock.queue.states import JobState, Reason, stopped_outcome
from crossdock.workers.app import SendTask
from crossdock.workers.replica_follow import record_replicas

log = logging.getLogger(__name__)

RESEND_AFTER_SECONDS = 15.0
LOST_AFTER_SECONDS = 60.0
DISPATCHER_SILENT_SECONDS = 30.0
"""A claimed dispatch whose task stopped refreshing its liveness (seen so by this follower for
this long: a live task refreshes within seconds of a store outage's end) and that left nothing the
backend knows never submitted: its worker died between the claim and the submit."""
ORPHAN_SWEEP_SECONDS = 60.0
UNAVAILABLE = (BackendError, ImportError, OSError)


class Follower:
    def __init__(self, store, backends: Backends, send: SendTask, holder: str, kinds: Callable[[], set[str]]):
        self.store, self.backends, self.send, self.holder = store, backends, send, holder
        self.kinds = kinds
        """The backend kinds the config's pools name (orphans are swept there even with nothing active)."""
        self._next_orphan_sweep = 0.0
        self._silent: dict[tuple[int, int], float] = {}
        """(job id, attempt) of a claimed dispatch -> when its task was first seen not alive."""

    def reconcile(self) -> None:
        """Resend lost dispatches, mark jobs whose watcher vanished, follow every backend."""
        active = self.store.get_many(self.store.active_ids())
        now = time.time()
        by_backend: dict[str, list[Job]] = {}
        for job in active:
            by_backend.setdefault(job.backend or "local", []).append(job)
        placed = {(j.id, j.attempts) for j in active}
        self._silent = {k: t for k, t in self._silent.items() if k in placed}
        for kind, jobs in by_backend.items():
            try:
                heartbeat = self.backends.capabilities(kind).heartbeat
            except UNAVAILABLE as exc:
                log.warning("backend %s unavailable: %s", kind, exc)
                continue
            if heartbeat:
                self._by_heartbeat(kind, jobs, now)
            else:
                self._by_status(kind, jobs)
        self._sweep_orphans(by_backend)

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

    def _dispatcher_gone(self, job: Job, now: float) -> bool:
        key = (job.id, job.attempts)
        if self.store.dispatcher_alive(job.id, job.attempts):
            self._silent.pop(key, None)
            return False
        return now - self._silent.setdefault(key, now) > DISPATCHER_SILENT_SECONDS

    def _resend(self, job: Job, kind: str) -> None:
        metrics.dispatch_resent(kind)
        self.store.retry_dispatch(job.id)
        self.send("crossdock.dispatch", [job.id, job.attempts], kind)

    def _by_heartbeat(self, kind: str, jobs: list[Job], now: float) -> None:
        alive = self.store.alive([j.id for j in jobs])
        for job in jobs:
            scheduled = job.scheduled_time.timestamp() if job.scheduled_time else now
            claimed = job.state is JobState.RUNNING or self.store.dispatch_claimed(job.id, job.attempts)
            if not claimed:
                if now - scheduled > RESEND_AFTER_SECONDS:
                    log.warning("job %s: dispatch not picked up in %.0fs; resending", job.id, now - scheduled)
                    self._resend(job, kind)
            elif alive[job.id] or self._only_silent(kind, job):
                continue
            elif job.state is JobState.RUNNING:
                self.lost(job, "its supervisor stopped reporting")
            elif now - scheduled > LOST_AFTER_SECONDS:
                self.lost(job, "dispatched but never started")

    def _only_silent(self, kind: str, job: Job) -> bool:
        """A watcher whose heartbeat expired is only cut off from the store (after an outage every
        heartbeat expires at once) while it lives; a dead one's end, if it left one, is recorded
        here instead of the job being lost (an attempt that exited 0 never runs again)."""
        try:
            target = self.backends(kind)
            if not isinstance(target, WatchedOutsideStore):
                return False
            if target.watcher_alive(job):
                return True
            settled = target.settle(job)
        except UNAVAILABLE as exc:
            log.warning("job %s: cannot tell whether its watcher lives (%s); not marking it lost", job.id, exc)
            return True
        if settled is not None:
            log.info("job %s: %s, recorded from what its dead watcher left", job.id, settled.value)
        return settled is not None

    def lost(self, job: Job, why: str) -> None:
        log.warning("job %s lost: %s", job.id, why)
        try:
            target = self.backends(job.backend or "local")
            if isinstance(target, StopsLost):
                target.kill_orphan(job)
        except UNAVAILABLE as exc:
            log.warning("job %s: could not stop what is left of it: %s", job.id, exc)
        with self.store.pipeline(transaction=True) as pipe:  # lost and requeued land together, or neither
            self.store.transition(job.id, JobState.NODE_FAIL, attempt=job.attempts, reason=Reason.NODE_LOST,
                                  fields={"end_time": utcnow()}, actor=self.holder, pipe=pipe)
            if job.spec.requeue:
                self.store.requeue(job.id, actor=self.holder, reason=Reason.NODE_LOST, attempt=job.attempts,
                                   only_from=(JobState.NODE_FAIL,), pipe=pipe)
            pipe.execute()

    def _by_status(self, kind: str, jobs: list[Job]) -> None:
        store = self.store
        try:
            with metrics.backend_call(kind, "status"):
                statuses = self.backends(kind).status(jobs)
        except UNAVAILABLE as exc:
            log.warning("status of %s unavailable: %s", kind, exc)
            return
        record_replicas(store, jobs, statuses)  # readiness and drain of service replicas
        now = time.time()
        # The stop requests standing when these attempts ended decide how they ended (one round trip).
        ended = [i for i, st in statuses.items() if st.state.terminal or st.state is JobState.PREEMPTED]
        stops = store.stop_requests(ended) if ended else {}
        changes: list[tuple[Job, JobState] | None] = []  # one entry per queued command
        # MULTI: a pass cut short by a store outage lands whole or not at all (the next pass reads
        # the backend again), so no end lands without its follow-up step.
        with store.pipeline(transaction=True) as pipe:
            for job in jobs:
                st = statuses.get(job.id)
                if st is None:
                    scheduled = job.scheduled_time.timestamp() if job.scheduled_time else now
                    claimed = store.dispatch_claimed(job.id, job.attempts)
                    if job.state is JobState.RUNNING or (job.backend_ref and now - scheduled > LOST_AFTER_SECONDS):
                        self.lost(job, f"{kind} no longer knows it")
                    elif claimed and self._dispatcher_gone(job, now):
                        # the backend holds nothing under this attempt's tag or name: the dispatch
                        # died between its claim and its submit, nobody will resend
                        self.lost(job, f"its dispatch task died, {kind} never got it")
                    elif not claimed and now - scheduled > RESEND_AFTER_SECONDS:
                        self._resend(job, kind)
                    continue
                if st.ref and not job.backend_ref:  # the dispatch's record of it was lost (a store outage)
                    store.update_if(job.id, (JobState.SCHEDULED, JobState.RUNNING), {"backend_ref": st.ref}, pipe=pipe)
                    changes.append(None)
                # Waiting inside the backend (Slurm PENDING, or requeued there by the backend itself) is
                # SCHEDULED for crossdock: the backend owns that attempt and will start it again.
                state = JobState.SCHEDULED if st.state is JobState.PENDING else st.state
                stop = stops.get(job.id)
                state, reason = stopped_outcome(state, st.reason, cancel=bool(stop and stop.cancel),
                                                preempt=bool(stop and stop.preempt))
                if state is job.state:
                    if st.reason and job.state is JobState.SCHEDULED and st.reason != job.reason:
                        store.update_if(job.id, (JobState.SCHEDULED,), {"reason": st.reason}, pipe=pipe)
                        changes.append(None)
                    continue
                fields = {"exit_code": st.exit_code, "nodes": list(st.nodes) or job.nodes}
                if st.signal is not None:
                    fields["signal"] = st.signal
                if state is JobState.RUNNING:
                    fields["start_time"] = utcnow()
                elif state.terminal or state is JobState.PREEMPTED:
                    fields["end_time"] = utcnow()
                # RUNNING -> SCHEDULED: the backend requeued the run itself; it starts the same attempt
                # again, and the run that ended is kept (sacct -D's REQUEUED row).
                again = job.state is JobState.RUNNING and state is JobState.SCHEDULED
                # One round trip for every change of the pass (a 1,000-task array finishes together).
                store.transition(job.id, state, fields=fields, reason=reason, actor=kind, attempt=job.attempts,
                                 ends_attempt=again, ended_as=(REQUEUED, "Requeued") if again else None,
                                 pipe=pipe)
                changes.append((job, state))
                if state is JobState.PREEMPTED:
                    stop = stops.get(job.id)
                    queued = store.settle_preempted(job.id, job.spec.requeue, actor=kind, reason=reason,
                                                    attempt=job.attempts, cancelled=bool(stop and stop.cancel),
                                                    pipe=pipe)
                    changes.extend([None] * queued)
                elif state is JobState.NODE_FAIL and job.spec.requeue:
                    # The backend lost this attempt's node (a Slurm node that failed to resume): a
                    # new attempt, as for a job whose watcher vanished (``lost``); a cancel wins.
                    store.requeue(job.id, actor=kind, reason=reason, attempt=job.attempts, unless="cancel_requested",
                                  only_from=(JobState.NODE_FAIL,), pipe=pipe)
                    changes.append(None)
            outcomes = pipe.execute()
        for change, outcome in zip(changes, outcomes):
            if change is None:
                continue
            (job, state), (ok, old) = change, outcome
            if ok:
                log.info("job %s: %s -> %s", job.id, old, state.value)
