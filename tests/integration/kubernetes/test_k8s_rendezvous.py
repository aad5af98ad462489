"""A 2-node job on the real control plane: its workers get stable hostnames through a headless
Service (the names the cluster DNS serves, as the EndpointSlice controller publishes them) and
rank variables that agree across the pods.

kwok runs no containers and the plane has no DNS, so what is checked is what a resolver and a
launcher would be given: the pods' ``hostname``/``subdomain``, the Service's selector and its
EndpointSlice hostnames, and each pod's environment as the kubelet expands it."""

from __future__ import annotations

import re

import pytest
from kubernetes import client

from crossdock.backends.kubernetes import KubernetesBackend
from crossdock.backends.kubernetes import manifests as m
from crossdock.queue.hostlist import expand_hostlist
from crossdock.queue.states import JobState
from tests.integration.kubernetes.test_backend import backend, cfg, make_job, pods_of, wait_for, wait_state  # noqa: F401

pytestmark = pytest.mark.kubernetes


def pod_env(pod: client.V1Pod) -> dict[str, str]:
    """The main container's environment as the kubelet makes it (downward API, ``$(VAR)``)."""
    index = pod.metadata.annotations["batch.kubernetes.io/job-completion-index"]
    fields = {"metadata.name": pod.metadata.name, m.COMPLETION_INDEX: index,
              # the Job controller's own JOB_COMPLETION_INDEX
              "metadata.labels['batch.kubernetes.io/job-completion-index']": index}
    env: dict[str, str] = {}
    for e in pod.spec.containers[0].env:
        if e.value_from is not None:
            env[e.name] = fields[e.value_from.field_ref.field_path]
        else:
            env[e.name] = re.sub(r"\$\((\w+)\)", lambda mt: env.get(mt.group(1), mt.group(0)), e.value or "")
    return env


def test_two_node_job_workers_find_each_other(backend: KubernetesBackend, k8s_client: client.ApiClient,  # noqa: F811
                                              k8s_namespace: str) -> None:
    core, discovery = client.CoreV1Api(k8s_client), client.DiscoveryV1Api(k8s_client)
    job = make_job("preprocessing", nodes=2, ntasks=4, run_seconds=60)
    backend.submit(job)
    wait_state(backend, job, JobState.RUNNING)
    name = m.job_name(job.id, job.attempts)

    svc = core.read_namespaced_service(name, k8s_namespace)
    owner = client.BatchV1Api(k8s_client).read_namespaced_job(name, k8s_namespace)
    assert svc.spec.cluster_ip == "None" and svc.spec.publish_not_ready_addresses
    assert [(r.kind, r.uid) for r in svc.metadata.owner_references] == [("Job", owner.metadata.uid)]

    pods = sorted(pods_of(core, k8s_namespace, job), key=lambda p: p.spec.hostname or "")
    assert [(p.spec.hostname, p.spec.subdomain) for p in pods] == [(f"{name}-0", name), (f"{name}-1", name)]
    assert all(svc.spec.selector.items() <= p.metadata.labels.items() for p in pods)

    def published() -> list[str] | None:
        slices = discovery.list_namespaced_endpoint_slice(
            k8s_namespace, label_selector=f"kubernetes.io/service-name={name}").items
        hosts = sorted(e.hostname for s in slices for e in s.endpoints or [] if e.hostname)
        return hosts if len(hosts) == 2 else None

    # <hostname>.<subdomain> is what the cluster DNS answers for each worker
    assert wait_for("the Service's EndpointSlice names both workers", published) == [f"{name}-0", f"{name}-1"]

    envs = [pod_env(p) for p in pods]
    for rank, env in enumerate(envs):
        assert (env["RANK"], env["NODE_RANK"], env["SLURM_NODEID"], env["SLURMD_NODENAME"]) == (
            str(rank), str(rank), str(rank), pods[rank].spec.hostname)
    shared = {k: {e[k] for e in envs} for k in ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "SLURM_JOB_NODELIST",
                                                  "SLURM_NTASKS", "SLURM_TASKS_PER_NODE", "SLURM_JOB_ID")}
    assert shared == {"MASTER_ADDR": {f"{name}-0"}, "MASTER_PORT": {str(m.RENDEZVOUS_PORT)}, "WORLD_SIZE": {"2"},
                      "SLURM_JOB_NODELIST": {f"{name}-[0-1]"}, "SLURM_NTASKS": {"4"},
                      "SLURM_TASKS_PER_NODE": {"2(x2)"}, "SLURM_JOB_ID": {str(job.id)}}
    assert expand_hostlist(envs[0]["SLURM_JOB_NODELIST"]) == [p.spec.hostname for p in pods]
