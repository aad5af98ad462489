"""One suite over every store (the Redis one on a real Redis, the in-memory one): what the roles of
``crossdock.queue.jobstore`` promise. Transitions follow the table and refuse what it refuses (and
what their guards refuse); a dispatch claim has one owner; stop requests stand on placed jobs only;
events come oldest first with unique, ordered ids; the lease has one holder."""

from __future__ import annotations

import threading
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest

from crossdock.queue.errors import LeaseLost, NoSuchJob
from crossdock.queue.jobstore import StopRequest
from crossdock.queue.models import Job, JobSpec
from crossdock.queue.states import TRANSITIONS, JobState, Reason


@pytest.fixture(params=[pytest.param("redis", marks=pytest.mark.redis), "memory"])
def store(request):
    if request.param == "memory":
        from crossdock.backends.memory_store import MemoryStore

        return MemoryStore()
    request.getfixturevalue("crossdock_env")  # its own key prefix on the session's real Redis
    from crossdock.runtime import Runtime

    return Runtime.from_env().store


def submitted(store, n: int = 1, user: str = "alice") -> list[Job]:
    return store.submit([Job(id=0, spec=JobSpec(command=["true"], user=user)) for _ in range(n)])


def placed(store, state: JobState = JobState.SCHEDULED) -> Job:
    """A job on its first attempt, SCHEDULED (or RUNNING) on node n1."""
    [job] = submitted(store)
    assert store.transition(job.id, JobState.SCHEDULED, bump_attempt=True, fields={"nodes": ["n1"], "backend": "fake"})
    if state is JobState.RUNNING:
        assert store.transition(job.id, JobState.RUNNING)
    return store.get(job.id)


# --- reads -----------------------------------------------------------------------------------------


def test_submitted_jobs_get_consecutive_ids_and_wait_pending(store):
    jobs = submitted(store, 3)
    ids = [j.id for j in jobs]
    assert ids == list(range(ids[0], ids[0] + 3))
    assert [j.state for j in store.get_many([ids[2], 10**9, ids[0]])] == [JobState.PENDING] * 2
    assert [j.id for j in store.get_many([ids[2], 10**9, ids[0]])] == [ids[2], ids[0]]
    assert set(ids) <= set(store.pending_ids()) and not set(ids) & set(store.active_ids())
    with pytest.raises(NoSuchJob):
        store.get(10**9)


def test_concurrent_submissions_of_one_owner_stop_exactly_at_the_job_limit(store):
    """max_submit_jobs counted in the step that stores: 8 clients racing 4 jobs each at a limit
    of 10 (2 already live) store exactly 8 more, each submission whole or refused whole."""
    from crossdock.queue.bounds import JobCounts
    from crossdock.queue.config_limits import Limits
    from crossdock.queue.errors import LimitExceeded

    user = f"u{uuid.uuid4().hex[:8]}"
    submitted(store, 2, user)
    limit = JobCounts({user: 4}, Limits(max_submit_jobs=10))
    start = threading.Barrier(8)

    def one(_i):
        jobs = [Job(id=0, spec=JobSpec(command=["true"], user=user)) for _ in range(4)]
        start.wait()
        try:
            return len(store.submit(jobs, admit=limit))
        except LimitExceeded as exc:
            assert "+ 4 submitted" in str(exc), exc
            return 0

    with ThreadPoolExecutor(8) as pool:
        stored = list(pool.map(one, range(8)))
    assert sorted(stored) == [0] * 6 + [4, 4]
    live = [j for j in store.get_many(store.pending_ids()) if j.spec.user == user]
    assert len(live) == 10


# --- transitions -----------------------------------------------------------------------------------

MOVES = [(old, new) for old in (JobState.PENDING, JobState.SCHEDULED, JobState.RUNNING) for new in JobState]


@pytest.mark.parametrize("old, new", MOVES, ids=[f"{o.value}->{n.value}" for o, n in MOVES])
def test_a_transition_moves_exactly_when_the_table_allows_it(store, old, new):
    job = placed(store, old) if old is not JobState.PENDING else submitted(store)[0]
    moved = store.transition(job.id, new, reason="Because")
    assert moved is (new in TRANSITIONS[old])
    after = store.get(job.id)
    assert after.state is (new if moved else old)
    assert (after.reason == "Because") is moved
    assert (job.id in store.pending_ids()) is (after.state is JobState.PENDING)
    assert (job.id in store.active_ids()) is (after.state in (JobState.SCHEDULED, JobState.RUNNING))


def test_guards_refuse_a_stale_attempt_a_set_field_and_a_state_outside_only_from(store):
    job = placed(store, JobState.RUNNING)
    assert not store.transition(job.id, JobState.COMPLETED, attempt=job.attempts + 1)
    assert store.update_if(job.id, (JobState.RUNNING,), {"cancel_requested": True})
    assert not store.transition(job.id, JobState.COMPLETED, unless="cancel_requested")
    assert not store.transition(job.id, JobState.CANCELLED, only_from=(JobState.PREEMPTED,))
    assert store.get(job.id).state is JobState.RUNNING
    assert store.transition(job.id, JobState.COMPLETED, attempt=job.attempts, fields={"exit_code": 0})
    assert (store.get(job.id).state, store.get(job.id).exit_code) == (JobState.COMPLETED, 0)
    assert not store.transition(10**9, JobState.CANCELLED)


def test_transitions_on_a_pipeline_land_together_and_report_each_outcome(store):
    job = placed(store, JobState.RUNNING)
    with store.pipeline(transaction=True) as pipe:
        store.transition(job.id, JobState.PREEMPTED, attempt=job.attempts, pipe=pipe)
        store.transition(job.id, JobState.COMPLETED, pipe=pipe)  # refused: PREEMPTED by then
        assert store.get(job.id).state is JobState.RUNNING  # nothing before execute
        results = pipe.execute()
    assert [int(r[0]) for r in results] == [1, 0]
    assert store.get(job.id).state is JobState.PREEMPTED


def test_a_requeue_ends_the_attempt_clears_its_placement_and_replays_as_nothing(store):
    job = placed(store, JobState.RUNNING)
    assert store.requeue(job.id, reason="Requeued", attempt=job.attempts)
    again = store.get(job.id)
    assert (again.state, again.nodes, again.backend) == (JobState.PENDING, [], None)
    assert [(a.attempt, a.state, a.nodes) for a in again.past_attempts] == [(1, JobState.RUNNING, ["n1"])]
    assert not store.requeue(job.id, attempt=job.attempts, only_from=(JobState.RUNNING,))  # a replay moves nothing
    assert store.get(job.id).past_attempts == again.past_attempts


@pytest.mark.parametrize("requeue, cancel, ends", [(True, False, (JobState.PENDING, Reason.PREEMPTED)),
                                                    (False, False, (JobState.CANCELLED, Reason.PREEMPTED)),
                                                    (True, True, (JobState.CANCELLED, Reason.CANCELLED_BY_USER))],
                         ids=["requeued", "cancelled", "a-cancel-wins"])
def test_a_preempted_job_settles_once(store, requeue, cancel, ends):
    job = placed(store, JobState.RUNNING)
    if cancel:
        store.update_if(job.id, (JobState.RUNNING,), {"cancel_requested": True})
    assert store.transition(job.id, JobState.PREEMPTED)
    store.settle_preempted(job.id, requeue, attempt=job.attempts)
    settled = store.get(job.id)
    assert (settled.state, settled.reason) == ends
    store.settle_preempted(job.id, requeue, attempt=job.attempts)  # replayed: nothing moves
    assert store.get(job.id).state is settled.state


# --- dispatch claims -------------------------------------------------------------------------------


def test_the_first_claim_wins_and_a_duplicate_gets_nothing(store):
    jobs = [placed(store) for _ in range(3)]
    ids = [j.id for j in jobs]
    mine, fresh = store.claim_dispatch(ids, 1, "w1")
    assert (mine, fresh) == (ids, True)
    assert all(j.dispatched is not None for j in store.get_many(ids))
    assert store.claim_dispatch(ids, 1, "w2") == ([], False)
    assert store.claim_dispatch(ids, 1, "w1") == ([], False)  # a resend of the same task
    assert store.claim_dispatch(ids, 1, "w1", reown=True) == (ids, False)  # redelivered after its worker died
    assert store.claim_dispatch(ids, 1, "w2", reown=True) == ([], False)
    assert store.claim_dispatch(ids, 2, "w2") == (ids, True)  # another attempt, another claim


def test_concurrent_claims_have_one_owner_per_job(store):
    ids = [placed(store).id for _ in range(20)]
    barrier = threading.Barrier(8)

    def claim(worker: str) -> list[int]:
        barrier.wait()
        return store.claim_dispatch(ids, 1, worker)[0]

    with ThreadPoolExecutor(8) as pool:
        owned = list(pool.map(claim, [f"w{i}" for i in range(8)]))
    assert sorted(i for mine in owned for i in mine) == ids


def test_a_released_claim_may_be_claimed_again_and_a_claimer_is_alive_while_it_says_so(store):
    job = placed(store)
    assert not store.dispatch_claimed(job.id, 1) and not store.dispatcher_alive(job.id, 1)
    store.claim_dispatch([job.id], 1, "w1")
    assert store.dispatch_claimed(job.id, 1) and store.dispatcher_alive(job.id, 1)
    store.dispatching("w1", alive=False)
    assert store.dispatch_claimed(job.id, 1) and not store.dispatcher_alive(job.id, 1)
    store.release_claims([job.id], 1)
    released = store.get(job.id)
    assert not store.dispatch_claimed(job.id, 1)
    assert (released.reason, released.dispatched) == (Reason.DISPATCH_RETRY, None)
    assert store.claim_dispatch([job.id], 1, "w2") == ([job.id], True)
    store.set_backend_refs({job.id: "ref-1"})
    assert store.get(job.id).backend_ref == "ref-1"


# --- stop requests and heartbeats ------------------------------------------------------------------


def test_a_preemption_stands_on_a_placed_job_only(store):
    running, waiting = placed(store, JobState.RUNNING), submitted(store)[0]
    assert store.request_preempt(running.id, 5)
    assert not store.request_preempt(waiting.id, 5)
    assert store.stop_requests([running.id, waiting.id]) == {running.id: StopRequest(False, True, 5.0)}
    assert store.stop_request(waiting.id) is None
    assert store.get(running.id).preempt_deadline is not None


def test_a_heartbeat_says_alive_and_no_heartbeat_says_not(store):
    beating, silent = placed(store, JobState.RUNNING), placed(store, JobState.RUNNING)
    store.heartbeat(beating.id, ttl=60)
    assert store.alive([beating.id, silent.id]) == {beating.id: True, silent.id: False}


# --- events ----------------------------------------------------------------------------------------


def test_events_come_oldest_first_with_unique_ordered_ids(store):
    job = placed(store, JobState.RUNNING)
    for n in range(20):  # many within one millisecond
        store.record_note(job.id, "note", "alice", n=n)
    events = store.read_events(job.id)
    assert [e.get("to") or e.get("event") for e in events[:3]] == ["PENDING", "SCHEDULED", "RUNNING"]
    assert [e["n"] for e in events if e.get("event") == "note"] == [str(n) for n in range(20)]
    ids = [tuple(int(p) for p in e["id"].split("-")) for e in events]
    assert ids == sorted(ids) and len(set(ids)) == len(ids)
    assert store.read_events(job.id, after=events[-3]["id"]) == events[-2:]
    mine = [e for e in store.read_events(count=10_000) if e["job"] == str(job.id)]
    assert [e.get("n") for e in mine] == [e.get("n") for e in events]


def test_a_blocking_read_returns_the_next_event(store):
    job = placed(store)
    last = store.read_events()[-1]["id"]
    timer = threading.Timer(0.2, lambda: store.record_note(job.id, "later", "bob"))
    timer.start()
    try:
        got = store.read_events(after=last, block_ms=10_000)
    finally:
        timer.join()
    assert [(e["job"], e["event"]) for e in got] == [(str(job.id), "later")]


# --- the lease, results, output --------------------------------------------------------------------


def test_the_lease_has_one_holder_until_released(store):
    a, b = f"a-{uuid.uuid4().hex[:6]}", f"b-{uuid.uuid4().hex[:6]}"
    assert store.lease_holder() is None
    assert store.acquire_lease(a, 30) and store.lease_holder() == a
    assert not store.acquire_lease(b, 30)
    assert store.acquire_lease(a, 30)  # renewed
    store.release_lease(b)  # not b's to release
    assert store.lease_holder() == a
    store.release_lease(a)
    assert store.lease_holder() is None
    assert store.acquire_lease(b, 30) and store.lease_holder() == b


def test_a_transaction_fenced_by_a_lease_lands_only_while_its_holder_holds_it(store):
    a, b = f"a-{uuid.uuid4().hex[:6]}", f"b-{uuid.uuid4().hex[:6]}"
    job = submitted(store)[0]
    with pytest.raises(LeaseLost):  # nobody holds it
        with store.pipeline(transaction=True, lease=a) as pipe:
            store.transition(job.id, JobState.SCHEDULED, pipe=pipe, actor=a)
            pipe.execute()
    assert store.acquire_lease(a, 30)
    with store.pipeline(transaction=True, lease=a) as pipe:
        store.transition(job.id, JobState.SCHEDULED, pipe=pipe, actor=a)
        (moved, _was), = pipe.execute()
    assert moved and store.get(job.id).state is JobState.SCHEDULED
    store.release_lease(a)
    assert store.acquire_lease(b, 30)  # a paused past its lease; b leads now
    with pytest.raises(LeaseLost):
        with store.pipeline(transaction=True, lease=a) as pipe:
            store.transition(job.id, JobState.CANCELLED, pipe=pipe, actor=a)
            pipe.execute()
    assert store.get(job.id).state is JobState.SCHEDULED  # nothing of a's late write landed


def test_a_lease_taken_over_between_a_fenced_transactions_start_and_its_end_refuses_it(store):
    a, b = f"a-{uuid.uuid4().hex[:6]}", f"b-{uuid.uuid4().hex[:6]}"
    job = submitted(store)[0]
    assert store.acquire_lease(a, 30)
    with pytest.raises(LeaseLost):
        with store.pipeline(transaction=True, lease=a) as pipe:
            store.transition(job.id, JobState.SCHEDULED, pipe=pipe, actor=a)
            store.release_lease(a)  # expired, as far as the store knows, while a still queued
            assert store.acquire_lease(b, 30)
            pipe.execute()
    assert store.get(job.id).state is JobState.PENDING


def test_results_checkpoints_parts_and_output_are_kept_as_given(store):
    job = submitted(store)[0]
    assert store.result(job.id) is None and store.checkpoint(job.id) is None and store.output(job.id) is None
    store.set_result(job.id, b"\x00\xffresult")
    store.set_checkpoint(job.id, b"sealed")
    store.put_call_parts("ref", {"fn": b"f", "7": b"args"})
    store.append_output(job.id, ["a", "b"])
    store.append_output(job.id, ["c"])
    assert store.result(job.id) == b"\x00\xffresult" and store.checkpoint(job.id) == b"sealed"
    assert store.call_parts("ref", "fn", "8", "7") == [b"f", None, b"args"]
    assert store.output(job.id) == ["a", "b", "c"] and store.output(job.id, 2) == ["c"]

