"""Chaos harness: crossdock run as a user runs it, with its processes killed at random moments.

``python -m crossdock up`` runs as a subprocess (its own process group, state directory, config
and embedded Redis on a unix socket). The harness submits a seeded mix of jobs in waves and, from
the same seeded RNG, SIGKILLs a Celery worker process, ``up`` alone, ``up``'s whole process group,
and Redis (restarted after the outage on the same socket with the same AOF). It plays the
operator: ``up`` that died is started again (once Redis is back, as an operator would wait).

Every job appends ``start ATTEMPT PID TIME`` and ``end ATTEMPT PID`` to its own marks file, so the
oracle counts runs from bytes written, then compares them with what the store recorded. The run
also keeps a history (:mod:`tests.chaos.history`: each submission, each fault, and at the end every
stored job's transitions and runs) for :func:`tests.chaos.checker.check`.
``CROSSDOCK_CHAOS_SEED`` replays a run: the workload and the fault schedule follow from it (which
pid a worker kill hits depends on what is alive at that moment).
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import yaml

from crossdock.backends.redis_store import embedded
from crossdock.queue.models import ArraySpec, Job, JobSpec
from crossdock.runtime import Runtime
from crossdock.settings import Settings, current_user
from tests.chaos.history import History, mark, observe_runs, observe_store, parse_marks, submit
from tests.chaos.oracle import STORE_DOWN, Verdict, judge, report

REPO = Path(__file__).resolve().parents[2]
# $1 marks dir, $2 key, $3 exit code, $4 sleep seconds; array tasks add their index to the key.
BODY = (f'f="$1/$2${{SLURM_ARRAY_TASK_ID:+_$SLURM_ARRAY_TASK_ID}}"; {mark("start")} >> "$f"; '
        '[ "$4" = 0 ] || sleep "$4"; echo "end $CROSSDOCK_ATTEMPT $$" >> "$f"; exit "$3"')


def seed_from_env(default: int | None = None) -> int:
    value = os.environ.get("CROSSDOCK_CHAOS_SEED")
    return int(value) if value else (default if default is not None else random.SystemRandom().randrange(10**6))


@dataclass(frozen=True)
class Plan:
    """One submission: a single job or an array of ``tasks`` tasks, all ending with ``exit_code``."""
    key: str
    kind: str
    exit_code: int
    sleep: float
    tasks: int = 0

    def spec(self, marks: Path, workdir: Path) -> JobSpec:
        # The simulate variables make kwok's pods (which run nothing) end as the command would.
        env = {"CROSSDOCK_SIMULATE_RUN_SECONDS": str(self.sleep), "CROSSDOCK_SIMULATE_EXIT_CODE": str(self.exit_code)}
        return JobSpec(name=self.kind, user=current_user(), workdir=str(workdir),
                       stdout=str(workdir / "out" / "%j.out"), env=env,
                       command=["sh", "-c", BODY, "chaos", str(marks), self.key, str(self.exit_code), str(self.sleep)],
                       cpus_per_task=1, array=ArraySpec(task_ids=list(range(self.tasks))) if self.tasks else None)


def workload(rng: random.Random, n: int, arrays: float = 0.03) -> list[Plan]:
    """About ``n`` jobs: `true`-like, `exit 3`, short sleeps, and a few arrays (their tasks count)."""
    plans: list[Plan] = []
    total = 0
    while total < n:
        r, key = rng.random(), f"p{len(plans)}"
        if r < arrays and n - total >= 10:
            plans.append(Plan(key, "array", 0, round(rng.uniform(0, 0.5), 1), tasks=rng.randint(5, 10)))
        elif r < 0.45:
            plans.append(Plan(key, "true", 0, 0))
        elif r < 0.65:
            plans.append(Plan(key, "exit3", 3, 0))
        else:
            plans.append(Plan(key, "sleep", 0, round(rng.uniform(0.2, 2.0), 1)))
        total += plans[-1].tasks or 1
    return plans


@dataclass
class Fault:
    at: float
    """Seconds after the first submission."""
    kind: str
    """worker, scheduler (``up`` alone), group (``up``'s process group), redis."""
    outage: float = 0.0


def schedule(rng: random.Random, window: float, counts: dict[str, int], outages: list[float]) -> list[Fault]:
    """Faults at seeded moments in ``[3, window]`` s; each Redis kill takes the next outage length."""
    kinds = [k for k, c in counts.items() for _ in range(c)] + ["redis"] * len(outages)
    rng.shuffle(kinds)
    times = sorted(rng.uniform(3, window) for _ in kinds)
    lengths = iter(rng.sample(outages, len(outages)))
    return [Fault(t, k, next(lengths) if k == "redis" else 0.0) for t, k in zip(times, kinds)]


# --- processes (from /proc: the harness needs no psutil) -------------------------------------------
def _stat(pid: int) -> tuple[int, int] | None:
    """(ppid, pgid), or None when the process is gone."""
    try:
        rest = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return int(rest[1]), int(rest[2])
    except (OSError, IndexError, ValueError):
        return None


def tagged_pids(tag: bytes) -> list[int]:
    """Live processes whose initial environment holds ``tag`` (``CROSSDOCK_STATE_DIR=...``)."""
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                env = (entry / "environ").read_bytes().split(b"\0")
                if tag in env and (entry / "stat").read_text().split(") ")[1][0] != "Z":
                    out.append(int(entry.name))
            except OSError:
                continue
    return sorted(out)


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _kill(pid: int, sig: int = signal.SIGKILL) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


@dataclass
class ChaosRun:
    """One run: start it, ``drive`` it through the faults, then judge every job."""
    root: Path
    config: dict
    seed: int
    n: int
    faults: list[Fault]
    waves: int = 5
    wave_every: float = 4.0
    recover_timeout: float = 180.0
    up_workers: int = 8
    arrays: float = 0.03
    """The share of submissions that are arrays."""
    min_gap: float = 2.0
    """Seconds between the end of one fault and the next."""
    env: dict[str, str] = field(default_factory=dict)
    actions: dict[str, Callable[["ChaosRun", Fault], str]] = field(default_factory=dict)
    """Extra fault kinds (a Slurm controller restart…): each does the fault and describes it."""

    def __post_init__(self) -> None:
        self.state, self.marks = self.root / "state", self.root / "marks"
        for d in (self.state, self.marks, self.root / "out"):
            d.mkdir(parents=True, exist_ok=True)
        # Jobs on Slurm run as the cluster's job user: it must reach the marks and output folders.
        self.root.chmod(0o755)
        for d in (self.marks, self.root / "out"):
            d.chmod(0o777)
        (self.root / "crossdock.yaml").write_text(yaml.safe_dump(self.config))
        self.rng = random.Random(self.seed)
        self.plans = workload(self.rng, self.n, self.arrays)
        self.tag = f"CROSSDOCK_STATE_DIR={self.state}".encode()
        # Each run its own installation: the store's key prefix is also the tag of its Slurm jobs,
        # and a run that reused the last one's would take that run's jobs, still in slurmctld's
        # memory (MinJobAge), for its own jobs of the same ids.
        self.prefix = f"chaos{uuid.uuid4().hex[:8]}"
        self.up_env = {**os.environ, "PYTHONPATH": str(REPO), "CROSSDOCK_STATE_DIR": str(self.state),
                       "CROSSDOCK_CONFIG": str(self.root / "crossdock.yaml"), "CROSSDOCK_PREFIX": self.prefix,
                       **self.env}
        self.up_env.pop("CROSSDOCK_REDIS_URL", None)  # the embedded default
        self.rt: Runtime | None = None
        """The harness's own store client, made once Redis first runs (its URL carries the password made then)."""
        self.up: subprocess.Popen | None = None
        self.log: list[str] = []
        self.kills: Counter[str] = Counter()
        self.up_exits: list[str] = []
        self.jobs: dict[int, Plan] = {}
        self.t0 = time.monotonic()
        self.redis_down = threading.Event()
        self.last_fault_end = 0.0
        self.census: list[int] = []
        self.ended: list[tuple[float, int]] = []
        self.history = History()
        """(time, jobs ended) while waiting for the end: tells a stuck service from a slow one."""

    def note(self, text: str) -> None:
        self.log.append(f"t={time.monotonic() - self.t0:7.2f}s {text}")

    # --- the service -----------------------------------------------------------------------------
    def start_redis(self) -> None:
        url = embedded.ensure_running(self.state, timeout=60)
        if self.rt is None:
            self.rt = Runtime(Settings(self.state, None, self.root / "crossdock.yaml", self.prefix), url)

    def restore_redis(self, killed_at: float) -> None:
        self.start_redis()
        self.last_fault_end = time.monotonic()
        self.note(f"redis restarted, answering again after {self.last_fault_end - killed_at:.1f}s down")
        self.redis_down.clear()

    def redis_pid(self) -> int | None:
        try:
            return int((self.state / "redis" / "redis.pid").read_text())
        except (OSError, ValueError):
            return None

    def start_up(self) -> None:
        out = open(self.root / "up.log", "ab")
        out.write(f"--- up started at t={time.monotonic() - self.t0:.2f}s\n".encode())
        out.flush()
        self.up = subprocess.Popen([sys.executable, "-m", "crossdock", "up", "--workers", str(self.up_workers)],
                                   env=self.up_env, cwd=self.root, stdout=out, stderr=out,
                                   stdin=subprocess.DEVNULL, start_new_session=True)
        out.close()

    def workers(self) -> list[int]:
        """Celery processes of this run, main processes first (a pool child's parent is one)."""
        pids = [p for p in tagged_pids(self.tag) if "celery" in cmdline(p)]
        mains = [p for p in pids if (_stat(p) or (0, 0))[0] not in pids]
        return mains + [p for p in pids if p not in mains]

    def watch_up(self) -> None:
        """The operator: restart ``up`` whenever it is gone (once a planned Redis outage is over)."""
        if self.up is not None and self.up.poll() is not None:
            self.up_exits.append(f"rc={self.up.returncode}")
            self.note(f"up (pid {self.up.pid}) exited rc={self.up.returncode}")
            self.up = None
        if self.up is None and not self.redis_down.is_set():
            self.start_up()
            self.note(f"up started (pid {self.up.pid})")

    # --- faults ----------------------------------------------------------------------------------
    def inject(self, fault: Fault) -> None:
        self.history.fault(f"{fault.kind} {fault.outage:.0f}s" if fault.outage else fault.kind)
        if fault.kind in self.actions:
            self.note(self.actions[fault.kind](self, fault))
        elif fault.kind == "worker":
            pids = self.workers()
            if not pids:
                self.note("kill worker: no Celery process alive")
                return
            pid = self.rng.choice(pids)
            _kill(pid)
            self.note(f"SIGKILL worker pid {pid} ({'main' if pid == pids[0] else 'pool'} of {len(pids)})")
        elif fault.kind in ("scheduler", "group") and self.up is not None:
            (_kill(self.up.pid) if fault.kind == "scheduler" else os.killpg(self.up.pid, signal.SIGKILL))
            self.note(f"SIGKILL {'up' if fault.kind == 'scheduler' else 'process group of up'} pid {self.up.pid}")
        elif fault.kind == "redis":
            pid = self.redis_pid()
            _kill(pid) if pid else None
            self.redis_down.set()
            # A timer, not the main loop: a store call of the harness may block for redis-py's retries.
            threading.Timer(fault.outage, self.restore_redis, (time.monotonic(),)).start()
            self.note(f"SIGKILL redis pid {pid}, back in {fault.outage:.0f}s")
        else:
            self.note(f"{fault.kind}: up not running")
            return
        self.kills[f"{fault.kind} {fault.outage:.0f}s" if fault.kind == "redis" else fault.kind] += 1

    def submit_wave(self, plans: list[Plan], wave: int) -> None:
        """As a careful user does: retry on a store error with the same idempotency token."""
        from crossdock import service

        specs = [p.spec(self.marks, self.root) for p in plans]
        token = f"chaos-{self.seed}-{wave}"
        keys = [p.key + (f"_{i}" if p.tasks else "") for p in plans for i in range(p.tasks or 1)]
        deadline, tries = time.monotonic() + 120, 0
        while True:
            try:
                jobs = submit(self.history, keys, lambda: service.submit(self.rt, specs, token=token), key_of,
                              STORE_DOWN)
                break
            except STORE_DOWN as exc:
                if time.monotonic() > deadline:
                    raise
                tries += 1
                if tries == 1:
                    self.note(f"submit wave {wave}: {type(exc).__name__}; retrying with the same token")
                self.tick(0.5)
        it = iter(jobs)
        for p in plans:
            for _ in range(p.tasks or 1):
                self.jobs[next(it).id] = p
        self.note(f"submitted wave {wave}: {len(jobs)} jobs" + (f" (after {tries} retries)" if tries else ""))

    def tick(self, seconds: float) -> None:
        end = time.monotonic() + seconds
        while True:
            self.watch_up()
            if time.monotonic() >= end:
                return
            time.sleep(min(0.2, max(end - time.monotonic(), 0)))

    def drive(self) -> float:
        """Submit, inject every fault, then wait for every job to end; the seconds to recover."""
        self.start_redis()
        self.t0 = self.last_fault_end = time.monotonic()
        self.watch_up()
        waves = [self.plans[i::self.waves] for i in range(self.waves)]
        events = sorted([(i * self.wave_every, "wave", i) for i in range(self.waves)] +
                        [(f.at, "fault", k) for k, f in enumerate(self.faults)])
        for at, what, i in events:
            self.tick(max(self.t0 + at - time.monotonic(), 0))
            if what == "wave":
                self.submit_wave(waves[i], i)
                continue
            # One fault at a time: the previous one is over (Redis back, up running a while).
            while self.redis_down.is_set() or self.up is None:
                self.tick(0.2)
            self.tick(max(self.last_fault_end + self.min_gap - time.monotonic(), 0))
            self.inject(self.faults[i])
            if self.faults[i].kind != "redis":
                self.last_fault_end = time.monotonic()
        while self.redis_down.is_set():
            self.tick(0.2)
        deadline = time.monotonic() + self.recover_timeout
        self.ended.clear()
        while time.monotonic() < deadline:
            try:
                # Two counters, not every job read: the store holds this run's jobs alone, and reading
                # 2,000 of them twice a second took about a sixth of the whole run's CPU.
                self.ended.append((time.monotonic(), len(self.jobs) - self.rt.store.unfinished_count()))
                if self.ended[-1][1] == len(self.jobs):
                    break
            except STORE_DOWN:
                pass
            self.tick(0.5)
        return time.monotonic() - self.last_fault_end

    def stop(self) -> None:
        """SIGTERM ``up``, then SIGKILL whatever of this run is left (orphans included); the store
        stays readable (Redis is not one of them) until :meth:`stop_redis`."""
        alive = self.workers()
        self.census = [p for p in alive if (_stat(p) or (0, 0))[0] not in alive]
        if self.up is not None and self.up.poll() is None:
            started = time.monotonic()
            os.killpg(self.up.pid, signal.SIGTERM)
            try:
                self.up.wait(30)
                self.note(f"up stopped {time.monotonic() - started:.1f}s after SIGTERM, rc={self.up.returncode}")
            except subprocess.TimeoutExpired:
                self.note("up did not stop within 30s of SIGTERM")
        redis = self.redis_pid()  # an embedded Redis that ``up`` restarted carries its tag: kept for the report
        for pid in tagged_pids(self.tag):
            if pid != redis:
                _kill(pid)

    def stop_redis(self) -> None:
        pid = self.redis_pid()
        if pid:
            _kill(pid)

    # --- the oracle ------------------------------------------------------------------------------
    def runs(self, job: Job) -> list[tuple[str, int, str, float | None]]:
        """The start and end marks of ``job``'s runs, in the order written."""
        try:
            return parse_marks((self.marks / key_of(job)).read_text())
        except FileNotFoundError:
            return []

    def marks_of(self, job: Job, plan: Plan) -> tuple[list[int], list[int]]:
        marks = self.runs(job)
        return [a for w, a, _, _ in marks if w == "start"], [a for w, a, _, _ in marks if w == "end"]

    def judge(self) -> list[Verdict]:
        return judge(self)

    def observe(self) -> None:
        """End the history: every job the store holds, its transitions and its runs. A Redis that
        ``up`` started again after a kill is in ``up``'s process group, and its SIGTERM stopped it
        too: it starts again from its AOF (nothing else of the run is alive to change it)."""
        self.start_redis()
        for job in observe_store(self.history, self.rt.store, key_of):
            observe_runs(self.history, job.id, self.runs(job))
        self.history.dump(self.root / "history.jsonl")


def key_of(job: Job) -> str:
    """A chaos job's key (its plan's, and its array task's): the argument its command writes marks under."""
    return job.spec.command[5] + (f"_{job.array_task_id}" if job.array_task_id is not None else "")


def local_config(cpus: int = 64) -> dict:
    """The embedded default's shape, one local node declaring many CPUs so short jobs overlap."""
    return {
        "priority_classes": {"batch": {"value": 500}},
        "pools": {"local": {"backend": "local", "nodes": [{"name": "localhost", "cpus": cpus, "memory_mib": 65536}]}},
        "queues": {"batch": {"priority_class": "batch", "pools": ["local"]}},
        "default_queue": "batch",
        "scheduler": {"interval_seconds": 0.2, "lease_seconds": 3, "kill_wait_seconds": 2,
                      "min_job_age_seconds": 3600},
    }


def run_chaos(run: ChaosRun) -> tuple[list[Verdict], str]:
    """Drive ``run``, judge it, stop everything it started; the verdicts and the printed table.
    ``run.history`` then holds the run's whole history, for :func:`tests.chaos.checker.check`."""
    print(f"chaos seed {run.seed} (replay: CROSSDOCK_CHAOS_SEED={run.seed})", flush=True)
    try:
        try:
            recover = run.drive()
            verdicts = run.judge()
        finally:
            run.stop()  # freezes the store: the events printed match the states judged
        text = report(run, verdicts, recover)
        print(text, flush=True)
        run.observe()  # the store as stop() froze it
    finally:
        run.stop_redis()
    return verdicts, text
