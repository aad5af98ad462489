"""Retention: finished jobs leave the hot keys after ``min_job_age_seconds`` and stay as history
records; unfinished and requeued jobs stay; old history is trimmed."""

from __future__ import annotations

import time
from datetime import datetime, timedelta, timezone

import pytest

from crossdock.queue.errors import NoSuchJob
from crossdock.queue.models import ArraySpec, Job, JobSpec
from crossdock.queue.states import JobState

pytestmark = pytest.mark.redis


def finished(store, state=JobState.COMPLETED, name="done", **kw) -> Job:
    job, = store.submit([Job(id=0, spec=JobSpec(name=name, user="ana", command=["true"]), queue="q", **kw)])
    store.transition(job.id, JobState.SCHEDULED, bump_attempt=True, fields={"nodes": ["n1"], "pool": "p",
                                                                            "backend": "local"})
    store.transition(job.id, state, fields={"exit_code": 3 if state is JobState.FAILED else 0, "max_rss_kib": 2048,
                                            "end_time": datetime.now(timezone.utc) - timedelta(hours=1)})
    return store.get(job.id)



def test_a_finished_job_moves_to_history_and_leaves_no_hot_key(store):
    job = finished(store, JobState.FAILED)
    running, = store.submit([Job(id=0, spec=JobSpec(name="busy", user="ana", command=["sleep", "9"]), queue="q")])
    assert store.expire_finished(min_age_seconds=0, history_seconds=86400) == 1
    with pytest.raises(NoSuchJob):
        store.get(job.id)
    assert job.id not in store.all_ids() and store.ids_by_name("ana", "done") == []
    assert not store.r.exists(store.k.job(job.id)) and not store.r.exists(store.k.job_events(job.id))
    rec, = [r for r in store.history() if r["id"] == job.id]
    assert (rec["state"], rec["exit_code"], rec["user"], rec["name"], rec["nodes"], rec["max_rss_kib"]) == (
        "FAILED", 3, "ana", "done", ["n1"], 2048)
    assert "command" not in rec and "env" not in rec
    assert store.history_facts([job.id])[job.id].state is JobState.FAILED
    assert store.get(running.id).state is JobState.PENDING  # unfinished work stays


def test_a_job_younger_than_the_minimum_age_stays(store):
    job = finished(store)
    assert store.expire_finished(min_age_seconds=3600, history_seconds=86400) == 0
    assert store.get(job.id).state is JobState.COMPLETED


def test_a_job_requeued_after_it_finished_stays(store):
    job = finished(store)
    assert store.requeue(job.id)
    assert store.expire_finished(min_age_seconds=0, history_seconds=86400) == 0
    assert store.get(job.id).state is JobState.PENDING
    assert store.history() == []


def test_array_tasks_leave_the_array_index_one_by_one(store):
    tasks = store.submit([Job(id=0, spec=JobSpec(name="arr", command=["true"], array=ArraySpec(task_ids=[0, 1])),
                              queue="q", array_job_id=-1, array_task_id=t) for t in (0, 1)])
    store.transition(tasks[0].id, JobState.CANCELLED)
    assert store.expire_finished(min_age_seconds=0, history_seconds=86400) == 1
    assert store.array_ids(tasks[0].array_job_id) == [tasks[1].id]
    assert store.resolve(str(tasks[0].array_job_id)) == [tasks[1].id]


def test_history_older_than_its_retention_is_dropped(store):
    old = finished(store)
    assert store.expire_finished(min_age_seconds=0, history_seconds=86400) == 1
    assert [r["id"] for r in store.history(since=time.time() - 7200)] == [old.id]
    store.expire_finished(min_age_seconds=0, history_seconds=60)  # the record ended an hour ago
    assert store.history() == [] and store.history_facts([old.id]) == {}


def test_retention_frees_the_store(store):
    for i in range(50):
        finished(store, name=f"n{i}")
    store.expire_finished(min_age_seconds=0, history_seconds=86400)
    left = [k for k in store.r.scan_iter(f"{store.k.prefix}:*")
            if not k.startswith((store.k.history, store.k.events, store.k.job_counter, store.k.store_format,
                                 store.k.installation))]
    assert left == []


def test_a_dependency_on_an_expired_job_is_judged_by_its_history_record(runtime):
    from crossdock.queue.models import Dependency, DependencySpec, DependencyType
    from crossdock.workers.leader import Scheduler

    store = runtime.store
    ok, bad = finished(store), finished(store, JobState.FAILED)
    store.expire_finished(min_age_seconds=0, history_seconds=86400)

    def after(target: Job) -> Job:
        dep = DependencySpec(deps=[Dependency(type=DependencyType.AFTEROK, job_id=target.id)])
        return Job(id=0, spec=JobSpec(command=["true"], dependency=dep), queue="preprocessing", priority_class="preprocessing", pools=["local"])

    runs, never = store.submit([after(ok), after(bad)])
    Scheduler(runtime, lambda *a: None).cycle_once()
    assert store.get(runs.id).state is JobState.SCHEDULED
    assert (store.get(never.id).state, store.get(never.id).reason) == (JobState.CANCELLED, "DependencyNeverSatisfied")
