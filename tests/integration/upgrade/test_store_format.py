"""The store's format on a real Redis: a store as crossdock 0.1 left it (specs unsealed, no format
key) is sealed once, by one process; a store this release made never has an unsealed spec sealed."""

from __future__ import annotations

import threading

import pytest

from crossdock.backends.redis_store.sealing import ENV, SEAL
from crossdock.backends.redis_store.store import JobStore
from crossdock.backends.redis_store.upgrade import FORMAT, SEALED_ON_UPGRADE, NewerStore, ensure_format
from crossdock.queue.errors import StoreUnavailable
from crossdock.queue.models import Job, JobSpec
from tests.waiting import eventually

pytestmark = [pytest.mark.upgrade, pytest.mark.redis]


def old_store(store: JobStore, n: int = 3) -> list[int]:
    """``n`` jobs stored as 0.1 stored them: the spec's whole JSON (its environment in it), no seal,
    no owner's set, no format key."""
    unsealed = JobStore(store.r, store.k.prefix)
    jobs = unsealed.submit([Job(id=0, spec=JobSpec(command=["true"], env={"TOKEN": f"t{i}"}, hold=i == 0)) for i in range(n)])
    store.r.delete(store.k.store_format, *{store.k.user_jobs(j.spec.user) for j in jobs})
    return [j.id for j in jobs]


def sealed_events(store: JobStore, job_id: int) -> int:
    return [e.get("event") for e in store.events(job_id)].count(SEALED_ON_UPGRADE)


def test_a_store_of_the_previous_release_is_sealed_once(store):
    ids = old_store(store)
    assert [refusal for _job, refusal in store.opened(ids)] == [f"the spec of job {i} is unsealed (written to the"
                                                                " store by something other than crossdock's submit);"
                                                                " refusing to run it" for i in ids]
    assert ensure_format(store) == len(ids)
    assert store.r.get(store.k.store_format) == str(FORMAT)
    for job, refusal in store.opened(ids):
        h = store.r.hgetall(store.k.job(job.id))
        assert refusal == "" and h[SEAL] and h[ENV] and "TOKEN" not in h["spec"]  # sealed, its environment encrypted
        assert job.spec.env == {"TOKEN": f"t{ids.index(job.id)}"}
        assert sealed_events(store, job.id) == 1
    assert store.get(ids[0]).spec.hold  # held as it was
    assert [int(i) for i in store.r.zrange(store.k.user_jobs(store.get(ids[0]).spec.user), 0, -1)] == ids
    assert ensure_format(store) == 0  # once
    assert all(sealed_events(store, i) == 1 for i in ids)


def test_two_services_starting_together_seal_each_spec_once(store):
    ids = old_store(store, 40)
    counts: list[int] = []
    threads = [threading.Thread(target=lambda: counts.append(ensure_format(store))) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert sorted(counts) == [0, len(ids)]
    assert all(sealed_events(store, i) == 1 for i in ids)


def test_a_migration_whose_process_died_is_taken_over(store):
    ids = old_store(store)
    store.r.set(store.k.format_lock, "a process that died", px=300)
    assert ensure_format(store) == len(ids)
    assert eventually("the lease released", lambda: not store.r.exists(store.k.format_lock), 5)


def test_a_migration_held_too_long_is_one_error_naming_the_key(store):
    old_store(store)
    store.r.set(store.k.format_lock, "another", px=60_000)
    now = [0.0]
    with pytest.raises(StoreUnavailable) as exc:
        ensure_format(store, wait=5, clock=lambda: now[0], pause=lambda s: now.__setitem__(0, now[0] + 1))
    assert store.k.format_lock in str(exc.value) and "over 5s" in str(exc.value)
    assert not store.r.exists(store.k.store_format)


def test_an_unsealed_spec_in_a_store_this_release_made_is_never_sealed(store):
    [job] = store.submit([Job(id=0, spec=JobSpec(command=["true"], hold=True))])
    assert store.r.get(store.k.store_format) == str(FORMAT)  # marked with its first jobs
    store.r.hdel(store.k.job(job.id), SEAL)  # written into Redis before any service started
    assert ensure_format(store) == 0
    [(_job, refusal)] = store.opened([job.id])
    assert "is unsealed" in refusal and sealed_events(store, job.id) == 0


def test_a_store_of_a_newer_format_is_refused(store):
    store.r.set(store.k.store_format, FORMAT + 1)
    with pytest.raises(NewerStore, match=f"format {FORMAT + 1}, written by a newer crossdock"):
        ensure_format(store)
