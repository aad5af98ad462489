"""Watches one local job from start to end, detached from the worker that started it.

``python -m crossdock.backends.local.supervisor JOB ATTEMPT KILL_WAIT [--daemonize]``. It starts the job in
its own process group, marks it RUNNING, refreshes a heartbeat, enforces the time limit
(SIGTERM, KillWait, SIGKILL -> TIMEOUT), obeys cancel and preempt requests, and records the
end state and exit code. Because it is detached, a worker that dies or restarts loses nothing;
if the supervisor itself dies, the heartbeat stops and the reconciler marks the job NODE_FAIL.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

from crossdock import signing
from crossdock.backends.local.environment import job_environment, output_paths
from crossdock.backends.local.owner import Owner, acting_as, owner_of, submit_umask
from crossdock.backends.redis_store.embedded import private_dir
from crossdock.backends.redis_store.store import JobStore
from crossdock.queue.errors import CrossdockError
from crossdock.queue.models import Job
from crossdock.queue.states import JobState, Reason, stopped_outcome

log = logging.getLogger("crossdock.supervisor")

HEARTBEAT_SECONDS = 1.0
HEARTBEAT_TTL = 10.0
POLL_SECONDS = 0.1


def job_dir(state_dir: Path, job: Job) -> Path:
    """The attempt's workspace, the service's alone (0700): a job run as its owner reaches what it
    needs there through descriptors handed down (payload, result, script), never by path."""
    for d in (state_dir, state_dir / "jobs", state_dir / "jobs" / str(job.id)):
        private_dir(d)
    return private_dir(state_dir / "jobs" / str(job.id) / str(job.attempts))


def _private(path: Path, mode: str, owner: Owner | None = None, perm: int = 0o600):
    """A workspace file only the service (and, via ``owner``, the job's owner) may open."""
    f = open(os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, perm), mode, closefd=True)
    os.fchmod(f.fileno(), perm)
    if owner is not None:
        os.fchown(f.fileno(), owner.uid, owner.gid)
    return f


def build_argv(job: Job, workspace: Path, state_dir: Path, owner: Owner | None = None) -> tuple[list[str], list]:
    """The job's argv and the workspace files it gets as descriptors (``/dev/fd/N``, ``fd:N``)."""
    spec = job.spec
    if spec.python is not None:
        signing.check_payload(state_dir, spec, f"the Python payload of job {job.id}")
        payload = _private(workspace / "payload.b64", "w+")
        payload.write(spec.python.payload)
        payload.flush()
        payload.seek(0)
        result = _private(workspace / "result.pkl", "wb")
        return ([sys.executable, "-m", "crossdock.backends.local.pyrun", f"fd:{payload.fileno()}",
                 f"fd:{result.fileno()}"], [payload, result])
    if spec.script is not None:
        with _private(workspace / "script", "w", owner, perm=0o700) as f:
            f.write(spec.script)
        script = open(workspace / "script", "rb")  # read-only: a file open for writing cannot be exec'd
        path = f"/dev/fd/{script.fileno()}"  # opened afresh by the owner: the file is theirs
        argv = [path, *spec.args] if spec.script.startswith("#!") else ["/bin/sh", path, *spec.args]
        return argv, [script]
    if spec.command:
        return [*spec.command, *spec.args], []
    raise ValueError(f"job {job.id} has nothing to run")


def _killpg(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


class Supervisor:
    def __init__(self, store: JobStore, state_dir: Path, kill_wait: float):
        self.store, self.state_dir, self.kill_wait = store, state_dir, kill_wait

    def run(self, job_id: int, attempt: int) -> int:
        job = self.store.get(job_id)
        if job.state is not JobState.SCHEDULED or job.attempts != attempt:
            log.info("job %s attempt %s is %s (attempt %s): nothing to do", job_id, attempt, job.state, job.attempts)
            return 0
        node = job.nodes[0] if job.nodes else socket.gethostname()
        workspace = job_dir(self.state_dir, job)
        try:
            proc, files = self._start(job, node, workspace)
        except (OSError, ValueError, CrossdockError) as exc:
            self.store.transition(job_id, JobState.FAILED, attempt=attempt, reason=f"LaunchFailed: {exc}",
                                  fields={"exit_code": 127, "end_time": _now()}, actor="local")
            return 1
        moved = self.store.transition(job_id, JobState.RUNNING, attempt=attempt, unless="cancel_requested",
                                      fields={"start_time": _now(), "pid": proc.pid, "reason": Reason.NONE,
                                              "backend_ref": f"local:{socket.gethostname()}:{proc.pid}"},
                                      actor="local")
        if not moved:  # cancelled while being dispatched
            _killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            self.store.transition(job_id, JobState.CANCELLED, attempt=attempt, reason=Reason.CANCELLED_BY_USER,
                                  fields={"end_time": _now()}, actor="local")
            return 0
        ending = self._watch(job, proc)
        for f in files:
            f.close()
        self._finish(job, attempt, proc.returncode, ending, workspace)
        return 0

    def _start(self, job: Job, node: str, workspace: Path) -> tuple[subprocess.Popen, list]:
        owner = owner_of(job)
        argv, handed = build_argv(job, workspace, self.state_dir, owner)
        out, err = output_paths(job, node)
        umask = submit_umask(job.spec.env)
        mode = os.O_WRONLY | os.O_CREAT | (os.O_APPEND if job.attempts > 1 else os.O_TRUNC)
        old_umask = os.umask(umask)
        try:
            with acting_as(owner):  # the owner's files, made with the owner's rights, as slurmd does
                workdir = job.spec.workdir
                if workdir and not os.access(workdir, os.X_OK, effective_ids=True):
                    raise PermissionError(f"the job's owner may not enter its working directory {workdir}")
                out.parent.mkdir(parents=True, exist_ok=True)
                files = [open(os.open(out, mode, 0o666), "wb")]
                if err != out:
                    err.parent.mkdir(parents=True, exist_ok=True)
                    files.append(open(os.open(err, mode, 0o666), "wb"))
        finally:
            os.umask(old_umask)
        env = job_environment(job, node, home=owner.home if owner else None)
        try:
            proc = subprocess.Popen(argv, cwd=job.spec.workdir or None, env=env, stdin=subprocess.DEVNULL,
                                    stdout=files[0], stderr=files[-1], start_new_session=True, close_fds=True,
                                    pass_fds=[f.fileno() for f in handed], umask=umask,
                                    **(owner.popen_kwargs() if owner else {}))
        finally:
            for f in handed:  # the job holds its own copies
                f.close()
        return proc, files

    def _watch(self, job: Job, proc: subprocess.Popen) -> str:
        """Wait for the job to end; return why it ended: exit, timeout, cancel or preempt."""
        limit = job.spec.time_limit_seconds
        started = time.monotonic()
        next_beat = 0.0
        ending = "exit"
        kill_at: float | None = None
        while proc.poll() is None:
            now = time.monotonic()
            if now >= next_beat:
                self.store.heartbeat(job.id, HEARTBEAT_TTL)
                next_beat = now + HEARTBEAT_SECONDS
                if ending in ("exit", "preempt"):
                    stop = self.store.stop_request(job.id)
                    if stop is not None and stop.cancel:
                        # A cancel during a preemption's grace period wins and does not wait it out.
                        ending, kill_at = "cancel", min(kill_at or now + self.kill_wait, now + self.kill_wait)
                        _killpg(proc.pid, signal.SIGTERM)
                    elif ending == "exit" and stop is not None and stop.preempt:
                        ending, kill_at = "preempt", now + (stop.grace_seconds or self.kill_wait)
                        _killpg(proc.pid, signal.SIGTERM)
            if ending == "exit" and limit is not None and now - started >= limit:
                ending, kill_at = "timeout", now + self.kill_wait
                _killpg(proc.pid, signal.SIGTERM)
            if kill_at is not None and now >= kill_at:
                _killpg(proc.pid, signal.SIGKILL)
                kill_at = None
            try:
                proc.wait(timeout=POLL_SECONDS)
            except subprocess.TimeoutExpired:
                pass
        _killpg(proc.pid, signal.SIGKILL)  # leftovers of the job's process group
        return ending

    def _finish(self, job: Job, attempt: int, rc: int, ending: str, workspace: Path) -> None:
        result = workspace / "result.pkl"
        if job.spec.python is not None and result.exists() and result.stat().st_size:
            key = signing.user_key(self.state_dir, job.spec.user)  # the runner runs as the service: it seals
            self.store.set_result(job.id, signing.seal(key, f"result:{job.id}", result.read_bytes()))
        exit_code, sig = (rc, None) if rc >= 0 else (None, -rc)
        fields = {"end_time": _now(), "exit_code": exit_code,
                  "signal": sig, "pid": None}
        if ending == "cancel":
            state, reason = JobState.CANCELLED, Reason.CANCELLED_BY_USER
        elif ending == "timeout":
            state, reason = JobState.TIMEOUT, Reason.TIME_LIMIT
        elif ending == "preempt":
            state, reason = JobState.PREEMPTED, Reason.PREEMPTED
        elif rc == 0:
            state, reason = JobState.COMPLETED, Reason.NONE
        else:
            state, reason = JobState.FAILED, Reason.NON_ZERO_EXIT
        # The stop requests standing now decide, as for every backend: a cancel that came during
        # the grace period wins over the preemption.
        stop = self.store.stop_request(job.id)
        state, reason = stopped_outcome(state, reason, cancel=bool(stop and stop.cancel) or ending == "cancel",
                                        preempt=bool(stop and stop.preempt) or ending == "preempt")
        moved = self.store.transition(job.id, state, attempt=attempt, reason=reason, fields=fields, actor="local")
        if moved and state is JobState.PREEMPTED:
            self.store.settle_preempted(job.id, job.spec.requeue, actor="local")


def _now() -> datetime:
    return datetime.now(timezone.utc)


def main(argv: list[str]) -> int:
    """``JOB ATTEMPT KILL_WAIT [--daemonize]``; the store, prefix and state directory come from
    the environment the local backend starts it with (``CROSSDOCK_REDIS_URL`` …)."""
    job_id, attempt, kill_wait = int(argv[1]), int(argv[2]), float(argv[3])
    if "--daemonize" in argv:
        if os.fork():
            os._exit(0)
        os.setsid()
        if os.fork():  # the session leader exits so the watcher can never regain a terminal
            os._exit(0)
    missing = [v for v in ("CROSSDOCK_REDIS_URL", "CROSSDOCK_PREFIX", "CROSSDOCK_STATE_DIR") if not os.environ.get(v)]
    if missing:
        raise SystemExit(f"crossdock supervisor: {', '.join(missing)} not set (the local backend sets them)")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    store = JobStore.from_url(os.environ["CROSSDOCK_REDIS_URL"], os.environ["CROSSDOCK_PREFIX"], actor="local")
    return Supervisor(store, Path(os.environ["CROSSDOCK_STATE_DIR"]), kill_wait).run(job_id, attempt)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
