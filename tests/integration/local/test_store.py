"""The Redis store against a real Redis: ids, idempotency, atomic transitions, events, the lease."""

from __future__ import annotations

import threading
import time
from datetime import datetime, timezone

import pytest

from crossdock.queue.errors import NoSuchJob
from crossdock.queue.models import Job, JobSpec
from crossdock.queue.states import JobState
from tests.waiting import eventually

pytestmark = pytest.mark.redis


def new(name="j", **kw):
    return Job(id=0, spec=JobSpec(name=name, command=["true"]), queue="q", **kw)


def test_ids_are_consecutive_integers(store):
    a = store.submit([new(), new()])
    b = store.submit([new()])
    assert [j.id for j in a] + [j.id for j in b] == [a[0].id, a[0].id + 1, a[0].id + 2]
    assert store.pending_ids()[-3:] == [j.id for j in a + b]


def test_same_token_twice_creates_one_job(store):
    first = store.submit([new()], token="tok-1")
    again = store.submit([new("other")], token="tok-1")
    assert [j.id for j in again] == [j.id for j in first]
    assert again[0].spec.name == "j"
    assert store.pending_ids().count(first[0].id) == 1


def test_concurrent_submissions_with_one_token_create_one_job(store):
    results = []

    def go():
        results.append(store.submit([new()], token="race")[0].id)

    threads = [threading.Thread(target=go) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(results)) == 1
    assert len(store.pending_ids()) == 1


def test_arrays_take_the_first_id_as_array_id(store):
    tasks = [new(array_job_id=-1, array_task_id=t) for t in (0, 4, 8)]
    jobs = store.submit(tasks)
    assert {j.array_job_id for j in jobs} == {jobs[0].id}
    assert store.resolve(f"{jobs[0].id}_4") == [jobs[1].id]
    assert store.resolve(str(jobs[0].id)) == [j.id for j in jobs]
    with pytest.raises(NoSuchJob):
        store.resolve(f"{jobs[0].id}_5")


def test_transitions_follow_the_table_atomically(store):
    j, = store.submit([new()])
    assert not store.transition(j.id, JobState.RUNNING)  # PENDING -> RUNNING is illegal
    assert store.transition(j.id, JobState.SCHEDULED, bump_attempt=True, fields={"nodes": ["n1"]})
    assert store.pending_ids() == [] and store.active_ids() == [j.id]
    assert not store.transition(j.id, JobState.RUNNING, attempt=2)  # stale attempt refused
    assert store.transition(j.id, JobState.RUNNING, attempt=1)
    assert store.transition(j.id, JobState.COMPLETED, fields={"exit_code": 0})
    got = store.get(j.id)
    assert (got.state, got.attempts, got.nodes, got.exit_code) == (JobState.COMPLETED, 1, ["n1"], 0)
    assert store.active_ids() == []
    assert [e["to"] for e in store.events(j.id)] == ["PENDING", "SCHEDULED", "RUNNING", "COMPLETED"]
    assert [e["job"] for e in store.events()][-3:] == [str(j.id)] * 3


def test_cancel_pending_is_immediate_and_placed_is_flagged(store):
    a, b = store.submit([new(), new()])
    assert store.cancel(a.id).cancelled_now
    assert store.get(a.id).state is JobState.CANCELLED
    store.transition(b.id, JobState.SCHEDULED, bump_attempt=True, fields={"backend": "local"})
    store.claim_dispatch([b.id], 1, "w")[0]
    out = store.cancel(b.id)
    assert not out.cancelled_now and out.backend == "local"
    assert store.get(b.id).cancel_requested
    # the watcher can no longer mark it RUNNING
    assert not store.transition(b.id, JobState.RUNNING, unless="cancel_requested")


def test_backlog_counts_pending_scheduled_and_running_jobs_per_queue(store):
    assert store.backlog() == {}
    a, b, c, d = store.submit([new(), new(), new(), new()])
    other, = store.submit([Job(id=0, spec=JobSpec(name="o", command=["true"]), queue="other")])
    store.transition(b.id, JobState.SCHEDULED, bump_attempt=True)
    store.transition(c.id, JobState.SCHEDULED, bump_attempt=True)
    store.transition(c.id, JobState.RUNNING, attempt=1)
    store.cancel(d.id)
    assert store.backlog() == {"q": 3, "other": 1}
    store.transition(c.id, JobState.COMPLETED, fields={"exit_code": 0})
    assert store.backlog() == {"q": 2, "other": 1}
    assert store.hold(a.id, True)  # a held job needs no replica until it is released
    assert store.backlog() == {"q": 1, "other": 1}
    assert store.hold(a.id, False)
    assert store.backlog() == {"q": 2, "other": 1}


def test_dispatch_claim_is_taken_once(store):
    j, = store.submit([new()])
    assert store.claim_dispatch([j.id], 1, "a")[0]
    assert not store.claim_dispatch([j.id], 1, "b")[0]
    assert store.claim_dispatch([j.id], 2, "b")[0]


def test_lease_has_one_holder_and_expires(store):
    lease = store.k.scheduler_lease
    assert store.acquire_lease("a", 5)
    assert not store.acquire_lease("b", 5)
    assert 0 < store.r.pttl(lease) <= 5000  # its length, as Redis keeps it
    store.r.pexpire(lease, 100)  # near its end, the holder renews: the lease has its length again
    assert store.acquire_lease("a", 5) and store.r.pttl(lease) > 100
    assert store.acquire_lease("a", 0.05)
    eventually("Redis to expire the lease", lambda: store.lease_holder() is None)
    assert store.acquire_lease("b", 5)
    store.release_lease("a")  # not the holder: no effect
    assert store.lease_holder() == "b"


def test_times_round_trip(store):
    now = datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc)
    j, = store.submit([new(submit_time=now)])
    assert store.get(j.id).submit_time == now


def _preempted(store, requeue=True, cancelled=False):
    (j,) = store.submit([Job(id=0, spec=JobSpec(command=["true"], requeue=requeue), queue="q")])
    store.transition(j.id, JobState.SCHEDULED, bump_attempt=True, fields={"nodes": ["n1"]})
    store.claim_dispatch([j.id], 1, "w")
    store.transition(j.id, JobState.RUNNING)
    before = time.time()
    assert store.request_preempt(j.id, 30)
    after = time.time()
    deadline = store.get(j.id).preempt_deadline
    assert deadline is not None and before + 30 - 0.001 <= deadline.timestamp() <= after + 30 + 0.001  # 30 s from the request
    if cancelled:
        store.cancel(j.id)  # a user, during the grace period
    assert store.transition(j.id, JobState.PREEMPTED, reason="Preempted")
    return j


@pytest.mark.parametrize("requeue, cancelled, state, reason", [
    (True, False, JobState.PENDING, "Preempted"),
    (False, False, JobState.CANCELLED, "Preempted"),
    (True, True, JobState.CANCELLED, "CancelledByUser"),
], ids=["requeued", "no-requeue-cancelled", "user-cancel-wins"])
def test_a_preempted_job_is_settled_in_one_place(store, requeue, cancelled, state, reason):
    j = _preempted(store, requeue, cancelled)
    store.settle_preempted(j.id, requeue)
    got = store.get(j.id)
    assert (got.state, got.reason) == (state, reason)
    if state is JobState.PENDING:
        assert (got.preempt_requested, got.preempt_deadline, got.nodes) == (False, None, [])
    # A second settle (another follower, a replay) changes nothing: a requeued job is not cancelled.
    store.settle_preempted(j.id, requeue)
    assert store.get(j.id).state is state


def test_a_jobs_events_are_a_list_in_order_and_old_streams_keep_working(store):
    [job] = store.submit([new()])
    # a queued job's one event lives in its hash: no key of its own (a one-entry list costs 280 B)
    assert store.r.type(store.k.job_events(job.id)) == "none"
    assert [e["event"] for e in store.events(job.id)] == ["submitted"]
    assert store.transition(job.id, JobState.SCHEDULED, actor="sched")
    assert store.r.type(store.k.job_events(job.id)) == "list"  # bytes per job, where a stream costs kilobytes
    store.record_refusal(job.id, "mallory", "cancel")
    events = store.events(job.id)
    assert [(e["event"] if "event" in e else e["to"]) for e in events] == ["submitted", "SCHEDULED", "refused"]
    assert events[1]["from"] == "PENDING" and events[1]["actor"] == "sched" and events[2]["actor"] == "mallory"
    assert all(isinstance(v, str) for e in events for v in e.values())  # as a stream's fields read
    ms = [int(e["id"].split("-")[0]) for e in events]
    assert ms == sorted(ms) and abs(ms[0] / 1000 - time.time()) < 60
    assert len({e["id"] for e in events}) == 3
    assert [e.get("event", e.get("to")) for e in store.read_events(job.id, after=events[0]["id"])] == ["SCHEDULED", "refused"]
    # a job stored by the version before, whose list starts with its submission
    [listed] = store.submit([new("listed")])
    store.r.hdel(store.k.job(listed.id), "ev0")
    store.r.rpush(store.k.job_events(listed.id), '{"event": "submitted", "to": "PENDING", "id": "1-0"}')
    assert store.transition(listed.id, JobState.SCHEDULED)
    assert [e.get("event", e.get("to")) for e in store.events(listed.id)] == ["submitted", "SCHEDULED"]
    # a job stored by an earlier version, whose events are a stream: written and read as before
    [old] = store.submit([new("old")])
    store.r.delete(store.k.job_events(old.id))
    store.r.xadd(store.k.job_events(old.id), {"event": "submitted", "to": "PENDING"})
    assert store.transition(old.id, JobState.SCHEDULED)
    store.record_refusal(old.id, "mallory", "hold")
    assert store.r.type(store.k.job_events(old.id)) == "stream"
    assert [e.get("event", e.get("to")) for e in store.events(old.id)] == ["submitted", "SCHEDULED", "refused"]


def _ids(events):
    return [tuple(int(n) for n in e["id"].split("-")) for e in events]


@pytest.mark.parametrize("clock", [2e9, 0, None], ids=["one-millisecond", "clock-went-back", "redis-time"])
def test_a_jobs_event_ids_are_unique_and_ordered_however_fast_events_come(store, clock):
    from crossdock.backends.redis_store.job_events import queue_job_event

    [job] = store.submit([new()])
    with store.r.pipeline(transaction=False) as pipe:  # one burst, run back to back by Redis
        for i in range(300):
            if i % 3 == 0:
                store.transition(job.id, JobState.SCHEDULED if i % 2 == 0 else JobState.PENDING, pipe=pipe)
            else:
                queue_job_event(store.r, pipe, store.k, job.id, {"event": "refused", "n": i}, 1000, now=clock)
        pipe.execute()
    events = store.events(job.id)
    ids = _ids(events)
    assert len(events) == 301 and ids == sorted(set(ids))  # unique, and in the order they were written
    if clock == 2e9:  # from the first event at that millisecond (in 2033) on, the sequence counts up
        assert ids[2:] == [(2_000_000_000_000, n) for n in range(299)]
    if clock == 0:  # an event from a clock behind the job's last one keeps that one's millisecond
        refused = [i for i, e in enumerate(events) if e.get("event") == "refused"]
        assert all(ids[i] == (ids[i - 1][0], ids[i - 1][1] + 1) for i in refused)
    after = events[150]["id"]
    assert [e["id"] for e in store.read_events(job.id, after=after)] == [e["id"] for e in events[151:]]
