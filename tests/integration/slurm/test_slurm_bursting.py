"""Bursting between the real Slurm cluster and the real Kubernetes plane: a queue whose pools are a
Slurm partition and a Kubernetes pool (one kwok node of its own, 8 CPUs) sends the jobs that fit
nowhere to Kubernetes while Slurm's own estimate (``sbatch --test-only``) is far, takes them back
once the partition drains, and never puts a job on both.

The store, the scheduling cycle, both backends, the dispatch tasks and the follower are the real
ones, run in this process (cycle and follow driven step by step); the Kubernetes jobs are pods
that kwok runs for the seconds their job asks.
"""

from __future__ import annotations

import secrets
import time
import uuid

import pytest
import yaml

from crossdock import service
from crossdock.backends.kubernetes import manifests as m
from crossdock.dev.k8s.nodes import NodePool
from crossdock.queue.models import JobSpec
from crossdock.queue.states import JobState
from crossdock.workers import tasks as worker_tasks
from crossdock.workers import leader
from crossdock.workers.leader import Scheduler
from tests.waiting import eventually

pytestmark = [pytest.mark.slurm, pytest.mark.kubernetes, pytest.mark.hybrid, pytest.mark.autoscale,
              pytest.mark.redis]


def config(tag: str) -> dict:
    return {
        "priority_classes": {"batch": {"value": 500}},
        "pools": {"hpc": {"backend": "slurm", "partition": "gpu-l4", "backend_queue": 10},
                  "kube": {"backend": "k8s", "selector": {"crossdock.io/pool": tag}, "backend_queue": 10}},
        "queues": {"burst": {"priority_class": "batch", "pools": ["hpc", "kube"]},
                   "slurm_only": {"priority_class": "batch", "pools": ["hpc"]},
                   "kube_only": {"priority_class": "batch", "pools": ["kube"]}},
        "default_queue": "burst",
        "autoscaler": {"burst_margin_seconds": 60},
        "scheduler": {"interval_seconds": 0.3, "lease_seconds": 2},
    }


@pytest.fixture
def kube_pool(k8s_client):
    """One kwok node of 8 CPUs under a label of its own, and a namespace; both gone afterwards."""
    from kubernetes import client

    core = client.CoreV1Api(k8s_client)
    tag = f"bu{secrets.token_hex(3)}"
    [node] = NodePool(tag, 1, cpu="8", memory="16Gi").nodes()
    namespace = f"cd-burst-{uuid.uuid4().hex[:8]}"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=namespace)))
    core.create_node(node)
    try:
        eventually("the kwok node Ready", lambda: any(c.type == "Ready" and c.status == "True" for c in
                                                      core.read_node(node["metadata"]["name"]).status.conditions or []))
        eventually("the namespace's service account", lambda: core.list_namespaced_service_account(namespace).items)
        yield tag, namespace
    finally:
        client.BatchV1Api(k8s_client).delete_collection_namespaced_job(namespace, propagation_policy="Background")
        core.delete_collection_namespaced_pod(namespace, grace_period_seconds=0)
        core.delete_node(node["metadata"]["name"])
        core.delete_namespace(namespace)


@pytest.fixture
def crossdock(slurm_cluster, kube_pool, k8s_kubeconfig, tmp_path, redis_url, monkeypatch):
    from crossdock.runtime import Runtime

    tag, namespace = kube_pool
    cfg = tmp_path / "crossdock.yaml"
    cfg.write_text(yaml.safe_dump(config(tag)))
    env = {"CROSSDOCK_REDIS_URL": redis_url, "CROSSDOCK_STATE_DIR": str(tmp_path / "state"),
           "CROSSDOCK_CONFIG": str(cfg), "CROSSDOCK_PREFIX": f"b{uuid.uuid4().hex[:10]}",
           "CROSSDOCK_SLURM_ENV": slurm_cluster["CROSSDOCK_SLURM_ENV"],
           "CROSSDOCK_KUBECONFIG": str(k8s_kubeconfig), "CROSSDOCK_K8S_NAMESPACE": namespace,
           "CROSSDOCK_K8S_TTL_SECONDS": "600"}
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    rt = Runtime.from_env(start_redis=False)
    monkeypatch.setattr(worker_tasks, "runtime", lambda: rt)  # the dispatch tasks run in this process

    def send(name: str, args: list, kind: str) -> None:
        getattr(worker_tasks, name.split(".", 1)[1]).apply(args=args).get()

    monkeypatch.setattr(leader, "INVENTORY_REFRESH_SECONDS", 0.0)  # read the backends every step
    sched = Scheduler(rt, send)
    sched.namespace = namespace
    yield sched
    for job in rt.store.get_many(rt.store.active_ids()):
        if job.backend == "slurm":
            rt.backends("slurm").cancel(job)
    rt.backends.close()


def step(sched: Scheduler, until, what: str, timeout: float = 60):
    deadline = time.monotonic() + timeout
    while True:
        sched.cycle_once()
        sched.reconcile()
        if until():
            return
        assert time.monotonic() < deadline, f"timed out after {timeout}s waiting for {what}"
        time.sleep(0.3)


def spec(tmp_path, queue: str, *, sleep: int = 1, limit_s: int = 120, fake_run_s: float | None = None) -> JobSpec:
    env = {"CROSSDOCK_SIMULATE_RUN_SECONDS": str(fake_run_s)} if fake_run_s is not None else {}
    return JobSpec(command=["sleep", str(sleep)], cpus_per_task=8, time_limit_seconds=limit_s, queue=queue,
                   workdir=str(tmp_path), stdout="/dev/null", env=env)


def test_overflow_bursts_to_kubernetes_while_slurm_is_saturated_and_comes_back_as_it_drains(crossdock, jobs_dir):
    sched, rt = crossdock, crossdock.rt
    store = rt.store
    # Saturate both: a 10-minute-limit job on the Slurm node, a long one on the Kubernetes node.
    hog, = service.submit(rt, [spec(jobs_dir, "slurm_only", sleep=20, limit_s=600)])
    busy, = service.submit(rt, [spec(jobs_dir, "kube_only", fake_run_s=600)])
    step(sched, lambda: {store.get(hog.id).state, store.get(busy.id).state} == {JobState.RUNNING}, "both pools busy")
    slurm = rt.backends("slurm")
    # Slurm's own estimate for one more 8-CPU job: when the hog's limit ends (about 10 minutes).
    probe, = service.submit(rt, [spec(jobs_dir, "burst")])
    estimate = slurm.estimate_start(store.get(probe.id), "hpc")
    assert estimate is not None and 500 < estimate <= 600, estimate
    # Everything fits nowhere: the Kubernetes pool's backlog (none ahead) is far sooner.
    overflow = [probe, *service.submit(rt, [spec(jobs_dir, "burst", fake_run_s=1) for _ in range(2)])]
    step(sched, lambda: all(store.get(j.id).state is not JobState.PENDING for j in overflow), "the overflow routed")
    assert {store.get(j.id).pool for j in overflow} == {"kube"}
    # The hog ends: Slurm drains, and the next jobs of the queue run there again.
    step(sched, lambda: store.get(hog.id).state is JobState.COMPLETED, "the Slurm node to drain", timeout=60)
    back = service.submit(rt, [spec(jobs_dir, "burst") for _ in range(2)])
    step(sched, lambda: all(store.get(j.id).state is JobState.COMPLETED for j in back), "the jobs back on Slurm",
         timeout=90)
    assert {store.get(j.id).pool for j in back} == {"hpc"}
    # A job never on both: each has objects in exactly one backend, for one attempt.
    in_slurm = {slurm.tags.parse(j.comment)[0] for j in slurm.own_jobs() if slurm.tags.parse(j.comment)}
    kjobs = rt.backends("k8s").batch.list_namespaced_job(sched.namespace).items
    in_kube = {int(kj.metadata.labels[m.LABEL_JOB_ID]) for kj in kjobs if m.LABEL_JOB_ID in kj.metadata.labels}
    for job in [*overflow, *back]:
        assert (job.id in in_slurm) != (job.id in in_kube), job.id
        assert store.get(job.id).attempts == 1
    assert {j.id for j in overflow} <= in_kube and {j.id for j in back} <= in_slurm
