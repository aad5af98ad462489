"""The Kubernetes backend against a real control plane (kube-apiserver, kube-scheduler, the Job
controller, kwok nodes with GPU capacity): placement, admission, gangs, preemption, cancel,
watches across an API server restart, idempotent dispatch.

Runs against ``crossdock.dev.k8s``'s local plane, or any cluster named by ``KUBECONFIG`` whose
nodes look like the local plane's (pools ``a100`` ×4, ``l4`` ×2, ``cpu`` ×2 labelled
``crossdock.io/pool``, GPU nodes with ``nvidia.com/gpu`` capacity, ``nvidia.com/gpu.product``
and a ``nvidia.com/gpu`` NoSchedule taint). The API server restart test needs the local plane.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from crossdock.queue.ports import SubmitFailed
from crossdock.backends.kubernetes import KubernetesBackend
from crossdock.backends.kubernetes import manifests as m
from crossdock.backends.kubernetes import once
from crossdock.backends.kubernetes.informer import Expired, Informer
from crossdock.dev import k8s
from crossdock.queue.admission import admit
from crossdock.queue.config import ClusterConfig, parse_config
from crossdock.queue.cycle import run_cycle
from crossdock.queue.errors import InvalidJob
from crossdock.queue.models import ArraySpec, GpuRequest, Job, JobSpec
from crossdock.queue.snapshot import Snapshot
from crossdock.queue.states import JobState, Reason
from k8s_helpers import wait_for

pytestmark = pytest.mark.kubernetes


CONFIG: dict[str, Any] = {
    "priority_classes": {
        "inference": {"value": 1000, "preemptible": False, "grace_seconds": 1},
        "preprocessing": {"value": 500, "preemptible": False, "preemption_policy": "Never", "grace_seconds": 1},
        "training": {"value": 100, "preemptible": True, "grace_seconds": 1},
    },
    "pools": {
        "a100": {"backend": "k8s", "selector": {"crossdock.io/pool": "a100"}, "gpu": {"model": "A100"},
                 "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]},
        "l4": {"backend": "k8s", "selector": {"crossdock.io/pool": "l4"}, "gpu": {"model": "L4"},
               "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]},
        "cpu": {"backend": "k8s", "selector": {"crossdock.io/pool": "cpu"}},
    },
    "queues": {
        "training": {"priority_class": "training", "pools": ["a100"], "placement": "binpack"},
        "inference": {"priority_class": "inference", "pools": ["l4", "cpu"], "placement": "spread"},
        "preprocessing": {"priority_class": "preprocessing", "pools": ["cpu"], "placement": "most-requested"},
    },
    "default_queue": "preprocessing",
}




@pytest.fixture(scope="module")
def cfg() -> ClusterConfig:
    return parse_config(CONFIG)


@pytest.fixture(scope="module", autouse=True)
def priority_classes(k8s_client: client.ApiClient, cfg: ClusterConfig) -> None:
    """The config's PriorityClasses, for every test here (one alone on a fresh plane too: without
    them the Job controller creates no pod)."""
    KubernetesBackend(cfg, k8s_client, watch=False).sync_priority_classes()


@pytest.fixture
def backend(k8s_client: client.ApiClient, k8s_namespace: str, cfg: ClusterConfig) -> Iterator[KubernetesBackend]:
    b = KubernetesBackend(cfg, k8s_client, namespace=k8s_namespace, ttl_seconds_after_finished=None,
                          deadline_slack_seconds=0)
    b.sync_priority_classes()
    yield b
    b.close()


_ids = iter(range(int(time.time()) % 100000 * 10000, 10**10, 100))  # room for array tasks


def make_job(queue: str = "training", *, pool: str | None = None, on: list[str] | None = None,
             gpus: int = 0, model: str | None = None, run_seconds: float | None = None, exit_code: int | None = None,
             attempts: int = 1, job_id: int | None = None, array_job_id: int | None = None,
             array_task_id: int | None = None, mig: str | None = None, **spec: Any) -> Job:
    env = dict(spec.pop("env", {}))
    if run_seconds is not None:
        env["CROSSDOCK_SIMULATE_RUN_SECONDS"] = str(run_seconds)
    if exit_code is not None:
        env["CROSSDOCK_SIMULATE_EXIT_CODE"] = str(exit_code)
    if gpus:
        spec["gpus"] = GpuRequest(count=gpus, type=model, mig=mig)
    pc = CONFIG["priority_classes"][CONFIG["queues"][queue]["priority_class"]]
    pools = CONFIG["queues"][queue]["pools"]
    return Job(id=job_id if job_id is not None else next(_ids), spec=JobSpec(command=["python", "work.py"], env=env,
                                                                             **spec),
               queue=queue, priority_class=CONFIG["queues"][queue]["priority_class"], priority=pc["value"],
               preemptible=pc["preemptible"], pools=pools, pool=pool or pools[0], nodes=on or [],
               attempts=attempts, backend="k8s", array_job_id=array_job_id, array_task_id=array_task_id)


def pods_of(core: client.CoreV1Api, ns: str, job: Job) -> list[client.V1Pod]:
    return core.list_namespaced_pod(ns, label_selector=f"{m.LABEL_JOB_ID}={job.id}").items


def state_of(backend: KubernetesBackend, job: Job) -> Any:
    return backend.status([job]).get(job.id)


def wait_state(backend: KubernetesBackend, job: Job, *states: JobState, timeout: float = 60.0) -> Any:
    return wait_for(f"job {job.id} in {[s.value for s in states]}",
                    lambda: (st := state_of(backend, job)) is not None and st.state in states and st, timeout)


# --- placement and admission -------------------------------------------------------------------


def test_gpu_job_lands_on_the_requested_pool_and_model(backend: KubernetesBackend, k8s_client: client.ApiClient,
                                                       k8s_namespace: str) -> None:
    core = client.CoreV1Api(k8s_client)
    a100 = make_job("training", gpus=2, model="A100", run_seconds=2)
    l4 = make_job("inference", pool="l4", gpus=1, model="L4", run_seconds=2)
    refs = [backend.submit(a100), backend.submit(l4)]
    assert refs == [f"{k8s_namespace}/cd-{a100.id}-1", f"{k8s_namespace}/cd-{l4.id}-1"]

    for job, pool, product in ((a100, "a100", "NVIDIA-A100-SXM4-80GB"), (l4, "l4", "NVIDIA-L4")):
        running = wait_state(backend, job, JobState.RUNNING)
        (node_name,) = running.nodes
        node = core.read_node(node_name)
        assert node.metadata.labels["crossdock.io/pool"] == pool
        assert node.metadata.labels["nvidia.com/gpu.product"] == product
        (pod,) = pods_of(core, k8s_namespace, job)
        assert pod.spec.priority == CONFIG["priority_classes"][job.priority_class]["value"]
        assert pod.spec.containers[0].resources.limits["nvidia.com/gpu"] == str(job.spec.gpus_per_node())
    done = wait_state(backend, a100, JobState.COMPLETED)
    assert done.exit_code == 0


def test_crossdock_choice_of_node_holds(backend: KubernetesBackend) -> None:
    job = make_job("training", on=["a100-2"], gpus=8, model="A100")
    backend.submit(job)
    assert wait_state(backend, job, JobState.RUNNING).nodes == ("a100-2",)


def test_unknown_gpu_model_is_refused_at_submit(backend: KubernetesBackend, k8s_client: client.ApiClient,
                                                k8s_namespace: str, cfg: ClusterConfig) -> None:
    nodes = backend.inventory().nodes
    assert {n.gpus[0].model for n in nodes if n.gpus} == {"A100", "L4"}
    spec = JobSpec(command=["python", "train.py"], queue="training", gpus=GpuRequest(count=1, type="H100"))
    with pytest.raises(InvalidJob) as err:
        admit(spec, cfg, nodes, datetime.now(timezone.utc))
    assert "H100" in str(err.value) and "models there: A100" in str(err.value)
    # The same request for a model the pool has is admitted.
    ok = admit(spec.model_copy(update={"gpus": GpuRequest(count=1, type="A100")}), cfg, nodes,
               datetime.now(timezone.utc))
    assert ok[0].pools == ["a100"]
    assert client.BatchV1Api(k8s_client).list_namespaced_job(k8s_namespace).items == []


def test_failure_exit_code_and_time_limit(backend: KubernetesBackend) -> None:
    crash = make_job("preprocessing", run_seconds=1, exit_code=3)
    slow = make_job("preprocessing", time_limit_seconds=2)
    backend.submit(crash)
    backend.submit(slow)
    failed = wait_state(backend, crash, JobState.FAILED)
    assert (failed.exit_code, failed.reason) == (3, Reason.NON_ZERO_EXIT)
    timeout = wait_state(backend, slow, JobState.TIMEOUT, timeout=30)
    assert timeout.reason == Reason.TIME_LIMIT and timeout.native_state == "job/Failed/DeadlineExceeded"


def test_mig_slices_are_requested_as_their_own_resource(k8s_client: client.ApiClient, k8s_namespace: str) -> None:
    """A MIG-partitioned node (kwok, as the GPU operator's mixed strategy advertises it): the
    inventory sees its slices, and a job asking for one lands there through kube-scheduler."""
    core = client.CoreV1Api(k8s_client)
    name = f"mig-{k8s_namespace[-8:]}"
    node = k8s.NodePool("mig", 1, cpu="32", memory="256Gi", gpus=0).node(0)
    node["metadata"]["name"] = node["metadata"]["labels"]["kubernetes.io/hostname"] = name
    node["metadata"]["labels"].update({"crossdock.io/pool": "a100mig", "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB"})
    for key in ("capacity", "allocatable"):
        node["status"][key]["nvidia.com/mig-1g.5gb"] = "7"
    core.create_node(node)
    cfg = parse_config({**CONFIG, "pools": {**CONFIG["pools"], "a100mig": {
        "backend": "k8s", "selector": {"crossdock.io/pool": "a100mig"}, "gpu": {"model": "A100", "mig": True}}},
        "queues": {**CONFIG["queues"], "training": {**CONFIG["queues"]["training"], "pools": ["a100mig"]}}})
    b = KubernetesBackend(cfg, k8s_client, namespace=k8s_namespace, watch=False)
    try:
        wait_for("MIG node Ready", lambda: any(
            c.type == "Ready" and c.status == "True" for c in core.read_node(name).status.conditions or []))
        (mig,) = [n for n in b.inventory().nodes if n.name == name]
        assert [(g.model, g.mig) for g in mig.gpus] == [("A100", ("1g.5gb",) * 7)]
        job = make_job("training", pool="a100mig", gpus=2, model="A100", mig="1g.5gb")
        b.submit(job)
        assert wait_state(b, job, JobState.RUNNING).nodes == (name,)
        (pod,) = pods_of(core, k8s_namespace, job)
        assert pod.spec.containers[0].resources.limits["nvidia.com/mig-1g.5gb"] == "2"
    finally:
        core.delete_collection_namespaced_pod(k8s_namespace, grace_period_seconds=0)
        core.delete_node(name)


# --- spread, binpack and gangs -----------------------------------------------------------------


def _array(queue: str, n: int, **kw: Any) -> list[Job]:
    base = next(_ids)
    return [make_job(queue, job_id=base + i, array_job_id=base, array_task_id=i, **kw) for i in range(n)]


def test_inference_replicas_spread_across_nodes_and_training_packs(backend: KubernetesBackend) -> None:
    replicas = _array("inference", 4, pool="l4", gpus=1, model="L4")
    for r in replicas:
        backend.submit(r)
    nodes = [wait_state(backend, r, JobState.RUNNING).nodes[0] for r in replicas]
    assert sorted(nodes.count(n) for n in set(nodes)) == [2, 2], nodes

    packed = _array("training", 3, gpus=2, model="A100")
    for p in packed:
        backend.submit(p)
    where = {wait_state(backend, p, JobState.RUNNING).nodes[0] for p in packed}
    assert len(where) == 1, where


def _place(cfg: ClusterConfig, backend: KubernetesBackend, job: Job) -> Job | None:
    """One scheduling cycle of crossdock's core on the backend's inventory; the placed job or None."""
    inv = backend.inventory()
    result = run_cycle(Snapshot(nodes=inv.nodes, allocations=inv.foreign), [job], cfg, datetime.now(timezone.utc))
    if not result.admitted:
        return None
    (p,) = result.admitted
    return job.model_copy(update={"nodes": list(p.nodes), "gpu_ids": list(p.gpu_ids), "pool": p.pool})


def gang_passes(backend: KubernetesBackend, monkeypatch: pytest.MonkeyPatch) -> list[tuple[list[int], list[int]]]:
    """Record each gang admission pass of ``backend.status``: (the gangs it weighed, those it released)."""
    passes: list[tuple[list[int], list[int]]] = []
    release = backend.release_gangs

    def recorded(jobs, by_attempt, live=None):
        got = release(jobs, by_attempt, live)
        passes.append(([j.id for j in jobs], got))
        return got

    monkeypatch.setattr(backend, "release_gangs", recorded)
    return passes


def stays_gated(backend: KubernetesBackend, monkeypatch: pytest.MonkeyPatch, gang: Job, reason: str) -> None:
    """Status passes until three of them weighed ``gang`` (each would release it if it fitted):
    it reads gated with ``reason`` at every one, and none released it."""
    passes = gang_passes(backend, monkeypatch)

    def weighed_thrice() -> bool:
        st = state_of(backend, gang)
        assert st is not None and (st.state, st.reason) == (JobState.SCHEDULED, reason), st
        return len([weighed for weighed, _ in passes if gang.id in weighed]) >= 3

    wait_for(f"three admission passes over gang {gang.id}", weighed_thrice)
    assert not [released for _, released in passes if gang.id in released]


def test_four_worker_gang_lands_on_four_nodes_or_waits_whole(
        backend: KubernetesBackend, k8s_client: client.ApiClient, k8s_namespace: str, cfg: ClusterConfig,
        monkeypatch: pytest.MonkeyPatch) -> None:
    core = client.CoreV1Api(k8s_client)
    # Work crossdock did not submit fills a100-0's GPUs: the inventory must count it.
    foreign = client.V1Pod(
        metadata=client.V1ObjectMeta(name="someone-elses"),
        spec=client.V1PodSpec(restart_policy="Never", node_selector={"kubernetes.io/hostname": "a100-0"},
                              tolerations=[client.V1Toleration(key="nvidia.com/gpu", operator="Exists")],
                              containers=[client.V1Container(name="c", image="x", resources=client.V1ResourceRequirements(
                                  requests={"nvidia.com/gpu": "8"}, limits={"nvidia.com/gpu": "8"}))]))
    core.create_namespaced_pod(k8s_namespace, foreign)
    wait_for("foreign pod Running",
             lambda: core.read_namespaced_pod("someone-elses", k8s_namespace).status.phase == "Running")
    held = [a for a in backend.inventory().foreign if a.node == "a100-0"]
    assert len(held) == 1 and len(held[0].gpu_ids) == 8

    # crossdock's scheduler does not place a gang that does not fit whole...
    gang = make_job("training", gpus=2, model="A100", nodes=4)
    assert _place(cfg, backend, gang) is None
    assert pods_of(core, k8s_namespace, gang) == []
    # ...and a gang handed to Kubernetes unplaced waits whole too: its workers stay gated.
    unplaced = make_job("training", gpus=2, model="A100", nodes=4)
    backend.submit(unplaced)
    st = wait_for("4 gated workers", lambda: len(pods_of(core, k8s_namespace, unplaced)) == 4
                  and state_of(backend, unplaced))
    stays_gated(backend, monkeypatch, unplaced, "SchedulingGated (0/4 running)")
    assert not [p for p in pods_of(core, k8s_namespace, unplaced) if p.spec.node_name]

    core.delete_namespaced_pod("someone-elses", k8s_namespace, grace_period_seconds=0)
    released = wait_state(backend, unplaced, JobState.RUNNING)
    assert sorted(released.nodes) == ["a100-0", "a100-1", "a100-2", "a100-3"]
    wait_for("foreign pod gone", lambda: not [a for a in backend.inventory().foreign if a.node == "a100-0"])
    placed = wait_for("gang placed", lambda: _place(cfg, backend, gang), timeout=20)
    assert sorted(placed.nodes) == ["a100-0", "a100-1", "a100-2", "a100-3"]
    backend.submit(placed)
    running = wait_state(backend, placed, JobState.RUNNING)
    assert sorted(running.nodes) == sorted(placed.nodes)
    pods = pods_of(core, k8s_namespace, placed)
    assert len({p.spec.node_name for p in pods}) == 4 and len(pods) == 4
    assert {p.metadata.labels[m.LABEL_GROUP] for p in pods} == {f"{placed.id}-1"}


def test_gang_larger_than_its_pool_never_starts_a_worker(backend: KubernetesBackend, k8s_client: client.ApiClient,
                                                         k8s_namespace: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Five one-per-node workers in a four-node pool: all five wait, none holds a GPU."""
    core = client.CoreV1Api(k8s_client)
    gang = make_job("training", gpus=1, model="A100", nodes=5)
    backend.submit(gang)
    wait_for("5 workers created", lambda: len(pods_of(core, k8s_namespace, gang)) == 5)
    stays_gated(backend, monkeypatch, gang, "SchedulingGated (0/5 running)")
    assert not [p for p in pods_of(core, k8s_namespace, gang) if p.spec.node_name]


# --- preemption and cancel ---------------------------------------------------------------------


@pytest.fixture
def follow(runtime: Any, backend: KubernetesBackend) -> Iterator[Callable[[list[int]], None]]:
    """The follower's status step over this backend and a real store."""
    from crossdock.workers.leader import Scheduler

    runtime.backends.use("k8s", backend)
    sched = Scheduler(runtime, send=lambda *a: None, holder="test")
    yield lambda ids: sched.follower._by_status("k8s", runtime.store.get_many(ids))


def _stored(store: Any, job: Job) -> Job:
    """Put ``job`` in the store as the scheduler would have: SCHEDULED on its nodes, attempt 1."""
    (saved,) = store.submit([job.model_copy(update={"id": 0, "attempts": 0})])
    store.transition(saved.id, JobState.SCHEDULED, bump_attempt=True,
                     fields={"nodes": job.nodes, "pool": job.pool, "backend": "k8s"})
    return store.get(saved.id)


def test_kube_scheduler_preemption_is_noticed_and_requeued_per_policy(
        backend: KubernetesBackend, store: Any, follow: Callable[[list[int]], None]) -> None:
    requeue = _stored(store, make_job("training", pool="l4", on=["l4-0"], gpus=4, model="L4"))
    keep = _stored(store, make_job("training", pool="l4", on=["l4-1"], gpus=4, model="L4", requeue=False))
    for victim in (requeue, keep):
        backend.submit(victim)
    ids = [requeue.id, keep.id]
    wait_for("victims RUNNING in the store", lambda: follow(ids) or all(
        j.state is JobState.RUNNING for j in store.get_many(ids)))

    for node in ("l4-0", "l4-1"):
        backend.submit(make_job("inference", pool="l4", on=[node], gpus=4, model="L4"))

    def settled() -> bool:
        follow(ids)
        return store.get(requeue.id).state is JobState.PENDING and store.get(keep.id).state is JobState.CANCELLED

    # The one ending of a preempted job whose spec forbids requeue: CANCELLED, saying who preempted it.
    wait_for("victims preempted: one requeued, one cancelled", settled)
    assert store.get(requeue.id).reason == Reason.PREEMPTED
    assert store.get(keep.id).reason == "PreemptedByScheduler"
    assert [e["to"] for e in store.events(keep.id)][-2:] == ["PREEMPTED", "CANCELLED"]
    # A process that never watched those pods (a restarted scheduler) still learns why from the
    # pods' Preempted events once the pods are gone.
    fresh = KubernetesBackend(backend.config, backend.api, namespace=backend.namespace, watch=False)
    st = wait_for("victim pods gone", lambda: (s := fresh.status([requeue])[requeue.id]).native_state.startswith(
        "event/") and s)
    assert (st.state, st.reason) == (JobState.PREEMPTED, "PreemptedByScheduler")


def test_crossdock_preemption_deletes_pods_and_requeues(backend: KubernetesBackend, k8s_client: client.ApiClient,
                                                       k8s_namespace: str, store: Any,
                                                       follow: Callable[[list[int]], None]) -> None:
    core = client.CoreV1Api(k8s_client)
    victim = _stored(store, make_job("training", on=["a100-1"], gpus=8, model="A100"))
    backend.submit(victim)
    wait_state(backend, victim, JobState.RUNNING)
    backend.preempt(victim, grace_seconds=0)
    assert wait_state(backend, victim, JobState.PREEMPTED).reason == Reason.PREEMPTED
    wait_for("victim's pods deleted", lambda: not pods_of(core, k8s_namespace, victim))
    wait_for("requeued", lambda: follow([victim.id]) or store.get(victim.id).state is JobState.PENDING)
    # The next attempt is a new Job that runs on the freed node.
    again = victim.model_copy(update={"attempts": victim.attempts + 1})
    assert backend.submit(again).endswith(f"cd-{victim.id}-2")
    assert wait_state(backend, again, JobState.RUNNING).nodes == ("a100-1",)


@pytest.mark.parametrize("exit_code", [143, 0], ids=["exits-143-on-sigterm", "checkpoints-and-exits-0"])
def test_a_victim_that_ends_itself_after_the_signal_is_requeued(
        backend: KubernetesBackend, k8s_client: client.ApiClient, k8s_namespace: str, store: Any,
        follow: Callable[[list[int]], None], exit_code: int) -> None:
    """kubelet's SIGTERM makes the program exit (kwok: the exit-code annotation ends the pod):
    a Failed or Succeeded pod of a preempted job is a preemption all the same."""
    core = client.CoreV1Api(k8s_client)
    victim = _stored(store, make_job("training", on=["a100-2"], gpus=8, model="A100"))
    backend.submit(victim)
    wait_for("victim RUNNING", lambda: follow([victim.id]) or store.get(victim.id).state is JobState.RUNNING)
    store.request_preempt(victim.id, 30)  # the leader's mark
    for pod in pods_of(core, k8s_namespace, victim):
        core.patch_namespaced_pod(pod.metadata.name, k8s_namespace,
                                  {"metadata": {"annotations": {m.ANNOTATION_EXIT_CODE: str(exit_code)}}})
    ended = JobState.COMPLETED if exit_code == 0 else JobState.FAILED
    assert wait_state(backend, victim, ended).state is ended  # what the pod says ...
    backend.preempt(store.get(victim.id), 30)
    wait_for("requeued", lambda: follow([victim.id]) or store.get(victim.id).state is not JobState.RUNNING)
    again = store.get(victim.id)  # ... and what crossdock makes of it: preempted, back in the queue
    assert (again.state, again.reason, again.attempts) == (JobState.PENDING, Reason.PREEMPTED, 1)
    assert [e["to"] for e in store.events(victim.id)][-3:] == ["RUNNING", "PREEMPTED", "PENDING"]


def test_cancel_during_the_grace_period_is_not_overridden(
        backend: KubernetesBackend, store: Any, follow: Callable[[list[int]], None]) -> None:
    victim = _stored(store, make_job("training", on=["a100-3"], gpus=8, model="A100"))
    backend.submit(victim)
    wait_for("victim RUNNING", lambda: follow([victim.id]) or store.get(victim.id).state is JobState.RUNNING)
    store.request_preempt(victim.id, 30)
    backend.preempt(store.get(victim.id), 30)
    store.cancel(victim.id)  # the user, while the victim has its grace period
    backend.cancel(store.get(victim.id))
    done = wait_for("ended", lambda: follow([victim.id]) or (j := store.get(victim.id)).state.terminal and j)
    assert (done.state, done.reason, done.attempts) == (JobState.CANCELLED, Reason.CANCELLED_BY_USER, 1)
    assert "PENDING" not in [e["to"] for e in store.events(victim.id)][1:]


def test_cancel_deletes_the_pods(backend: KubernetesBackend, k8s_client: client.ApiClient, k8s_namespace: str) -> None:
    core, batch = client.CoreV1Api(k8s_client), client.BatchV1Api(k8s_client)
    job = make_job("preprocessing", nodes=2)
    backend.submit(job)
    wait_state(backend, job, JobState.RUNNING)
    assert len(pods_of(core, k8s_namespace, job)) == 2
    backend.cancel(job)
    assert wait_state(backend, job, JobState.CANCELLED).reason == Reason.CANCELLED_BY_USER
    wait_for("pods deleted", lambda: not pods_of(core, k8s_namespace, job))
    wait_for("Job deleted", lambda: not batch.list_namespaced_job(
        k8s_namespace, label_selector=f"{m.LABEL_JOB_ID}={job.id}").items)
    assert state_of(backend, job).state is JobState.CANCELLED  # remembered from the watch
    backend.cancel(job)  # idempotent


# --- watch -------------------------------------------------------------------------------------


def _other_cluster() -> bool:
    """KUBECONFIG names a cluster other than the local plane (whose processes these tests touch)."""
    given = os.environ.get("KUBECONFIG")
    return bool(given) and Path(given).resolve() != k8s.kubeconfig_path().resolve()


def test_apiserver_restart_during_a_watch_loses_no_state_change(backend: KubernetesBackend) -> None:
    if _other_cluster():
        pytest.skip("restarts the local plane's kube-apiserver; KUBECONFIG names another cluster")
    pods, _ = backend.informers()
    seen: list[tuple[str, str, str]] = []
    pods.on_event = lambda kind, obj: seen.append((kind, obj["metadata"]["name"], obj["status"].get("phase", "")))
    finishing = make_job("preprocessing", run_seconds=4)
    backend.submit(finishing)
    wait_state(backend, finishing, JobState.RUNNING)
    lists_before = pods.lists

    away = k8s.restart_component("kube-apiserver", kill=True)  # the pod's 4 s run ends while the API server is away or restarting
    assert away > 1.0
    late = make_job("preprocessing", run_seconds=0, exit_code=5)
    backend.submit(late)  # created as soon as the server is back, maybe before the watch resumed

    assert wait_state(backend, finishing, JobState.COMPLETED, timeout=90).exit_code == 0
    assert wait_state(backend, late, JobState.FAILED, timeout=60).exit_code == 5
    assert pods.reconnects >= 1
    names = {n for _, n, _ in seen}
    late_pod = next(n for n in names if n.startswith(f"cd-{late.id}-1-"))
    assert ("ADDED", late_pod, "Pending") in seen  # the watch saw it born, not only a re-list
    assert any(n.startswith(f"cd-{finishing.id}-") and phase == "Succeeded" for _, n, phase in seen)
    assert pods.lists == lists_before or pods.lists == lists_before + 1  # resumed, or re-listed once on 410


def _compact_local_etcd() -> None:
    """Compact the local plane's etcd to its current revision (kube-apiserver itself compacts only
    every 5 minutes, so on a fresh plane resourceVersion 1 may still be served)."""
    import base64
    from urllib.request import Request, urlopen

    state = json.loads((k8s.default_state_dir() / "state.json").read_text())
    url = f"http://127.0.0.1:{state['ports']['etcd-client']}/v3/kv"

    def post(path: str, body: dict) -> dict:
        with urlopen(Request(url + path, data=json.dumps(body).encode()), timeout=10) as resp:
            return json.load(resp)

    revision = int(post("/range", {"key": base64.b64encode(b"/").decode()})["header"]["revision"])
    post("/compaction", {"revision": revision, "physical": True})


def test_watch_lists_again_after_410_gone(k8s_client: client.ApiClient, k8s_namespace: str) -> None:
    if _other_cluster():
        pytest.skip("compacts the local plane's etcd; KUBECONFIG names another cluster")
    core = client.CoreV1Api(k8s_client)
    events: list[tuple[str, str]] = []
    inf = Informer(lambda **kw: core.list_namespaced_pod(k8s_namespace, **kw),
                   on_event=lambda kind, obj: events.append((kind, obj["metadata"]["name"])), watch_timeout=5)
    pod = client.V1Pod(metadata=client.V1ObjectMeta(name="short-lived"), spec=client.V1PodSpec(
        restart_policy="Never", node_selector={"crossdock.io/pool": "cpu"},
        containers=[client.V1Container(name="c", image="x")]))
    core.create_namespaced_pod(k8s_namespace, pod)
    inf.relist()
    assert ("ADDED", "short-lived") in events
    core.delete_namespaced_pod("short-lived", k8s_namespace, grace_period_seconds=0)
    wait_for("pod gone", lambda: not core.list_namespaced_pod(k8s_namespace).items)
    _compact_local_etcd()
    inf.resource_version = "1"  # compacted away: the server answers 410 Gone
    with pytest.raises(Expired):
        inf.watch_once()
    inf.relist()
    assert events[-1] == ("DELETED", "short-lived")
    assert inf.get(k8s_namespace, "short-lived") == (inf.get(k8s_namespace, "short-lived")[0], True)


# --- idempotent dispatch and reconcile ---------------------------------------------------------


def test_replayed_dispatch_creates_no_second_job(k8s_client: client.ApiClient, k8s_namespace: str,
                                                 cfg: ClusterConfig) -> None:
    core, batch = client.CoreV1Api(k8s_client), client.BatchV1Api(k8s_client)
    job = make_job("training", gpus=1, model="A100")
    first = KubernetesBackend(cfg, k8s_client, namespace=k8s_namespace, watch=False)
    ref = first.submit(job)
    # The worker "crashed" after the create: a new process replays the dispatch.
    replay = KubernetesBackend(cfg, k8s_client, namespace=k8s_namespace, watch=False)
    assert replay.submit(job) == ref
    assert replay.submit(job) == ref
    jobs = batch.list_namespaced_job(k8s_namespace, label_selector=f"{m.LABEL_JOB_ID}={job.id}").items
    assert [j.metadata.name for j in jobs] == [f"cd-{job.id}-1"]
    # The status pass lets the attempt's one pod through its gate (once.py).
    wait_for("one pod Running", lambda: replay.status([job]) is None or [
        p for p in pods_of(core, k8s_namespace, job) if p.status.phase == "Running"])
    assert len(pods_of(core, k8s_namespace, job)) == 1
    assert replay.status([job])[job.id].state is JobState.RUNNING

    # A foreign object squatting on the name is not mistaken for the attempt.
    squatter = make_job("training", gpus=1, model="A100")
    body = m.build(squatter, cfg, m.Options(namespace=k8s_namespace))
    body["metadata"]["labels"][m.LABEL_JOB_ID] = "999999999"
    batch.create_namespaced_job(k8s_namespace, body)
    with pytest.raises(SubmitFailed, match="not this attempt's"):
        replay.submit(squatter)


def _duplicate(core: client.CoreV1Api, ns: str, pod: client.V1Pod) -> None:
    """A second pod of the same Job, as the Job controller makes when its cache missed the first."""
    raw = client.ApiClient().sanitize_for_serialization(pod)
    meta = raw["metadata"]
    dup = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": meta["name"] + "-dup", "labels": meta["labels"],
                        "annotations": meta.get("annotations") or {}, "ownerReferences": meta["ownerReferences"],
                        "finalizers": meta.get("finalizers") or []},
           "spec": {**raw["spec"], "schedulingGates": [{"name": once.GATE}]}}
    dup["spec"].pop("nodeName", None)
    core.create_namespaced_pod(ns, dup)


def test_a_store_started_afresh_does_not_take_an_earlier_stores_objects_for_its_own(
        k8s_client: client.ApiClient, k8s_namespace: str, cfg: ClusterConfig) -> None:
    """The namespace still holds the Job of an earlier store's job 7 (made before stores had an
    identity); a store started afresh (ids from 1 again) gets its own job 7: it is not told that
    Job's outcome, and its dispatch is refused with the fix rather than taking the Job over. A
    store that an earlier release wrote (an upgrade) still follows it."""
    core = client.CoreV1Api(k8s_client)
    job = make_job("preprocessing", run_seconds=0.5)
    earlier = KubernetesBackend(cfg, k8s_client, namespace=k8s_namespace, watch=False)
    earlier.submit(job)
    assert wait_state(earlier, job, JobState.COMPLETED).state is JobState.COMPLETED
    fresh = KubernetesBackend(cfg, k8s_client, namespace=k8s_namespace, watch=False,
                              installation=lambda: ("a1b2c3d4e5f6", False))
    assert fresh.status([job]) == {}  # not its job: the follower finds it lost, not ended
    with pytest.raises(SubmitFailed, match="not this attempt's.*another namespace"):
        fresh.submit(job)
    upgraded = KubernetesBackend(cfg, k8s_client, namespace=k8s_namespace, watch=False,
                                 installation=lambda: ("c0ffeec0ffee", True))
    assert upgraded.status([job])[job.id].state is JobState.COMPLETED
    # the fresh store's own jobs carry its identity and are its own, watched or listed
    mine = make_job("preprocessing", run_seconds=0.5)
    fresh.submit(mine)
    assert {p.metadata.labels[m.LABEL_INSTALLATION] for p in wait_for(
        "its pod", lambda: pods_of(core, k8s_namespace, mine))} == {"a1b2c3d4e5f6"}
    assert wait_state(fresh, mine, JobState.COMPLETED).state is JobState.COMPLETED
    assert upgraded.status([mine]) == {}


@pytest.mark.parametrize("when", ["before-release", "after-release"])
def test_a_second_pod_of_an_attempt_never_runs(k8s_client: client.ApiClient, k8s_namespace: str,
                                               cfg: ClusterConfig, when: str) -> None:
    """Kubernetes' Job controller can start a Job's pod twice (its docs say so; a chaos run saw
    it after API server restarts). Every pod waits behind ``crossdock.io/once`` and the status
    pass lets through only a pod alone in its attempt, so the duplicate never binds and the Job
    controller deletes it as excess, without failing the Job."""
    core, batch = client.CoreV1Api(k8s_client), client.BatchV1Api(k8s_client)
    # Before: no watch, so only the status pass lets a pod through. After: the watching backend's
    # releaser lets the first pod through at once, and the excess's tombstone holds nothing.
    backend = KubernetesBackend(cfg, k8s_client, namespace=k8s_namespace, watch=when == "after-release")
    try:
        if when == "after-release":
            backend.informers()
        job = make_job("preprocessing", run_seconds=4)
        backend.submit(job)
        (first,) = wait_for("the attempt's pod", lambda: pods_of(core, k8s_namespace, job))
        if when == "before-release":
            assert first.spec.scheduling_gates[0].name == once.GATE and not first.spec.node_name
        else:
            wait_state(backend, job, JobState.RUNNING)
        _duplicate(core, k8s_namespace, first)
        # Two pods in the attempt: no more is let through until the Job controller removed the excess
        # (it keeps the one that is further on; between two gated pods, whichever it likes).
        while_two: set[str] = set()

        def one_left() -> bool:
            backend.status([job])
            pods = pods_of(core, k8s_namespace, job)
            if len(pods) > 1:
                while_two.update(p.metadata.name for p in pods if p.spec.node_name)
            return len(pods) == 1

        wait_for("the excess pod deleted", one_left)
        assert len(while_two) == (1 if when == "after-release" else 0)
        assert wait_state(backend, job, JobState.COMPLETED, JobState.FAILED).state is JobState.COMPLETED
    finally:
        backend.close()
    ran = [p.metadata.name for p in pods_of(core, k8s_namespace, job) if p.spec.node_name]
    assert len(ran) == 1 and [p.metadata.name for p in pods_of(core, k8s_namespace, job)] == ran
    kjob = wait_for("the Job Complete", lambda: (j := batch.read_namespaced_job(f"cd-{job.id}-1", k8s_namespace))
                    .status.succeeded and j)
    assert (kjob.status.succeeded, kjob.status.failed) == (1, None)  # the deleted excess is no failure


def test_orphans_are_found_and_deleted(backend: KubernetesBackend, k8s_client: client.ApiClient,
                                       k8s_namespace: str) -> None:
    batch = client.BatchV1Api(k8s_client)
    live = make_job("preprocessing")
    stale = make_job("preprocessing")
    backend.submit(live)
    backend.submit(stale)
    # crossdock moved on to attempt 2 of ``stale`` (requeued while its dispatch was in flight).
    active = [live, stale.model_copy(update={"attempts": 2})]
    wait_for("both Jobs seen", lambda: len(backend.status([live, stale])) == 2)
    orphans = backend.orphans(active)
    assert [(o.job_id, o.attempt) for o in orphans] == [(stale.id, 1)]
    backend.delete_orphans(active)
    wait_for("orphan Job gone", lambda: not batch.list_namespaced_job(
        k8s_namespace, label_selector=f"{m.LABEL_JOB_ID}={stale.id}").items)
    assert batch.list_namespaced_job(k8s_namespace, label_selector=f"{m.LABEL_JOB_ID}={live.id}").items


def test_array_as_one_indexed_job(backend: KubernetesBackend, k8s_client: client.ApiClient,
                                  k8s_namespace: str) -> None:
    core = client.CoreV1Api(k8s_client)

    def array(exit_code: int) -> list[Job]:
        base = next(_ids)
        return [make_job("preprocessing", job_id=base + 1 + t, array_job_id=base, array_task_id=t,
                         array=ArraySpec(task_ids=[0, 1, 2], max_running=2), exit_code=exit_code, run_seconds=1)
                for t in range(3)]

    ok, bad = array(0), array(3)
    refs = backend.submit_array(ok)
    assert list(refs.values()) == [f"{k8s_namespace}/cd-a{ok[0].array_job_id}-1#{i}" for i in range(3)]
    assert backend.submit_array(ok) == refs  # replayed: the same Job
    backend.submit_array(bad)
    for task in ok:
        assert wait_state(backend, task, JobState.COMPLETED, JobState.FAILED).state is JobState.COMPLETED
    for task in bad:
        st = wait_state(backend, task, JobState.COMPLETED, JobState.FAILED)
        assert (st.state, st.exit_code) == (JobState.FAILED, 3)
    pods = core.list_namespaced_pod(k8s_namespace, label_selector=f"{m.LABEL_ARRAY_JOB}={ok[0].array_job_id}").items
    assert sorted(p.metadata.annotations["batch.kubernetes.io/job-completion-index"] for p in pods) == ["0", "1", "2"]
    env = {e.name: e.value for e in pods[0].spec.containers[0].env}
    assert env["CROSSDOCK_ARRAY_TASK_IDS"] == "0 1 2"


def test_cancelling_one_array_task_leaves_the_others_running(backend: KubernetesBackend,
                                                             k8s_client: client.ApiClient, k8s_namespace: str) -> None:
    core = client.CoreV1Api(k8s_client)
    base = next(_ids)
    tasks = [make_job("preprocessing", job_id=base + 1 + t, array_job_id=base, array_task_id=t,
                      array=ArraySpec(task_ids=[0, 1, 2])) for t in range(3)]
    backend.submit_array(tasks)
    for task in tasks:
        wait_state(backend, task, JobState.RUNNING)
    backend.cancel(tasks[1])
    assert wait_state(backend, tasks[1], JobState.CANCELLED).reason == Reason.CANCELLED_BY_USER
    wait_for("index 1's pod deleted", lambda: sorted(
        p.metadata.annotations["batch.kubernetes.io/job-completion-index"]
        for p in core.list_namespaced_pod(k8s_namespace, label_selector=f"{m.LABEL_ARRAY_JOB}={base}").items)
        == ["0", "2"])
    # The Job controller has seen index 1 go (it counts a deleted pod as failed): whatever it
    # does about that, failing the Job or replacing the pod, it has done; the watch has it too.
    batch = client.BatchV1Api(k8s_client)

    def index_1_counted(status: dict[str, Any] | None) -> bool:
        status = status or {}
        return (status.get("failed") or 0) >= 1 or "1" in (status.get("failedIndexes") or "").split(",")

    kjob = wait_for("the Job controller to count index 1 as failed", lambda: next(
        (j for j in batch.list_namespaced_job(k8s_namespace, label_selector=f"{m.LABEL_ARRAY_JOB}={base}").items
         if index_1_counted(k8s_client.sanitize_for_serialization(j).get("status"))), None))
    if backend.watch:
        _, jobs = backend.informers()
        wait_for("the watch to see the count", lambda: index_1_counted(
            ((jobs.get(k8s_namespace, kjob.metadata.name)[0] or {}).get("status"))))
    assert sorted(p.metadata.annotations["batch.kubernetes.io/job-completion-index"]
                  for p in core.list_namespaced_pod(k8s_namespace, label_selector=f"{m.LABEL_ARRAY_JOB}={base}").items) \
        == ["0", "2"]
    assert [backend.status([t])[t.id].state for t in (tasks[0], tasks[2])] == [JobState.RUNNING] * 2


def test_priority_classes_are_synced(backend: KubernetesBackend, k8s_client: client.ApiClient) -> None:
    sched = client.SchedulingV1Api(k8s_client)
    names = backend.sync_priority_classes()
    assert names == ["crossdock-inference", "crossdock-preprocessing", "crossdock-training"]
    pcs = {n: sched.read_priority_class(n) for n in names}
    assert pcs["crossdock-inference"].value == 1000
    assert pcs["crossdock-preprocessing"].preemption_policy == "Never"
    assert not any(p.global_default for p in pcs.values())


def test_logs_are_read_through_the_api(backend: KubernetesBackend) -> None:
    """kwok nodes run no containers, so the API server's proxy to the kubelet fails: the backend
    turns that into a retryable error naming the pod rather than a client traceback."""
    from crossdock.queue.ports import BackendUnavailable

    job = make_job("preprocessing")
    backend.submit(job)
    wait_state(backend, job, JobState.RUNNING)
    try:
        text = backend.logs(job, tail_lines=10)
    except BackendUnavailable as exc:
        assert f"cd-{job.id}-1-" in str(exc)
    else:
        assert isinstance(text, str)

