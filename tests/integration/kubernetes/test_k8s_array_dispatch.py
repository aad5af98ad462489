"""Arrays through crossdock to the real control plane: one cycle admits the tasks, ONE Celery
task creates ONE Indexed Job (parallelism = the throttle), follow maps every completion index
back to its crossdock task, and a replayed dispatch creates nothing new."""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from crossdock import service
from crossdock.backends.kubernetes import manifests as m
from crossdock.queue.models import ArraySpec, JobSpec
from crossdock.queue.states import JobState

pytestmark = [pytest.mark.kubernetes, pytest.mark.redis, pytest.mark.celery]

CONFIG: dict[str, Any] = {
    "priority_classes": {"batch": {"value": 500, "grace_seconds": 1}},
    "pools": {"cpu": {"backend": "k8s", "selector": {"crossdock.io/pool": "cpu"}, "backend_queue": 100}},
    "queues": {"batch": {"priority_class": "batch", "pools": ["cpu"]}},
    "default_queue": "batch",
    "scheduler": {"interval_seconds": 0.3, "lease_seconds": 2},
}


@pytest.fixture
def crossdock_on_k8s(tmp_path: Path, redis_url: str, monkeypatch, k8s_kubeconfig: Path, k8s_namespace: str):
    from crossdock.runtime import Runtime
    from tests.conftest import Cluster

    cfg = tmp_path / "crossdock.yaml"
    cfg.write_text(yaml.safe_dump(CONFIG))
    env = {"CROSSDOCK_REDIS_URL": redis_url, "CROSSDOCK_STATE_DIR": str(tmp_path / "state"),
           "CROSSDOCK_CONFIG": str(cfg), "CROSSDOCK_PREFIX": f"k{uuid.uuid4().hex[:10]}",
           "CROSSDOCK_KUBECONFIG": str(k8s_kubeconfig), "CROSSDOCK_K8S_NAMESPACE": k8s_namespace,
           "CROSSDOCK_K8S_TTL_SECONDS": "600"}
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    c = Cluster(Runtime.from_env(), tmp_path)
    yield c
    c.close()


def array_jobs(k8s_client: client.ApiClient, namespace: str, array_job_id: int) -> list[client.V1Job]:
    return client.BatchV1Api(k8s_client).list_namespaced_job(
        namespace, label_selector=f"{m.LABEL_ARRAY_JOB}={array_job_id}").items


def submit_array(rt, n: int, max_running: int | None, exit_code: int = 0, run_seconds: float = 1) -> list:
    env = {"CROSSDOCK_SIMULATE_RUN_SECONDS": str(run_seconds), "CROSSDOCK_SIMULATE_EXIT_CODE": str(exit_code)}
    return service.submit(rt, [JobSpec(command=["work"], env=env,
                                       array=ArraySpec(task_ids=list(range(n)), max_running=max_running))])


def test_array_becomes_one_indexed_job_with_its_throttle(crossdock_on_k8s, k8s_client, k8s_namespace):
    rt = crossdock_on_k8s.rt
    tasks = submit_array(rt, 6, max_running=2)
    done = crossdock_on_k8s.wait_all([t.id for t in tasks])
    assert {(j.state, j.exit_code) for j in done} == {(JobState.COMPLETED, 0)}
    kjobs = array_jobs(k8s_client, k8s_namespace, tasks[0].array_job_id)
    assert [kj.metadata.name for kj in kjobs] == [m.array_name(tasks[0].array_job_id, 1)]
    spec = kjobs[0].spec
    assert (spec.completion_mode, spec.completions, spec.parallelism) == ("Indexed", 6, 2)
    # Each task's reference is its completion index in that one Job; each ran on a cpu node.
    assert sorted(j.backend_ref for j in done) == sorted(f"{k8s_namespace}/{kjobs[0].metadata.name}#{i}"
                                                         for i in range(6))
    assert all(j.nodes and j.nodes[0].startswith("cpu") for j in done)
    pods = client.CoreV1Api(k8s_client).list_namespaced_pod(
        k8s_namespace, label_selector=f"{m.LABEL_ARRAY_JOB}={tasks[0].array_job_id}").items
    assert sorted(p.metadata.annotations["batch.kubernetes.io/job-completion-index"] for p in pods) == \
        [str(i) for i in range(6)]
    # The throttle held: never more than 2 pods ran at once (their containers' own times).
    spans = [(t.started_at.timestamp(), t.finished_at.timestamp()) for p in pods
             for t in [p.status.container_statuses[0].state.terminated]]
    assert max(sum(1 for s, e in spans if s <= t < e) for t, _ in spans) <= 2, spans


def test_failed_tasks_keep_their_exit_code(crossdock_on_k8s, k8s_client, k8s_namespace):
    rt = crossdock_on_k8s.rt
    tasks = submit_array(rt, 3, max_running=None, exit_code=3, run_seconds=0.5)
    done = crossdock_on_k8s.wait_all([t.id for t in tasks])
    assert {(j.state, j.exit_code) for j in done} == {(JobState.FAILED, 3)}
    assert len(array_jobs(k8s_client, k8s_namespace, tasks[0].array_job_id)) == 1


def test_replayed_grouped_dispatch_creates_nothing_new(crossdock_on_k8s, k8s_client, k8s_namespace):
    from crossdock.workers import tasks as worker_tasks

    rt = crossdock_on_k8s.rt
    tasks = submit_array(rt, 4, max_running=None)
    ids = [t.id for t in tasks]
    array_id = tasks[0].array_job_id
    done = crossdock_on_k8s.wait_all(ids)
    assert {j.state for j in done} == {JobState.COMPLETED}
    before = [(kj.metadata.name, kj.metadata.uid) for kj in array_jobs(k8s_client, k8s_namespace, array_id)]
    assert len(before) == 1
    refs = {j.id: j.backend_ref for j in done}
    # A duplicate message finds every claim taken; a redelivery of the same task (same Celery id,
    # its worker died before it saved the references) submits again and finds the Job by its name.
    resent = crossdock_on_k8s.send_tracked("crossdock.dispatch_array", [array_id, 1, ids, None], "k8s")
    task_id = rt.store.r.get(rt.store.k.dispatch_claim(ids[0], 1)).split(":", 1)[1]
    for job_id in ids:
        rt.store.r.hset(rt.store.k.job(job_id), mapping={"state": JobState.SCHEDULED.value, "backend_ref": ""})
    worker_tasks.runtime.cache_clear()
    try:
        out = worker_tasks.dispatch_array.apply(args=[array_id, 1, ids, None], task_id=task_id).get()
    finally:
        for job_id in ids:
            rt.store.r.hset(rt.store.k.job(job_id), mapping={"state": JobState.COMPLETED.value})
    assert out.startswith("4 tasks")
    assert {j.id: j.backend_ref for j in rt.store.get_many(ids)} == refs
    # The duplicate message has run too: every claim taken, or its tasks moved on.
    assert crossdock_on_k8s.wait_task("crossdock.dispatch_array", resent) in ("'duplicate'", "'stale'")
    after = [(kj.metadata.name, kj.metadata.uid) for kj in array_jobs(k8s_client, k8s_namespace, array_id)]
    assert after == before
