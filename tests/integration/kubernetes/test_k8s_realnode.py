"""Python functions through crossdock to a REAL node of the local plane: the upstream kubelet
with Debian's containerd and runc runs the pods crossdock creates, from an image built from
Debian packages with this checkout's crossdock (``crossdock.dev.k8s.realnode``). The outcome
reaches the store from inside the container, and the pod's status is the kubelet's.

The pods reach the test's embedded Redis (a unix socket) and its signing key through the one
thing a cluster adds here: a MutatingAdmissionPolicy, scoped to the test's namespace, that mounts
the test's temporary directory at the same path (the host's files, as a shared filesystem would
give them on a real cluster). crossdock's manifests are otherwise exactly what it writes."""

from __future__ import annotations

import sys
import time
import uuid
from pathlib import Path
from typing import Any

import cloudpickle
import pytest
import yaml
from kubernetes import client
from kubernetes.client.rest import ApiException

from crossdock.backends.kubernetes import manifests as m
from crossdock.client import Client
from crossdock.dev.k8s import realnode
from crossdock.dev.k8s.errors import ControlPlaneError
from crossdock.queue.states import JobState
from tests.conftest import k8s_unavailable

pytestmark = [pytest.mark.kubernetes, pytest.mark.realnode, pytest.mark.redis, pytest.mark.celery]
cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the pod cannot import this test module

CONFIG: dict[str, Any] = {
    "priority_classes": {"batch": {"value": 500, "grace_seconds": 1}},
    "pools": {"real": {"backend": "k8s", "selector": dict(realnode.SELECTOR),
                       "tolerations": [dict(realnode.TOLERATION)], "backend_queue": 10}},
    "queues": {"batch": {"priority_class": "batch", "pools": ["real"]}},
    "default_queue": "batch",
    "scheduler": {"interval_seconds": 0.3, "lease_seconds": 2},
}


class Refused(Exception):
    pass


def scale(x, b=1):
    import os
    import socket

    return x * b, socket.gethostname(), os.path.isdir("/opt/crossdock/src")  # the image's crossdock


def refuse(x):
    raise Refused(f"refused {x}")


@pytest.fixture(scope="module")
def real_node(k8s_kubeconfig):
    try:
        node = realnode.up()
    except ControlPlaneError as err:
        realnode.down()  # what did start
        k8s_unavailable(f"the real node (python -m crossdock.dev.k8s node up): {err}")
    yield node
    realnode.down()


@pytest.fixture
def host_files(k8s_client, k8s_namespace, tmp_path_factory):
    """The test's temporary directory mounted at its own path in every pod of the namespace."""
    base = str(tmp_path_factory.getbasetemp())
    assert '"' not in base and "\\" not in base  # spliced into a CEL string literal below
    adm = client.AdmissionregistrationV1Api(k8s_client)
    name = f"crossdock-realnode-{k8s_namespace}"
    volume = "crossdock-host-files"
    adm.create_mutating_admission_policy({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingAdmissionPolicy",
        "metadata": {"name": name},
        "spec": {"matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                                                          "operations": ["CREATE"], "resources": ["pods"]}]},
                 "failurePolicy": "Fail", "reinvocationPolicy": "Never",
                 "mutations": [{"patchType": "ApplyConfiguration", "applyConfiguration": {"expression": (
                     'Object{spec: Object.spec{'
                     f'volumes: [Object.spec.volumes{{name: "{volume}", '
                     f'hostPath: Object.spec.volumes.hostPath{{path: "{base}", type: "Directory"}}}}], '
                     f'containers: [Object.spec.containers{{name: "{m.CONTAINER}", volumeMounts: '
                     f'[Object.spec.containers.volumeMounts{{name: "{volume}", mountPath: "{base}"}}]}}]}}}}')}}]}})
    adm.create_mutating_admission_policy_binding({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingAdmissionPolicyBinding",
        "metadata": {"name": name},
        "spec": {"policyName": name, "matchResources": {"namespaceSelector": {
            "matchLabels": {"kubernetes.io/metadata.name": k8s_namespace}}}}})
    try:
        _wait_policy_active(k8s_client, k8s_namespace, base)
        yield base
    finally:
        for delete in (adm.delete_mutating_admission_policy_binding, adm.delete_mutating_admission_policy):
            try:
                delete(name)
            except ApiException as err:
                if err.status != 404:
                    raise


def _wait_policy_active(k8s_client, namespace: str, base: str, timeout: float = 30) -> None:
    """Admission policies take effect after the API server's informer sees them: dry-run a pod
    until it comes back mutated."""
    core = client.CoreV1Api(k8s_client)
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "policy-probe"},
           "spec": {"containers": [{"name": m.CONTAINER, "image": "none"}]}}
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        out = core.create_namespaced_pod(namespace, pod, dry_run="All")
        if any(v.host_path and v.host_path.path == base for v in out.spec.volumes or []):
            return
        time.sleep(0.3)
    raise AssertionError(f"the MutatingAdmissionPolicy did not act on {namespace}'s pods within {timeout}s")


@pytest.fixture
def py_client(real_node, host_files, tmp_path: Path, redis_url: str, monkeypatch, k8s_kubeconfig, k8s_namespace):
    from crossdock.runtime import Runtime
    from tests.conftest import Cluster

    cfg = tmp_path / "crossdock.yaml"
    cfg.write_text(yaml.safe_dump(CONFIG))
    env = {"CROSSDOCK_REDIS_URL": redis_url, "CROSSDOCK_STATE_DIR": str(tmp_path / "state"),
           "CROSSDOCK_CONFIG": str(cfg), "CROSSDOCK_PREFIX": f"r{uuid.uuid4().hex[:10]}",
           "CROSSDOCK_KUBECONFIG": str(k8s_kubeconfig), "CROSSDOCK_K8S_NAMESPACE": k8s_namespace,
           "CROSSDOCK_K8S_TTL_SECONDS": "600", "CROSSDOCK_K8S_IMAGE": real_node.image}
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    cluster = Cluster(Runtime.from_env(), tmp_path)
    yield Client(cluster.rt)
    cluster.close()


def pods_of(k8s_client, namespace: str, selector: str) -> list[client.V1Pod]:
    return client.CoreV1Api(k8s_client).list_namespaced_pod(namespace, label_selector=selector).items


def terminated(pod: client.V1Pod):
    """The main container's end as the kubelet reported it (a containerd container id)."""
    status = next(s for s in pod.status.container_statuses if s.name == m.CONTAINER)
    assert status.container_id and status.container_id.startswith("containerd://"), status
    return status.state.terminated


def test_return_value_and_remote_exception_from_real_pods(py_client, k8s_client, k8s_namespace):
    ok = py_client.submit(scale, 6, b=7)
    value, hostname, in_image = ok.result(timeout=180)
    assert value == 42 and in_image and ok.state is JobState.COMPLETED
    [pod] = pods_of(k8s_client, k8s_namespace, f"{m.LABEL_JOB_ID}={ok.id}")
    assert pod.spec.node_name == realnode.NAME and hostname == pod.metadata.name  # ran in the pod
    assert terminated(pod).exit_code == 0 and pod.status.phase == "Succeeded"

    bad = py_client.submit(refuse, 3)
    with pytest.raises(Refused, match="refused 3") as exc:
        bad.result(timeout=180)
    assert any("remote traceback" in n and "refuse" in n for n in exc.value.__notes__)
    [pod] = pods_of(k8s_client, k8s_namespace, f"{m.LABEL_JOB_ID}={bad.id}")
    assert terminated(pod).exit_code == 1 and pod.status.phase == "Failed"
    assert bad.state is JobState.FAILED


def test_map_tasks_each_store_their_own_result_from_real_pods(py_client, k8s_client, k8s_namespace):
    handles = py_client.map(lambda x: x + 100, range(3))  # the node's 2 CPUs run them in two waves
    assert [h.result(timeout=180) for h in handles] == [100, 101, 102]
    pods = pods_of(k8s_client, k8s_namespace, f"{m.LABEL_ARRAY_JOB}={handles[0].job.array_job_id}")
    assert len(pods) == 3 and {p.spec.node_name for p in pods} == {realnode.NAME}
    assert all(terminated(p).exit_code == 0 for p in pods)
