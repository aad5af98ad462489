"""The Kubernetes backend's ``evict`` through the real Eviction API (policy/v1) and its PodDisruptionBudgets
read as crossdock's disruption budgets, on two kwok GPU nodes of this test's own (unique names,
deleted after: other tests share the plane)."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from crossdock.backends.kubernetes import KubernetesBackend
from crossdock.backends.kubernetes import manifests as m
from crossdock.dev.k8s.nodes import NodePool
from crossdock.queue.config import parse_config
from crossdock.queue.models import GpuRequest, Job, JobSpec
from crossdock.queue.ports import Eviction, EvictsJobs, ReportsDisruptionBudgets
from crossdock.queue.states import JobState
from k8s_helpers import wait_for

pytestmark = [pytest.mark.kubernetes, pytest.mark.descheduler]

GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


@pytest.fixture
def gpu_nodes(k8s_client: client.ApiClient) -> Iterator[NodePool]:
    """Two 8-GPU kwok nodes of a pool no other test uses; gone (with their pods) after the test."""
    pool = NodePool(f"ev{secrets.token_hex(3)}", 2, cpu="96", memory="1000Gi", gpus=8,
                    gpu_product="NVIDIA-A100-SXM4-80GB")
    core = client.CoreV1Api(k8s_client)
    for node in pool.nodes():
        core.create_node(node)
    wait_for("the nodes Ready", lambda: all(
        any(c.type == "Ready" and c.status == "True" for c in (core.read_node(n["metadata"]["name"]).status.conditions
                                                                or [])) for n in pool.nodes()))
    yield pool
    for node in pool.nodes():
        try:
            core.delete_node(node["metadata"]["name"])
        except ApiException as err:
            if err.status != 404:
                raise


@pytest.fixture
def backend(k8s_client: client.ApiClient, k8s_namespace: str, gpu_nodes: NodePool, store: Any
            ) -> Iterator[KubernetesBackend]:
    cfg = parse_config({
        "priority_classes": {"training": {"value": 100, "preemptible": True, "grace_seconds": 1}},
        "pools": {gpu_nodes.name: {"backend": "k8s", "selector": {"crossdock.io/pool": gpu_nodes.name},
                                   "gpu": {"model": "A100"}, "tolerations": [GPU_TOLERATION]}},
        "queues": {"training": {"priority_class": "training", "pools": [gpu_nodes.name]}},
        "default_queue": "training",
    })
    b = KubernetesBackend(cfg, k8s_client, namespace=k8s_namespace, store=store, ttl_seconds_after_finished=None,
                          deadline_slack_seconds=0)
    b.sync_priority_classes()
    yield b
    b.close()


def running_job(backend: KubernetesBackend, store: Any, node: str, labels: dict[str, str] | None = None) -> Job:
    pool = backend.config.queues["training"].pools[0]
    spec = JobSpec(command=["train"], gpus=GpuRequest(count=1, type="A100"))
    (saved,) = store.submit([Job(id=0, spec=spec, queue="training", priority_class="training", priority=100,
                                 preemptible=True, pools=[pool], pool=pool)])
    store.transition(saved.id, JobState.SCHEDULED, bump_attempt=True,
                     fields={"nodes": [node], "pool": pool, "backend": "k8s"})
    job = store.get(saved.id)
    backend.submit(job)
    wait_for(f"job {job.id} running on {node}",
             lambda: (st := backend.status([job]).get(job.id)) is not None and st.state is JobState.RUNNING)
    if labels:  # what a PDB's selector picks besides crossdock's own labels
        core = client.CoreV1Api(backend.api)
        for pod in core.list_namespaced_pod(backend.namespace, label_selector=f"{m.LABEL_JOB_ID}={job.id}").items:
            core.patch_namespaced_pod(pod.metadata.name, backend.namespace, {"metadata": {"labels": labels}})
    return job


def pdb(backend: KubernetesBackend, name: str, labels: dict[str, str], **bounds: Any) -> None:
    """A PodDisruptionBudget over the pods carrying ``labels``, once the disruption controller has counted them
    (until then the API server refuses every eviction it covers)."""
    body = {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": name},
            "spec": {"selector": {"matchLabels": labels}, **bounds}}
    policy = client.PolicyV1Api(backend.api)
    policy.create_namespaced_pod_disruption_budget(backend.namespace, body)
    wait_for(f"PDB {name} processed", lambda: (s := policy.read_namespaced_pod_disruption_budget(
        name, backend.namespace).status) is not None and s.observed_generation == 1 and s.expected_pods == 2)


def test_evict_goes_through_the_eviction_api_and_the_job_is_requeued(backend: KubernetesBackend, store: Any,
                                                                    gpu_nodes: NodePool) -> None:
    assert isinstance(backend, EvictsJobs) and backend.capabilities.evicts
    node = f"{gpu_nodes.name}-0"
    job = running_job(backend, store, node)
    assert backend.evict(job, grace_seconds=0) is Eviction.EVICTED
    st = wait_for("the attempt ended by the eviction", lambda: (s := backend.status([job]).get(job.id)) is not None
                  and s.state is JobState.PREEMPTED and s)
    assert st.reason == "Evicted" and st.nodes in ((node,), ())
    core = client.CoreV1Api(backend.api)
    wait_for("its pod gone", lambda: not core.list_namespaced_pod(
        backend.namespace, label_selector=f"{m.LABEL_JOB_ID}={job.id}").items)
    assert store.get(job.id).preempt_requested  # its capacity counts as terminating, as for a preemption
    # Evicting it again finds nothing left: GONE, not an error.
    assert backend.evict(job, grace_seconds=0) is Eviction.GONE


def test_a_pdb_of_one_refuses_the_second_eviction_and_is_read_as_a_budget(backend: KubernetesBackend, store: Any,
                                                                         gpu_nodes: NodePool) -> None:
    assert isinstance(backend, ReportsDisruptionBudgets)
    labels = {"app": f"pdb{secrets.token_hex(2)}"}
    jobs = [running_job(backend, store, f"{gpu_nodes.name}-{i}", labels) for i in range(2)]
    # Pods of Jobs have no scale subresource: such a PDB may only give an integer minAvailable.
    pdb(backend, "train", labels, minAvailable=1)
    (budget,) = [b for b in backend.disruption_budgets() if b.name.endswith("/train")]
    assert budget.jobs == frozenset(j.id for j in jobs)
    assert (budget.max_unavailable, budget.min_available, budget.disruptions_allowed) == (None, 1, 1)

    assert backend.evict(jobs[0], grace_seconds=0) is Eviction.EVICTED
    # The budget's 429 while the first is down: refused, nothing stopped, the Job not marked.
    assert backend.evict(jobs[1], grace_seconds=0) is Eviction.REFUSED_BY_BUDGET
    core = client.CoreV1Api(backend.api)
    (pod,) = core.list_namespaced_pod(backend.namespace, label_selector=f"{m.LABEL_JOB_ID}={jobs[1].id}").items
    assert pod.metadata.deletion_timestamp is None and pod.status.phase == "Running"
    kjob = client.BatchV1Api(backend.api).read_namespaced_job(m.job_name(jobs[1].id, 1), backend.namespace)
    assert m.ANNOTATION_STOP not in (kjob.metadata.annotations or {})
    assert backend.status([jobs[1]])[jobs[1].id].state is JobState.RUNNING
    assert not store.get(jobs[1].id).preempt_requested
    wait_for("the budget counts the evicted job", lambda: [
        b for b in backend.disruption_budgets() if b.name.endswith("/train") and b.disruptions_allowed == 0])
