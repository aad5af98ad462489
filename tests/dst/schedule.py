"""Deterministic simulation of the control plane: one seeded schedule of the real leader
(``workers.leader.Scheduler``, its cycle and its follower), the real dispatch, cancel and preempt
task bodies (``workers.tasks``), users, and faults, over :mod:`tests.dst.world`.

``run(seed)`` draws from ``random.Random(seed)``, step by step, which actor goes next (one of two
leaders contending for the lease, a worker delivering a ready message, a user submitting or
cancelling, the clock moving) and which fault strikes (a message dropped, duplicated or delayed,
the store away for a while from the middle of a step, backend calls failing or their answers
lost, a dispatch worker dying between its claim and its submit or after it, a leader crashing or
pausing past its lease). Then the faults stop, the system runs until every job has ended, and the
history (:mod:`tests.chaos.history`'s format) goes to :func:`tests.chaos.checker.check`, beside
this simulation's own invariants. Same seed, same history.
"""

from __future__ import annotations

import random
from contextlib import contextmanager
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any, Iterator

from crossdock.backends.registry import BackendContext, Backends
from crossdock.queue.config import parse_config
from crossdock.queue.errors import StoreUnavailable
from crossdock.queue.admission import admit
from crossdock.backends.fake.backend import declared_nodes
from crossdock.queue.models import Job, JobSpec
from crossdock.queue.states import JobState
from crossdock.workers import tasks as worker_tasks
from crossdock.workers.follow import UNAVAILABLE
from crossdock.workers.leader import Scheduler
from tests.chaos.checker import check
from tests.chaos.history import INFO, INVOKE, OK, History
from tests.dst.world import Bus, Crash, Flaky, Message, Outage, SimBackend, SimClock, SimStore

POOL = "box"
CONFIG = {
    "priority_classes": {"low": {"value": 100, "preemptible": True, "grace_seconds": 5},
                         "high": {"value": 1000}},
    "pools": {POOL: {"backend": "fake", "nodes": [{"name": "n0", "cpus": 4, "memory_mib": 4096},
                                                   {"name": "n1", "cpus": 4, "memory_mib": 4096}]}},
    "queues": {"low": {"priority_class": "low", "pools": [POOL]}, "high": {"priority_class": "high", "pools": [POOL]}},
    "default_queue": "low",
    "scheduler": {"lease_seconds": 10},
}
RUN_SECONDS = (0, 5, 30, 90)
STOP_WITHIN = 120.0
"""Once the faults are over, a standing cancel or preemption has stopped its job within this long."""
DRAIN_SECONDS = 3000.0
STEPS = 80
"""Steps of one schedule while faults strike."""


class Retry(Exception):
    def __init__(self, countdown: float):
        self.countdown = countdown


@dataclass
class Violation:
    rule: str
    detail: str

    def __str__(self) -> str:
        return f"{self.rule}: {self.detail}"


@dataclass
class Outcome:
    seed: int
    history: History
    violations: list[Violation] = field(default_factory=list)
    steps: int = 0
    jobs: int = 0
    faults: dict[str, int] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.violations


class _Task:
    """``self`` of a bound Celery task body: its delivery's request, and ``retry``."""

    def __init__(self, message: Message):
        self.request = SimpleNamespace(id=message.task_id, retries=message.retries,
                                       delivery_info={"redelivered": message.redelivered})

    def retry(self, exc: Exception | None = None, countdown: float = 0) -> Retry:
        raise Retry(countdown)


class _Runtime:
    """What the leader and the task bodies read of a process's runtime."""

    def __init__(self, store: Any, config: Any, backends: Backends):
        self.store, self.config, self.backends = store, config, backends
        self.settings = SimpleNamespace(state_dir=None)
        self.switched_by_leader = True

    def refresh_config(self) -> bool:
        return False


class Sim:
    def __init__(self, seed: int, steps: int = STEPS):
        self.seed, self.steps = seed, steps
        self.rng = random.Random(seed)
        self.clock = SimClock()
        self.store = SimStore(self.clock)
        self.flaky = Flaky(self.store, self.clock)
        self.config = parse_config(CONFIG)
        self.backend = SimBackend(self.config, self.flaky, self.clock, self.rng)
        self._nodes = declared_nodes(self.config)
        self.faulty = True
        self.bus = Bus(self.rng, self.clock, lambda: self.faulty)
        self.history = History()
        self.out = Outcome(seed, self.history)
        self.leaders: dict[str, Scheduler | None] = {"a": None, "b": None}
        self.turns: dict[str, Iterator[None] | None] = {"a": None, "b": None}
        self.built = 0
        self.acked: dict[str, int] = {}
        self.cancels: dict[int, float] = {}
        """Acknowledged cancels: job id -> when."""
        self.running: dict[str, tuple[int, int]] = {}
        self.crash_next = ""
        self.forgotten: dict[tuple[int, int], Any] = {}
        """Backend objects a "forget" fault erased, by (job id, attempt)."""
        self.nodes_back: dict[str, float] = {}
        """Failed nodes -> when they come back."""

    # --- the actors ---------------------------------------------------------------------------
    def _runtime(self) -> _Runtime:
        backends = Backends(BackendContext(self.config, self.flaky, None, {}, {}))
        backends.use("fake", self.backend)
        return _Runtime(self.flaky, self.config, backends)

    def _leader(self, slot: str) -> Scheduler:
        if self.leaders[slot] is None:
            self.built += 1
            holder = f"leader-{slot}{self.built}"
            self.store.leaders.add(holder)
            self.leaders[slot] = Scheduler(self._runtime(), self.bus.send, holder=holder, clock=self.clock)
        return self.leaders[slot]  # type: ignore[return-value]

    def _turn(self, slot: str) -> Iterator[None]:
        """One turn of the leader's loop (``Scheduler._turn``), with a point between its steps
        where the process may pause while the others go on."""
        sched = self._leader(slot)
        sched.leader = self._guard(slot, lambda: self.flaky.acquire_lease(sched.holder, 10.0))
        if not sched.leader:
            return
        yield
        self._guard(slot, sched.cycle_once)
        yield
        self._guard(slot, sched.reconcile)

    def _guard(self, who: str, fn: Any) -> Any:
        """A step as the loop's part runs it: the store or a backend away is logged and retried."""
        try:
            return fn()
        except (StoreUnavailable, *UNAVAILABLE):
            return None
        except Crash:
            raise
        except Exception as exc:  # noqa: BLE001 - the loop would survive it; the simulation reports it
            self.violate("uncaught", f"{who}: {type(exc).__name__}: {exc}")
            return None

    def step_leader(self, slot: str) -> None:
        if self.turns[slot] is None:
            self.turns[slot] = self._turn(slot)
        try:
            next(self.turns[slot])  # type: ignore[arg-type]
        except StopIteration:
            self.turns[slot] = None

    def deliver(self, message: Message) -> None:
        self.bus.take(message)
        worker = _Task(message)
        crash, self.crash_next = self.crash_next, ""
        rt = self._runtime()
        body = {"crossdock.dispatch": worker_tasks.dispatch.run.__wrapped__,
                "crossdock.cancel": worker_tasks.cancel.run, "crossdock.preempt": worker_tasks.preempt.run}[message.name]
        args = [worker, *message.args] if message.name == "crossdock.dispatch" else message.args
        with _worker_runtime(rt):
            try:
                if crash == "before submit":
                    self.backend.crash_at = "submit"
                try:
                    body(*args)
                except Crash:
                    raise
                finally:
                    if message.name == "crossdock.dispatch" and not self.backend.crashed:
                        # as ``_keeps_alive`` does, unless the worker was killed
                        self._guard("worker", lambda: self.flaky.dispatching(
                            f"{worker_tasks.socket.gethostname()}:{message.task_id}", alive=False))
                if crash == "after task":
                    raise Crash()
            except Retry as retry:
                self.bus.put(Message(self.clock() + retry.countdown, 0, message.name, message.args, message.queue,
                                     message.task_id, message.retries + 1))
            except Crash:
                if self.rng.random() < 0.5:  # acks late: the broker delivers it again, to another worker
                    self.bus.put(Message(self.clock() + self.rng.uniform(1, 30), 0, message.name, message.args,
                                         message.queue, message.task_id, message.retries, redelivered=True))
            except (StoreUnavailable, *UNAVAILABLE):
                pass  # the task failed; Celery does not send it again
            except Exception as exc:  # noqa: BLE001
                self.violate("uncaught", f"task {message.name}{message.args}: {type(exc).__name__}: {exc}")
            finally:
                self.backend.crash_at, self.backend.crashed = "", False

    def submit(self) -> None:
        n = self.rng.randint(1, 2)
        keys = [f"k{self.out.jobs + i}" for i in range(n)]
        self.out.jobs += n
        jobs = [self._job(k) for k in keys]
        invoked = self.history.add("client", INVOKE, "submit", keys, at=self.clock())
        try:
            stored = self.flaky.submit(jobs, actor="user")
        except StoreUnavailable as exc:
            self.history.add("client", INFO, "submit", keys, at=self.clock(), error=type(exc).__name__)
            return
        done = {j.spec.name: j.id for j in stored}
        self.acked.update(done)
        self.history.add("client", OK, "submit", done, at=self.clock())
        del invoked

    def _job(self, key: str) -> Job:
        queue = "high" if self.rng.random() < 0.25 else "low"
        seconds = self.rng.choice(RUN_SECONDS)
        code = 3 if self.rng.random() < 0.2 else 0
        spec = JobSpec(name=key, user="sim", command=["true"], queue=queue, cpus_per_task=self.rng.choice((1, 2, 4)),
                       requeue=self.rng.random() < 0.7,
                       env={"CROSSDOCK_SIMULATE_RUN_SECONDS": str(seconds), "CROSSDOCK_SIMULATE_EXIT_CODE": str(code)})
        (job,) = admit(spec, self.config, self._nodes, self.store._now())  # as a face builds the record
        return job

    def cancel(self) -> None:
        if not self.acked:
            return
        job_id = self.rng.choice(sorted(self.acked.values()))
        self.history.add("client", INVOKE, "cancel", job_id, job=job_id, at=self.clock())
        try:
            state = self.flaky.cancel(job_id, actor="user")
            if not state.terminal and state is not JobState.PENDING:
                job = self.flaky.get(job_id)
                if job.backend:
                    self.bus.send("crossdock.cancel", [job_id], job.backend)
        except StoreUnavailable as exc:
            self.history.add("client", INFO, "cancel", job_id, job=job_id, at=self.clock(), error=type(exc).__name__)
            return
        self.cancels.setdefault(job_id, self.clock())
        self.history.add("client", OK, "cancel", job_id, job=job_id, at=self.clock())

    # --- faults -------------------------------------------------------------------------------
    def fault(self) -> None:
        kind = self.rng.choice(("store", "backend", "crash leader", "pause", "crash worker", "crash worker",
                                "node", "forget"))
        self.out.faults[kind] = self.out.faults.get(kind, 0) + 1
        self.history.add("nemesis", INFO, "fault", kind, at=self.clock())
        if kind == "store":
            self.flaky.outage = Outage(self.rng.randint(0, 40), self.clock() + self.rng.uniform(1, 40))
        elif kind == "backend":
            self.backend.error_rate = self.rng.uniform(0.2, 1.0)
            self.backend.error_until = self.clock() + self.rng.uniform(5, 60)
        elif kind == "crash leader":
            slot = self.rng.choice(("a", "b"))
            self.leaders[slot], self.turns[slot] = None, None  # its memory is gone; its lease expires
        elif kind == "pause":
            self.clock.advance(self.rng.uniform(5, 25))  # a GC pause or a slow cycle, mid-turn for some
        elif kind == "node":  # every job on it ends NODE_FAIL; back a while later
            node = self.rng.choice(sorted(n.name for n in self._nodes))
            self.backend.fail_node(node)
            self.nodes_back[node] = self.clock() + self.rng.uniform(10, 120)
        elif kind == "forget":  # the backend loses one job's record
            known = sorted({i for i, _a in self.backend.jobs})
            if known:
                lost = self.backend.get(self.rng.choice(known))
                self.forgotten[(lost.job_id, lost.attempt)] = lost  # what it did stays known to the checks
                self.backend.forget(lost.job_id)
        else:
            self.crash_next = self.rng.choice(("before submit", "after task"))

    def _nodes_return(self, every: bool = False) -> None:
        for node, at in sorted(self.nodes_back.items()):
            if every or at <= self.clock():
                self.backend.restore_node(node)
                del self.nodes_back[node]

    # --- the schedule -------------------------------------------------------------------------
    def step(self) -> None:
        self._nodes_return()
        r = self.rng.random()
        ready = self.bus.ready()
        if r < 0.30:
            self.step_leader(self.rng.choice(("a", "b")))
        elif r < 0.50 and ready:
            self.deliver(self.rng.choice(ready))
        elif r < 0.58:
            self.submit()
        elif r < 0.65:
            self.cancel()
        elif r < 0.72 and self.faulty:
            self.fault()
        else:
            self.clock.advance(self.rng.uniform(0.1, 8))

    def observe(self) -> None:
        """Runs that started or ended since the last look; no job runs twice at once."""
        now = {r.ref: (r.job, r.attempt) for r in self.backend.running()}
        for ref, (job, attempt) in now.items():
            if ref not in self.running:
                self.history.add("backend", OK, "start", {"attempt": attempt, "pid": ref}, job=job, at=self.clock())
        for ref, (job, attempt) in self.running.items():
            if ref not in now:
                self.history.add("backend", OK, "end", {"attempt": attempt, "pid": ref}, job=job, at=self.clock())
        by_job: dict[int, list[str]] = {}
        for ref, (job, _a) in now.items():
            by_job.setdefault(job, []).append(ref)
        for job, refs in by_job.items():
            if len(refs) > 1 and (job, tuple(refs)) not in self._overlaps:
                self._overlaps.add((job, tuple(refs)))
                self.violate("runs twice at once", f"job {job}: {sorted(refs)} at t={self.clock() - self._t0:.1f}")
        self.running = now
        self._capacity()

    def _capacity(self) -> None:
        """No node holds more CPUs than it has: what the placed jobs were given on it, summed."""
        held: dict[str, int] = {}
        for job in self.store.get_many(self.store.active_ids()):
            for node in job.nodes:
                held[node] = held.get(node, 0) + job.alloc_cpu_milli // max(len(job.nodes), 1)
        for node in self._nodes:
            if held.get(node.name, 0) > node.cpu_milli and node.name not in self._overbooked:
                self._overbooked.add(node.name)
                self.violate("over-committed", f"node {node.name}: {held[node.name]} of {node.cpu_milli} mCPU "
                                               f"placed at t={self.clock() - self._t0:.1f}")

    def violate(self, rule: str, detail: str) -> None:
        self.out.violations.append(Violation(rule, detail))

    def run(self) -> Outcome:
        self._overlaps: set = set()
        self._overbooked: set[str] = set()
        self._t0 = self.clock()
        for _ in range(self.steps):
            self.step()
            self.observe()
            self.out.steps += 1
        self.quiesce()
        return self.out

    def quiesce(self) -> None:
        """No more faults or users: the leaders, the workers and the clock go on until every job ended."""
        self.faulty, self.flaky.outage, self.backend.error_rate, self.crash_next = False, None, 0.0, ""
        self._nodes_return(every=True)
        calm = self.clock()
        stops: dict[tuple[int, int], float] = {}
        while self.clock() - calm < DRAIN_SECONDS:
            for slot in ("a", "b"):
                while True:
                    self.step_leader(slot)
                    if self.turns[slot] is None:
                        break
            for message in self.bus.ready():
                self.deliver(message)
            self.observe()
            self._stops_carried_out(stops)
            if all(j.state.terminal for j in self.store.get_many(self.store.all_ids())) and not self.bus.queue:
                break
            self.clock.advance(10)
        self._final()

    def _stops_carried_out(self, seen: dict[tuple[int, int], float]) -> None:
        """A cancel or preemption is never lost: once the faults are over, nothing asked to stop
        runs STOP_WITHIN s later (``seen``: when each running attempt was first seen asked)."""
        running = {r.job: r for r in self.backend.running()}
        for job in self.store.get_many(sorted(running)):
            if running[job.id].attempt != job.attempts:
                continue
            cancel = job.cancel_requested or job.id in self.cancels
            if not (cancel or job.preempt_requested):
                continue
            key = (job.id, job.attempts)
            since = seen.setdefault(key, self.clock())
            if self.clock() - since > STOP_WITHIN:
                seen[key] = float("inf")  # reported once
                self.violate(f"{'cancel' if cancel else 'preemption'} lost",
                             f"job {job.id} attempt {job.attempts} still runs {STOP_WITHIN:.0f}s after the faults"
                             f" ended ({job.state.value})")

    def _final(self) -> None:
        for job in self.store.get_many(self.store.all_ids()):
            for ev in self.store.events(job.id):
                if "to" in ev and ev.get("event", "submitted") == "submitted":
                    self.history.add("store", OK, "transition", {"from": ev.get("from"), "to": ev["to"],
                                     "actor": ev.get("actor", ""), "reason": ev.get("reason", "")},
                                     job=job.id, at=float(ev["time"]))
        jobs = self.store.get_many(self.store.all_ids())
        self.history.add("store", OK, "read", {str(j.id): {"key": j.spec.name, "state": j.state.value} for j in jobs},
                         at=self.clock())
        verdict = check(self.history)
        self.out.violations += [Violation(a.rule, f"job {a.job}: {a.detail}") for a in verdict.anomalies]
        self._true_states(jobs)
        for job_id, writer, holder, at in self.store.stale_writes:
            self.violate("two leaders", f"job {job_id}: {writer} wrote while {holder} held the lease "
                                        f"(t={at - self._t0:.1f})")

    def _true_states(self, jobs: list[Job]) -> None:
        """Each job's final state is what its backend did to its last attempt; nothing is left running."""
        for job in jobs:
            obj = self.backend.jobs.get((job.id, job.attempts)) or self.forgotten.get((job.id, job.attempts))
            if job.state in (JobState.COMPLETED, JobState.FAILED) and (obj is None or obj.state is not job.state):
                self.violate("untrue end", f"job {job.id} ended {job.state.value}; its backend's attempt "
                                           f"{job.attempts} is {obj.state.value if obj else 'absent'}")
        for obj in self.backend.jobs.values():
            if obj.state in (JobState.RUNNING, JobState.PENDING):
                self.violate("left running", f"{obj.ref} still {obj.state.value} after every job ended")


@contextmanager
def _worker_runtime(rt: _Runtime) -> Iterator[None]:
    """The task bodies run in this process, on the simulation's runtime (as the contract suite's tasks)."""
    saved = worker_tasks.runtime
    worker_tasks.runtime = lambda: rt  # type: ignore[assignment]
    try:
        yield
    finally:
        worker_tasks.runtime = saved  # type: ignore[assignment]


def run(seed: int, steps: int = STEPS) -> Outcome:
    return Sim(seed, steps).run()
