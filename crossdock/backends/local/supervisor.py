"""Watches one local job from start to end, detached from the worker that started it.

``python -m crossdock.backends.local.supervisor JOB ATTEMPT KILL_WAIT [--daemonize]``. It starts the job in
its own process group, marks it RUNNING, refreshes a heartbeat, enforces the time limit
(SIGTERM, KillWait, SIGKILL -> TIMEOUT) and the memory request (:mod:`memlimit`: killed past it ->
OUT_OF_MEMORY), obeys cancel and preempt requests, and records the
end state and exit code. Because it is detached, a worker that dies or restarts loses nothing.

While the store is unreachable the job keeps running: RUNNING, heartbeats and the end wait and
are replayed when it answers (each guarded by the attempt, so a repeat moves nothing), and the
workspace files (:mod:`workspace`) tell the reconciler that this supervisor lives and, should it
die, how the job ended. If the supervisor itself dies with no end written, the reconciler marks
the job NODE_FAIL.
"""

from __future__ import annotations

import ctypes
import functools
import logging
import os
import resource
import signal
import socket
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

from crossdock import signing
from crossdock.backends.local import replica as service_replica, workspace
from crossdock.backends.local.cpulimit import CpuLimit
from crossdock.backends.local.memlimit import MemoryLimit
from crossdock.backends.local.environment import job_environment, output_paths
from crossdock.jobtools.srun import steps_file
from crossdock.backends.local.owner import Owner, acting_as, owner_of, submit_umask
from crossdock.backends.local.record import record
from crossdock.backends.joboutput import OutputPump, output_limit
from crossdock.backends.pypayload import checkpoint_context, verified_payload
from crossdock.backends.redis_store.embedded import private_dir
from crossdock.backends.redis_store.sealing import BAD_SEAL, SpecSeals
from crossdock.backends.redis_store.store import JobStore
from crossdock.queue.config import cpu_list
from crossdock.queue.errors import CrossdockError, StoreUnavailable
from crossdock.queue.jobstore import JobResults, StopRequest
from crossdock.queue.models import Job
from crossdock.queue.states import JobState, Reason

log = logging.getLogger("crossdock.supervisor")

HEARTBEAT_SECONDS = 1.0
HEARTBEAT_TTL = 10.0
POLL_SECONDS = 0.1
BACKOFF_MIN_SECONDS = 0.5
BACKOFF_MAX_SECONDS = 5.0
GIVE_UP_SECONDS = 3600.0
"""How long a supervisor waits for an unreachable store at its start (nothing started yet) or to
record its job's end (the outcome file holds it meanwhile, and after, for the reconciler)."""
STORE_TIMEOUT_SECONDS = 2.0
"""One store call's limit: a hung Redis must not stop the watch (time limit, heartbeat file)."""


CHECKPOINT = "checkpoint.b64"
"""The call a Python job's ``checkpoint()`` hook returned when it was stopped (empty: none)."""
OUTPUT = "output.log"
"""A Python job's stdout and stderr, which the supervisor pumps to the store (:mod:`joboutput`)."""


def job_dir(state_dir: Path, job_id: int, attempt: int) -> Path:
    """The attempt's workspace, the service's alone (0700): a job run as its owner reaches what it
    needs there through descriptors handed down (payload, result, script), never by path."""
    ws = workspace.path(state_dir, job_id, attempt)
    for d in (*reversed(ws.parents[:3]), ws):  # the state dir, jobs/, jobs/<id>/, the attempt's
        private_dir(d)
    return ws


def _private(path: Path, mode: str, owner: Owner | None = None, perm: int = 0o600):
    """A workspace file only the service (and, via ``owner``, the job's owner) may open."""
    f = open(os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, perm), mode, closefd=True)
    os.fchmod(f.fileno(), perm)
    if owner is not None:
        os.fchown(f.fileno(), owner.uid, owner.gid)
    return f


def build_argv(job: Job, workspace: Path, state_dir: Path, owner: Owner | None = None,
               store: JobResults | None = None) -> tuple[list[str], list]:
    """The job's argv and the workspace files it gets as descriptors (``/dev/fd/N``, ``fd:N``)."""
    spec = job.spec
    if spec.python is not None:
        text = verified_payload(store, state_dir, job)  # every seal checked; a map's parts from the store
        payload = _private(workspace / "payload.b64", "w+")
        payload.write(text)
        payload.flush()
        payload.seek(0)
        result = _private(workspace / "result.pkl", "wb")
        checkpoint = _private(workspace / CHECKPOINT, "w")
        return ([sys.executable, "-m", "crossdock.backends.local.pyrun", f"fd:{payload.fileno()}",
                 f"fd:{result.fileno()}", f"fd:{checkpoint.fileno()}"], [payload, result, checkpoint])
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


def _kill(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


class StoreLink:
    """Whether the store answered the last call, and when to try it again while it does not
    (bounded exponential backoff: the job keeps being watched in between).

    Hand-written rather than tenacity: the backoff belongs to the link, not to one call. One outage
    spans many different records (RUNNING, heartbeats, output, the end), some tried once per poll
    and dropped (:meth:`Supervisor._mark_running`), and the job is watched between tries; a retrier
    per call would start again at its first delay for every record."""

    def __init__(self) -> None:
        self.down_since: float | None = None
        self.next_try = 0.0
        self.delay = BACKOFF_MIN_SECONDS

    def due(self, now: float) -> bool:
        return now >= self.next_try

    def failed(self, now: float, exc: Exception) -> None:
        if self.down_since is None:
            log.warning("store unreachable (%s); the job keeps running, its records wait", exc)
            self.down_since = now
        self.next_try = now + self.delay
        self.delay = min(self.delay * 2, BACKOFF_MAX_SECONDS)

    def answered(self) -> None:
        if self.down_since is not None:
            log.info("store reachable again after %.1fs", time.monotonic() - self.down_since)
        self.down_since, self.delay = None, BACKOFF_MIN_SECONDS


class Supervisor:
    def __init__(self, store: JobStore, state_dir: Path, kill_wait: float, give_up_seconds: float = GIVE_UP_SECONDS,
                 cpu: tuple[int, int] | None = None, cpuset: frozenset[int] | None = None):
        self.store, self.state_dir, self.kill_wait = store, state_dir, kill_wait
        self.cpu_milli = cpu
        """The attempt's CPU (request, limit) in millicores, from the backend; None: not confined."""
        self.cpuset = cpuset
        """The CPUs its node is pinned to (the node's ``cpuset``); None: all of this machine's."""
        self.give_up_seconds = give_up_seconds
        self.link = StoreLink()
        self.running_recorded = False
        self.started = 0.0
        """When the attempt was launched (epoch seconds, before its process exists): its start
        time, so the time it ran is never shorter than its process ran, however late RUNNING lands."""
        self.stale = False
        """The job moved on to another attempt or state while the store was out of reach."""
        self.cancelled = False
        """Cancelled while being dispatched (before RUNNING got through)."""
        self.memory: MemoryLimit | None = None
        """The attempt's memory limit, when the job asked for memory."""
        self.cpu: CpuLimit | None = None
        self.output: OutputPump | None = None
        """A Python job's output, on its way to the store."""

    def run(self, job_id: int, attempt: int) -> int:
        ws = job_dir(self.state_dir, job_id, attempt)
        workspace.record_watcher(ws)
        read = self._until_answered(lambda: self.store.opened([job_id]))
        if read is None:  # nothing started: the reconciler requeues the attempt
            return 1
        if not read:
            log.info("job %s is gone: nothing to do", job_id)
            return 0
        [(job, refusal)] = read
        if job.state is not JobState.SCHEDULED or job.attempts != attempt:
            log.info("job %s attempt %s is %s (attempt %s): nothing to do", job_id, attempt, job.state, job.attempts)
            return 0
        if refusal:  # changed in the store since dispatch checked it: nothing of it runs
            log.error("job %s: %s", job_id, refusal)
            return self._finish(job, attempt, workspace.Outcome(JobState.FAILED, f"{BAD_SEAL}: {refusal}", 127,
                                                                None, None, time.time()), ws)
        node = job.nodes[0] if job.nodes else socket.gethostname()
        mem_mib = job.spec.mem_per_node()  # 0: no request (--mem=0 is the whole node, as in Slurm)
        cgroup = f"crossdock-{job_id}-{attempt}-{os.getpid()}"  # one supervisor's: unique across installations
        if mem_mib:
            self.memory = MemoryLimit.create(mem_mib * 1024 * 1024, cgroup)
        if self.cpu_milli is not None:
            self.cpu = CpuLimit.create(*self.cpu_milli, cgroup, self.memory)
        try:
            cpus = self._cpus()
            self.started = time.time()
            proc, files = self._start(job, node, ws)
        except (OSError, ValueError, CrossdockError) as exc:
            failed = workspace.Outcome(JobState.FAILED, f"LaunchFailed: {exc}", 127, None, None, time.time())
            self._release_cgroups()
            return self._finish(job, attempt, failed, ws)
        if self.memory is not None:
            self.memory.attach(proc.pid)
        if self.cpu is not None:
            self.cpu.attach(proc.pid)
        if cpus is not None:
            _pin(proc.pid, cpus)
        workspace.record_watcher(ws, proc.pid)
        ref = f"local:{socket.gethostname()}:{proc.pid}"
        self._mark_running(job, attempt, proc, ref)
        ending = self._watch(job, attempt, proc, ws)
        # set by a replayed RUNNING, which may have found the job ended or moved on already
        ending = "stale" if self.stale else "cancel" if self.cancelled else ending
        if self.output is not None:  # what is left, while the job's output file is open
            self._until_answered(lambda: self.output.pump(final=True))  # type: ignore[union-attr]
        for f in files:
            f.close()
        self.steps_file.unlink(missing_ok=True)  # srun's step counter, if the job ran srun
        self._release_cgroups()
        if self.memory is not None and ending == "exit" and self.memory.exceeded:  # the OOM killer, between polls
            ending = "oom"
        if ending == "stale":
            log.warning("job %s attempt %s moved on while the store was out of reach; stopped it", job_id, attempt)
            return 0
        outcome = self._outcome(proc.returncode, ending, self.started, ref,
                                self.memory.peak_kib if self.memory is not None else None)
        return self._finish(job, attempt, outcome, ws)

    def _cpus(self) -> frozenset[int] | None:
        """The CPUs to pin the job to: its node's cpuset, of those this supervisor may use."""
        if self.cpuset is None:
            return None
        usable = self.cpuset & set(os.sched_getaffinity(0))
        if not usable:
            raise ValueError(f"the node's cpuset {sorted(self.cpuset)} has none of this machine's usable CPUs"
                             f" {sorted(os.sched_getaffinity(0))}; fix the node's cpuset in the config")
        return frozenset(usable)

    def _release_cgroups(self) -> None:
        if self.cpu is not None:  # first: on cgroup v2 the memory limit's cgroup may be the one they share
            self.cpu.close()
        if self.memory is not None:
            self.memory.close()

    def _until_answered(self, call):
        """``call()`` once the store answers; None when it stays unreachable past the give-up time."""
        deadline = time.monotonic() + self.give_up_seconds
        while True:
            try:
                value = call()
            except StoreUnavailable as exc:
                now = time.monotonic()
                if now >= deadline:
                    log.error("store unreachable for %.0fs; giving up", self.give_up_seconds)
                    return None
                self.link.failed(now, exc)
                time.sleep(max(self.link.next_try - now, 0))
                continue
            self.link.answered()
            return value

    def _mark_running(self, job: Job, attempt: int, proc: subprocess.Popen, ref: str) -> None:
        """Record RUNNING (again after an outage: it may have landed already). A job cancelled
        while being dispatched, or moved on meanwhile, is stopped."""
        try:
            started = datetime.fromtimestamp(self.started, timezone.utc)
            moved = self.store.transition(job.id, JobState.RUNNING, attempt=attempt, unless="cancel_requested",
                                          fields={"start_time": started, "pid": proc.pid, "reason": Reason.NONE,
                                                  "backend_ref": ref}, actor="local")
            now = self.store.get(job.id) if not moved else None
        except StoreUnavailable as exc:
            self.link.failed(time.monotonic(), exc)
            return
        self.link.answered()
        self.running_recorded = True
        if now is None or (now.attempts == attempt and now.state is JobState.RUNNING):
            return  # recorded now, or it had landed before the outage
        if now.attempts == attempt and now.state is JobState.SCHEDULED:
            self.cancelled = True  # the cancel request kept it from RUNNING
        else:
            self.stale = True  # lost and requeued meanwhile: another attempt owns the job
        _killpg(proc.pid, signal.SIGKILL)

    def _start(self, job: Job, node: str, workspace: Path) -> tuple[subprocess.Popen, list]:
        owner = owner_of(job)
        argv, handed = build_argv(job, workspace, self.state_dir, owner, self.store)
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
        child_out = files
        if job.spec.python is not None:  # kept in the store, and copied to the job's own output file
            child_out = [_private(workspace / OUTPUT, "wb")]
            self.output = OutputPump(self.store, job.id, workspace / OUTPUT, forward=files[0].fileno(),
                                     limit=output_limit(job.spec.env))
            files = [*files, *child_out]
        uid = owner.uid if owner else os.getuid()
        env = job_environment(job, node, home=owner.home if owner else None, uid=uid)
        if job.spec.service is not None:  # a service replica: its port, recorded before it listens
            port = service_replica.free_port()
            env.update(service_replica.replica_environment(job, port))
            self._until_answered(lambda: service_replica.record_endpoint(self.store.services, job, port))
        try:
            proc = subprocess.Popen(argv, cwd=job.spec.workdir or None, env=env, stdin=subprocess.DEVNULL,
                                    stdout=child_out[0], stderr=child_out[-1], start_new_session=True, close_fds=True,
                                    pass_fds=[f.fileno() for f in handed], umask=umask,
                                    **(owner.popen_kwargs() if owner else {}))
        finally:
            for f in handed:  # the job holds its own copies
                f.close()
        self.steps_file = Path(steps_file(env, uid, proc.pid))  # the job's session is its pid
        return proc, files

    def _beat(self, job: Job, attempt: int, proc: subprocess.Popen, ws: Path, now: float) -> StopRequest | None:
        """One heartbeat: the workspace file always, the store when it answers (with what an
        outage held back). Returns the stop request standing on the job, if any."""
        workspace.beat(ws)
        if not self.link.due(now):
            return None
        if not self.running_recorded:
            self._mark_running(job, attempt, proc, f"local:{socket.gethostname()}:{proc.pid}")
            if not self.running_recorded or self.stale:
                return None
        try:
            self.store.heartbeat(job.id, HEARTBEAT_TTL)
            if self.output is not None:
                self.output.pump()
            stop = self.store.stop_request(job.id)
            if self.link.down_since is not None:  # back after an outage: is this attempt still the job's?
                current = self.store.get(job.id)
                if current.attempts != attempt or not current.state.active:
                    self.stale = True
                    _killpg(proc.pid, signal.SIGKILL)
        except StoreUnavailable as exc:
            self.link.failed(now, exc)
            return None
        self.link.answered()
        return stop

    def _watch(self, job: Job, attempt: int, proc: subprocess.Popen, ws: Path) -> str:
        """Wait for the job to end; return why it ended: exit, timeout, oom, cancel, preempt or stale."""
        limit = job.spec.time_limit_seconds
        started = time.monotonic()
        next_beat = 0.0
        ending = "exit"
        kill_at: float | None = None
        warn = job.spec.kill_signal  # --signal: sig_time seconds before the limit, once
        warn_at = None if warn is None or limit is None else started + max(0, limit - warn.seconds)
        while proc.poll() is None:
            now = time.monotonic()
            if warn_at is not None and now >= warn_at and ending == "exit":
                warn_at = None
                if warn.batch_only:  # B: the batch shell alone; else every process of the job
                    _kill(proc.pid, warn.number)
                else:
                    _killpg(proc.pid, warn.number)
            if now >= next_beat:
                next_beat = now + HEARTBEAT_SECONDS
                stop = self._beat(job, attempt, proc, ws, now)
                if self.stale:
                    ending = "stale"
                if ending in ("exit", "preempt"):
                    if stop is not None and stop.cancel:
                        # A cancel during a preemption's grace period wins and does not wait it out.
                        ending, kill_at = "cancel", min(kill_at or now + self.kill_wait, now + self.kill_wait)
                        _killpg(proc.pid, signal.SIGTERM)
                    elif ending == "exit" and stop is not None and stop.preempt:
                        ending, kill_at = "preempt", now + (stop.grace_seconds or self.kill_wait)
                        _killpg(proc.pid, signal.SIGTERM)
            if ending == "exit" and self.memory is not None and self.memory.check():
                ending = "oom"
                _killpg(proc.pid, signal.SIGKILL)
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

    @staticmethod
    def _outcome(rc: int, ending: str, started: float, ref: str, max_rss_kib: int | None = None) -> workspace.Outcome:
        exit_code, sig = (rc, None) if rc >= 0 else (None, -rc)
        if ending == "cancel":
            state, reason = JobState.CANCELLED, Reason.CANCELLED_BY_USER
        elif ending == "timeout":
            state, reason = JobState.TIMEOUT, Reason.TIME_LIMIT
        elif ending == "oom":
            state, reason = JobState.OUT_OF_MEMORY, Reason.OUT_OF_MEMORY
        elif ending == "preempt":
            state, reason = JobState.PREEMPTED, Reason.PREEMPTED
        elif rc == 0:
            state, reason = JobState.COMPLETED, Reason.NONE
        else:
            state, reason = JobState.FAILED, Reason.NON_ZERO_EXIT
        if max_rss_kib is None:  # no memory limit watched it: the reaped children's peak (KiB on Linux)
            max_rss_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss or None
        return workspace.Outcome(state, reason, exit_code, sig, started, time.time(), ref, max_rss_kib)

    def _finish(self, job: Job, attempt: int, outcome: workspace.Outcome, ws: Path) -> int:
        """Persist the end first (a supervisor that dies now leaves it to the reconciler), then
        record it, retrying while the store is down. Past the give-up time the file alone stays."""
        workspace.write_outcome(ws, outcome)
        result = workspace.result(ws) if job.spec.python is not None else None
        checkpoint = _read(ws / CHECKPOINT)

        def beat_and_record() -> bool:  # the beat tells the reconciler this supervisor still tries
            workspace.beat(ws)
            if checkpoint:  # before the end, so that the requeued attempt resumes from it
                key = signing.user_key(self.state_dir, job.spec.user)
                self.store.set_checkpoint(job.id, signing.seal(key, checkpoint_context(job.id), checkpoint))
            return record(self.store, job.id, attempt, outcome, result, job.spec.requeue, self.state_dir)

        recorded = self._until_answered(beat_and_record)
        if recorded is None:
            log.error("job %s attempt %s ended %s; left in %s for the reconciler", job.id, attempt,
                      outcome.state.value, ws / workspace.OUTCOME)
            return 1
        return 0


def _pin(pid: int, cpus: frozenset[int]) -> None:
    """Pin the job's first process (what it starts from now on inherits the mask)."""
    try:
        os.sched_setaffinity(pid, cpus)
    except OSError as exc:  # it ended already
        log.info("could not pin process %s to CPUs %s: %s", pid, sorted(cpus), exc)


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError:
        return b""


def main(argv: list[str]) -> int:
    """``JOB ATTEMPT KILL_WAIT [--cpu=REQUEST:LIMIT] [--cpuset=LIST] [--daemonize]`` (CPU in
    millicores; the CPUs of the job's node); the store, prefix and state directory come from the
    environment the local backend starts it with (``CROSSDOCK_REDIS_URL`` …)."""
    job_id, attempt, kill_wait = int(argv[1]), int(argv[2]), float(argv[3])
    cpu = next((tuple(int(v) for v in a.split("=", 1)[1].split(":", 1)) for a in argv if a.startswith("--cpu=")), None)
    cpuset = next((cpu_list(a.split("=", 1)[1]) for a in argv if a.startswith("--cpuset=")), None)
    if "--daemonize" in argv:
        if os.fork():
            os._exit(0)
        os.setsid()
        if os.fork():  # the session leader exits so the watcher can never regain a terminal
            os._exit(0)
    _name_process(f"cdsup-{job_id}")
    missing = [v for v in ("CROSSDOCK_REDIS_URL", "CROSSDOCK_PREFIX", "CROSSDOCK_STATE_DIR") if not os.environ.get(v)]
    if missing:
        raise SystemExit(f"crossdock supervisor: {', '.join(missing)} not set (the local backend sets them)")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    return Supervisor(store_from_env(), Path(os.environ["CROSSDOCK_STATE_DIR"]), kill_wait,
                      cpu=cpu, cpuset=cpuset).run(job_id, attempt)  # type: ignore[arg-type]


def _name_process(name: str) -> None:
    """The name ps and top show (``comm``, 15 bytes): a supervisor forked by the spawner keeps the
    spawner's command line, so the name is what tells them apart."""
    try:
        _libc().prctl(15, name.encode()[:15], 0, 0, 0)  # PR_SET_NAME
    except (OSError, AttributeError):
        pass


@functools.lru_cache(maxsize=1)
def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def store_from_env() -> JobStore:
    # no retries inside redis-py: the supervisor retries on its own schedule and keeps watching between
    return JobStore.from_url(os.environ["CROSSDOCK_REDIS_URL"], os.environ["CROSSDOCK_PREFIX"], actor="local",
                             seals=SpecSeals.for_state_dir(Path(os.environ["CROSSDOCK_STATE_DIR"])),
                             timeout=STORE_TIMEOUT_SECONDS, retries=0)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
