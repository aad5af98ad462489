"""One scheduling leader under a Redis lease; a standby takes over when the leader dies."""

import threading
import time

import pytest

from crossdock import service
from crossdock.queue.models import JobSpec
from crossdock.queue.states import JobState
from crossdock.workers.leader import Scheduler
from tests.waiting import eventually

pytestmark = pytest.mark.redis


def lease_attempts(store, monkeypatch, before=lambda: None) -> list[tuple]:
    """Record every ``acquire_lease`` call: (holder, got it, what ``before()`` said just before)."""
    calls: list[tuple] = []
    acquire = store.acquire_lease

    def recorded(holder, seconds):
        seen = before()
        got = acquire(holder, seconds)
        calls.append((holder, got, seen))
        return got

    monkeypatch.setattr(store, "acquire_lease", recorded)
    return calls


def test_standby_takes_over_at_its_first_try_after_the_leaders_lease_lapses(runtime, tmp_path, monkeypatch):
    store = runtime.store
    lease = runtime.config.scheduler.lease_seconds
    assert store.acquire_lease("leader-a", lease)  # leader a holds the lease, then dies without releasing
    sent = []
    standby = Scheduler(runtime, lambda name, args, kind: sent.append((name, args[0])), holder="standby-b")
    job, = service.submit(runtime, [JobSpec(command=["true"], workdir=str(tmp_path))])
    attempts = lease_attempts(store, monkeypatch, lambda: (len(sent), store.get(job.id).state, store.lease_holder()))
    stop = threading.Event()
    t = threading.Thread(target=standby.run, args=(stop,), daemon=True)
    t.start()
    try:
        eventually("the standby's dispatch", lambda: sent)
        assert sent == [("crossdock.dispatch", job.id)]
        assert store.lease_holder() == "standby-b"
        assert store.get(job.id).state is JobState.SCHEDULED
    finally:
        stop.set()
        t.join(5)
    assert store.lease_holder() is None  # released on a clean stop
    # A standby does not schedule: each try that found the lease taken found it still leader a's,
    # with nothing sent and the job waiting; the first try after it lapsed took it (so a takeover
    # comes one turn of the standby's loop, a third of a lease, after the lease ends).
    got = [g for _h, g, _seen in attempts]
    first = got.index(True)
    assert first >= 1 and not any(got[:first])
    assert all(seen == (0, JobState.PENDING, "leader-a") for _h, _g, seen in attempts[:first])
    assert attempts[first][2][:2] == (0, JobState.PENDING)


def dispatched(sent: list) -> int:
    """Jobs the sends dispatch: one each, or a batch's pairs (one cycle's local jobs go together)."""
    return sum(len(args[0]) if name == "crossdock.dispatch_batch" else 1 for name, args, *_ in sent)


def test_only_the_leader_schedules(runtime, tmp_path, monkeypatch):
    sent_a, sent_b = [], []
    a = Scheduler(runtime, lambda *x: sent_a.append(x), holder="a")
    b = Scheduler(runtime, lambda *x: sent_b.append(x), holder="b")
    attempts = lease_attempts(runtime.store, monkeypatch, lambda: dispatched(sent_a) + dispatched(sent_b))
    stop = threading.Event()
    threads = [threading.Thread(target=s.run, args=(stop,), daemon=True) for s in (a, b)]
    for th in threads:
        th.start()
    # Both loops are running (each tried the lease) before there is work, and each goes round
    # once more after the last send: the one without the lease had every chance to send too.
    eventually("a try at the lease by each", lambda: {h for h, _, _ in attempts} == {"a", "b"})
    service.submit(runtime, [JobSpec(command=["true"], workdir=str(tmp_path)) for _ in range(3)])
    eventually("all three sent and a turn of each loop after",
               lambda: {h for h, _, sent in attempts if sent >= 3} == {"a", "b"}, timeout=30)
    stop.set()
    for th in threads:
        th.join(5)
    assert sorted([dispatched(sent_a), dispatched(sent_b)]) == [0, 3]


def test_fair_share_usage_accrues_while_nothing_is_pending(runtime):
    """A job that runs while nobody waits is charged all the same, cycle after cycle."""
    from crossdock.backends.redis_store.store import utcnow
    from crossdock.queue.models import Job

    store = runtime.store
    (job,) = store.submit([Job(id=0, spec=JobSpec(command=["true"], user="alice"), queue="preprocessing",
                               priority_class="preprocessing", pools=["local"])])
    assert store.transition(job.id, JobState.SCHEDULED, bump_attempt=True,
                            fields={"nodes": ["localhost"], "pool": "local", "backend": "local",
                                    "alloc_cpu_milli": 4000, "alloc_mem_mib": 1024})
    assert store.transition(job.id, JobState.RUNNING, fields={"start_time": utcnow()})
    sched = Scheduler(runtime, lambda *a: None)
    sched.inventory()  # a cycle once ran: the inventory is cached
    assert store.pending_count() == 0
    sched.cycle_once()  # the first accrual starts the clock
    first, at = store.usage()
    eventually("time to pass", lambda: time.time() > at + 0.05)
    sched.cycle_once()
    usage, later = store.usage()
    assert later > at and sum(usage.values()) > sum(first.values()) >= 0
    assert any("alice" in key for key in usage), usage


def test_a_preemption_names_its_preemptor_in_the_victims_events(runtime):
    """The victim's events say which job it made room for, as users name it (an array task 12_3)."""
    from crossdock.backends.redis_store.store import utcnow
    from crossdock.cli.render import describe
    from crossdock.queue.models import ArraySpec, Job
    from crossdock.queue.scheduler.decisions import CycleResult, Preemption

    store = runtime.store
    base = dict(queue="preprocessing", priority_class="preprocessing", pools=["local"])
    victim, = store.submit([Job(id=0, spec=JobSpec(command=["sleep", "60"], user="alice"), **base)])
    array_spec = JobSpec(command=["true"], user="bob", array=ArraySpec(task_ids=[0, 3]))
    _, task = store.submit([Job(id=0, spec=array_spec, array_job_id=-1, array_task_id=t, **base) for t in (0, 3)])
    store.transition(victim.id, JobState.SCHEDULED, bump_attempt=True,
                     fields={"nodes": ["localhost"], "pool": "local", "backend": "local"})
    store.transition(victim.id, JobState.RUNNING, fields={"start_time": utcnow()})
    sent = []
    Scheduler(runtime, lambda *a: sent.append(a)).commit(
        CycleResult(preemptions=[Preemption(victim.id, task.id, 30)]), {j.id: j for j in store.get_many([victim.id, task.id])})
    assert sent == [("crossdock.preempt", [victim.id, 30, 1], "local")]  # attempt 1 only
    note, = [e for e in store.events(victim.id) if e.get("event") == "preempting"]
    assert note["preemptor"] == str(task.id)
    assert describe(note).endswith(f"reason: for job {task.array_job_id}_3")
