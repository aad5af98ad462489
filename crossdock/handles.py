"""A submitted job's handle: a real :class:`concurrent.futures.Future`.

Nothing pushes a job's end to the client, so each client has one watcher thread that polls the
service for its handles' jobs (one round trip a pass, faster while jobs end, slower while none
does) and settles each handle's future when its job ends, through ``Future``'s own
``set_result``/``set_exception``: the standard library's ``concurrent.futures.wait`` and
``as_completed`` (whose waiters ``Future`` notifies), ``asyncio.wrap_future``, ``await handle``,
:func:`wait`, :func:`as_completed` and ``add_done_callback`` all see it. ``done()`` and
``result()`` also ask the service themselves. A Python job resolves to its return value or its
exception (with the remote traceback as a note); another job to its final :class:`Job` when it
completed, else to :class:`JobFailed`. ``cancel()`` cancels the job (pending or running) and, as
``Future.cancel``, returns True unless it had ended; the future is then cancelled.
"""

from __future__ import annotations

import asyncio
import concurrent.futures as cf
import logging
import os
import threading
import time
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator

from crossdock.pycall import decode_outcome
from crossdock.queue.errors import CrossdockError, PermissionDenied
from crossdock.queue.models import Job
from crossdock.queue.states import JobState
from crossdock.settings import user_id, user_name

if TYPE_CHECKING:
    from crossdock.client import Client

log = logging.getLogger(__name__)

POLL_SECONDS = 0.2
"""The watcher's pass interval right after a job ended or a handle came, and the least between
two passes; it grows to :data:`IDLE_POLL_SECONDS` while nothing ends."""
IDLE_POLL_SECONDS = 2.0
GIVE_UP_SECONDS = 600.0
"""A watcher whose service has not answered for this long stops (the next handle starts it again)."""
CANCELLING = ("CANCELLED", "cancelling")
"""The cancel outcomes (:func:`crossdock.service.cancel`) of a job that had not ended."""


class JobFailed(CrossdockError):
    """The job ended without completing (its state and exit code are attached)."""

    def __init__(self, job: Job):
        self.job = job
        super().__init__(f"job {job.display_id} ended {job.state.value} (exit code {job.exit_code}, {job.reason})")


class RemoteError(CrossdockError):
    """Wraps a remote exception that could not be re-raised as itself."""


class ForeignResult(PermissionDenied):
    """A Python job's result read in a process that is not its owner's: unpickling it would run
    code of the owner's choosing with this process's rights (root's, an admin's), so it is not."""

    def __init__(self, job: Job, uid: int):
        me = user_name(uid)
        as_owner = f"'#{job.spec.user}'" if job.spec.user.isdigit() else job.spec.user  # sudo's spelling of a bare uid
        super().__init__(
            f"the result of job {job.display_id} belongs to {job.spec.user!r} and this process runs as {me!r}:"
            f" unpickling it here would run code {job.spec.user!r} chose as {me!r}; read it as its owner:"
            f" sudo -u {as_owner} python -c 'from crossdock import Client;"
            f" print(Client().job({job.id}).result())'")


def refuse_foreign(job: Job) -> None:
    """Raise :class:`ForeignResult` unless this process's real and effective uid are the owner's."""
    owner = user_id(job.spec.user)
    for uid in (os.getuid(), os.geteuid()):
        if uid != owner:
            raise ForeignResult(job, uid)


class JobHandle(cf.Future):
    def __init__(self, client: "Client", job: Job, watched: bool = True):
        """``watched``: settled by the client's watcher when its job ends (every handle a user gets)."""
        super().__init__()
        self.client, self.id, self._job = client, job.id, job
        self._resolving = threading.Lock()
        if watched:
            _watcher(client).watch([self])

    def __repr__(self) -> str:
        return f"JobHandle({self._job.display_id}, {self.state.value})"

    @property
    def job(self) -> Job:
        self._job = self.client.gateway.job(self.id)
        return self._job

    @property
    def state(self) -> JobState:
        return self.job.state

    def wait(self, timeout: float | None = None, poll: float = 0.1) -> Job:
        """The job once it has ended (TimeoutError past ``timeout`` seconds)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            job = self.job
            if job.state.terminal:
                return job
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"job {job.display_id} still {job.state.value} after {timeout}s")
            time.sleep(poll)

    def _resolve(self, job: Job) -> None:
        """Settle the future from the ended ``job`` (once; later calls do nothing)."""
        with self._resolving:
            if super().done():
                return
            try:
                value = self._outcome(job)
            except BaseException as exc:  # noqa: BLE001 - the job's own exception, or why there is no result
                self.set_exception(exc)
            else:
                self.set_result(value)

    def _outcome(self, job: Job) -> Any:
        if job.spec.python is None:
            if job.state is not JobState.COMPLETED:
                raise JobFailed(job)
            return job
        refuse_foreign(job)  # the seal says who wrote it, not that it is safe for this reader
        data = self.client.gateway.result(job.id)  # refuses a forged or unsigned one
        if data is None:
            raise JobFailed(job)
        return _unpacked(data, job.display_id)

    def _check(self) -> bool:
        if not super().done():
            job = self.job
            if job.state.terminal:
                self._resolve(job)
        return super().done()

    def done(self) -> bool:
        return self._check()

    def result(self, timeout: float | None = None) -> Any:
        """The callable's return value; its exception re-raised here with the remote traceback."""
        self.client.gateway.authorize(self.id, "read the result of")  # before waiting
        if not super().done():
            self._resolve(self.wait(timeout))
        return super().result(0)

    def exception(self, timeout: float | None = None) -> BaseException | None:
        if not super().done():
            self._resolve(self.wait(timeout))
        return super().exception(0)

    def add_done_callback(self, fn: Callable[[cf.Future], Any]) -> None:
        super().add_done_callback(fn)
        if not super().done():
            _watcher(self.client).watch([self])

    def running(self) -> bool:
        return not super().done() and self.state is JobState.RUNNING

    def __await__(self):
        # through a proxy: an awaiting task cancelled (a timeout) drops its wait, not the job
        proxy: cf.Future = cf.Future()
        def copy(f: cf.Future) -> None:
            if cf.Future.cancelled(f):
                proxy.cancel()
                return
            exc = cf.Future.exception(f, 0)
            proxy.set_exception(exc) if exc is not None else proxy.set_result(cf.Future.result(f, 0))

        self.add_done_callback(copy)
        return asyncio.wrap_future(proxy).__await__()

    def cancel(self) -> bool:
        """Cancel the job in crossdock (scancel), pending or running: True, and the future is
        cancelled (``result()`` raises ``CancelledError``), unless the job had already ended."""
        if super().done():
            return super().cancelled()
        (_, outcome), = self.client.gateway.cancel([str(self.id)])
        if outcome not in CANCELLING:  # it had ended: the future settles from how
            self._check()
            return False
        with self._resolving:
            cancelled = super().cancel()
            if cancelled:
                self.set_running_or_notify_cancel()  # the stdlib's waiters hear of it here
        return cancelled

    def logs(self) -> str:
        """What the job printed so far: a Python job's output as kept in the store (every
        attempt's), a pod's log, or the job's output file."""
        served = self.client.gateway.backend_logs(self.id)
        if served is not None:
            return served
        from crossdock.backends.local.environment import output_paths

        job = self.job
        path = output_paths(job, job.nodes[0] if job.nodes else "localhost")[0]
        try:
            return path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def hold(self) -> bool:
        return self.client.gateway.hold([str(self.id)], True)[0][1]

    def release(self) -> bool:
        return self.client.gateway.hold([str(self.id)], False)[0][1]

    def requeue(self) -> bool:
        return self.client.gateway.requeue([str(self.id)])[0][1]


def _unpacked(data: bytes, where: str) -> Any:
    """The value of an outcome, or its exception raised with the remote traceback as a note."""
    kind, value, tb = decode_outcome(data)
    if kind == "ok":
        return value
    if isinstance(value, BaseException):
        value.add_note(f"remote traceback (job {where}):\n{tb}")
        raise value
    raise RemoteError(f"job {where} raised:\n{tb}")


class InputHandle(JobHandle):
    """The handle of one input of a ``map`` task that took several (``chunksize``): its task's
    job, and the input's own value or exception among the task's outcomes, which the handles of
    one task fetch once. ``state`` is the task's."""

    def __init__(self, client: "Client", job: Job, index: int, outcomes: "_Outcomes"):
        self.index, self._outcomes = index, outcomes  # before the watcher may settle it
        super().__init__(client, job)

    @classmethod
    def of(cls, task: JobHandle, inputs: int) -> list["InputHandle"]:
        outcomes = _Outcomes()
        return [cls(task.client, task._job, i, outcomes) for i in range(inputs)]

    def __repr__(self) -> str:
        return f"InputHandle({self._job.display_id}[{self.index}], {self.state.value})"

    def _outcome(self, job: Job) -> Any:
        outcomes = self._outcomes.get(lambda: JobHandle._outcome(self, job))
        return _unpacked(outcomes[self.index], f"{job.display_id}, input {self.index}")


class _Outcomes:
    """A task's list of outcomes, fetched by the first of its handles to need it."""

    def __init__(self):
        self.lock, self.value = threading.Lock(), None

    def get(self, fetch: Callable[[], list[bytes]]) -> list[bytes]:
        with self.lock:
            if self.value is None:
                self.value = fetch()
            return self.value


class _Watcher:
    """One daemon thread per client: polls the service for the watched handles' jobs, one round
    trip per pass, and settles those that ended; it exits when nothing is watched, or when the
    service has not answered for :data:`GIVE_UP_SECONDS` (a later :meth:`watch` starts it again)."""

    def __init__(self, client: "Client"):
        self.client, self.lock, self.handles, self.thread = client, threading.Lock(), {}, None
        self.woken = threading.Event()

    def watch(self, handles: Iterable[JobHandle]) -> None:
        with self.lock:
            for h in handles:  # the handles of a task's inputs share its job id
                if not cf.Future.done(h) and h not in self.handles.setdefault(h.id, []):
                    self.handles[h.id].append(h)
            if self.handles and (self.thread is None or not self.thread.is_alive()):
                self.thread = threading.Thread(target=self._run, name="crossdock-watcher", daemon=True)
                self.thread.start()
        self.woken.set()

    def _run(self) -> None:
        delay, failing_since = POLL_SECONDS, None
        while True:
            with self.lock:
                pending = {i: list(hs) for i, hs in self.handles.items()}
                if not pending:
                    self.thread = None
                    return
            polled_at = time.monotonic()
            try:
                jobs = self.client.gateway.jobs(list(pending))
            except Exception as exc:  # noqa: BLE001 - the service away for a while: try again
                now = time.monotonic()
                failing_since = failing_since or now
                if now - failing_since >= GIVE_UP_SECONDS:
                    log.warning("crossdock: no answer from the service for %.0fs (%s); %d jobs no longer watched",
                                now - failing_since, exc, len(pending))
                    with self.lock:
                        self.thread = None
                    return
                self.woken.wait(IDLE_POLL_SECONDS)
                self.woken.clear()
                continue
            failing_since, ended = None, False
            for job in jobs:
                if job.state.terminal:
                    ended = True
                    for h in pending[job.id]:
                        h._resolve(job)
            with self.lock:
                for i in pending:
                    if not (left := [h for h in self.handles.get(i, []) if not cf.Future.done(h)]):
                        self.handles.pop(i, None)
                    else:
                        self.handles[i] = left
            delay = POLL_SECONDS if ended or self.woken.is_set() else min(delay * 1.5, IDLE_POLL_SECONDS)
            self.woken.clear()
            self.woken.wait(delay)
            # a new handle ends the wait early, but passes stay POLL_SECONDS apart: a burst of
            # submissions is one pass over the watched jobs, not one per submission
            if (rest := POLL_SECONDS - (time.monotonic() - polled_at)) > 0:
                time.sleep(rest)


_WATCHERS: dict[int, _Watcher] = {}
_WATCHERS_LOCK = threading.Lock()


def _watcher(client: "Client") -> _Watcher:
    with _WATCHERS_LOCK:
        return _WATCHERS.setdefault(id(client.gateway), _Watcher(client))


def _watch_all(handles: Iterable[JobHandle]) -> list[JobHandle]:
    handles = list(handles)
    by_client: dict[int, list[JobHandle]] = {}
    for h in handles:
        by_client.setdefault(id(h.client.gateway), []).append(h)
    for group in by_client.values():
        _watcher(group[0].client).watch(group)
    return handles


def wait(handles: Iterable[JobHandle], timeout: float | None = None,
         return_when: str = cf.ALL_COMPLETED) -> tuple[set[JobHandle], set[JobHandle]]:
    """``concurrent.futures.wait`` for job handles: (done, not done)."""
    return cf.wait(_watch_all(handles), timeout=timeout, return_when=return_when)  # type: ignore[return-value]


def as_completed(handles: Iterable[JobHandle], timeout: float | None = None) -> Iterator[JobHandle]:
    """The handles as their jobs end (``concurrent.futures.as_completed``)."""
    return cf.as_completed(_watch_all(handles), timeout=timeout)  # type: ignore[return-value]
