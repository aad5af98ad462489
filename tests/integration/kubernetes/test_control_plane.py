"""The local control plane behaves like a real cluster: Jobs, scheduling, preemption.

Every object goes through the official Python client to the real kube-apiserver;
the Job controller, kube-scheduler and kwok (the fake kubelet) do the rest.
"""

from __future__ import annotations

import os
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config
from kubernetes.client.rest import ApiException

from crossdock.dev import k8s
from crossdock.dev.k8s import ANNOTATION_EXIT_CODE, ANNOTATION_RUN_SECONDS, GPU_RESOURCE, LABEL_POOL
from k8s_helpers import wait_for

pytestmark = pytest.mark.kubernetes


GPU_TOLERATION = client.V1Toleration(key=GPU_RESOURCE, operator="Exists", effect="NoSchedule")




def _container(gpus: int, cpu: str = "1") -> client.V1Container:
    limits = {"cpu": cpu, "memory": "1Gi"}
    if gpus:
        limits[GPU_RESOURCE] = str(gpus)
    return client.V1Container(name="main", image="registry.invalid/crossdock/train:1",
                              command=["python", "train.py"],
                              resources=client.V1ResourceRequirements(requests=limits, limits=limits))


def _job(name: str, *, gpus: int, annotations: dict[str, str], pool: str) -> client.V1Job:
    return client.V1Job(
        metadata=client.V1ObjectMeta(name=name),
        spec=client.V1JobSpec(
            backoff_limit=0,
            template=client.V1PodTemplateSpec(
                metadata=client.V1ObjectMeta(annotations=annotations),
                spec=client.V1PodSpec(
                    restart_policy="Never",
                    node_selector={LABEL_POOL: pool},
                    tolerations=[GPU_TOLERATION],
                    containers=[_container(gpus)],
                ),
            ),
        ),
    )


def _job_condition(batch: client.BatchV1Api, ns: str, name: str) -> str | None:
    job = batch.read_namespaced_job_status(name, ns)
    for cond in job.status.conditions or []:
        if cond.type in ("Complete", "Failed") and cond.status == "True":
            return str(cond.type)
    return None


def _only_pod(core: client.CoreV1Api, ns: str, job: str) -> client.V1Pod:
    pods = core.list_namespaced_pod(ns, label_selector=f"job-name={job}").items
    assert len(pods) == 1, [p.metadata.name for p in pods]
    return pods[0]


def _node_gpus(node: client.V1Node) -> int:
    return int((node.status.allocatable or {}).get(GPU_RESOURCE, "0"))


def test_fake_nodes_are_ready_with_gpu_capacity(k8s_client: client.ApiClient) -> None:
    core = client.CoreV1Api(k8s_client)
    nodes = core.list_node(label_selector=f"{LABEL_POOL}=a100").items
    assert len(nodes) >= 1
    for node in nodes:
        assert _node_gpus(node) == 8
        assert node.metadata.labels["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-80GB"
        assert any(t.key == GPU_RESOURCE and t.effect == "NoSchedule" for t in node.spec.taints or [])
        ready = {c.type: c.status for c in node.status.conditions or []}
        assert ready.get("Ready") == "True"
    # kwok renews a Lease per node like a kubelet, so the nodes stay Ready past the
    # node lifecycle controller's grace period.
    coordination = client.CoordinationV1Api(k8s_client)
    for node in nodes:
        name = node.metadata.name
        lease = wait_for(f"lease of {name}", lambda name=name: _lease(coordination, name))
        assert lease.spec.holder_identity
        assert lease.spec.renew_time is not None


def _lease(coordination: client.CoordinationV1Api, node: str) -> Any:
    try:
        return coordination.read_namespaced_lease(node, "kube-node-lease")
    except ApiException as err:
        if err.status == 404:
            return None
        raise


def test_job_pod_runs_on_gpu_node_then_succeeds(k8s_client: client.ApiClient, k8s_namespace: str) -> None:
    core, batch = client.CoreV1Api(k8s_client), client.BatchV1Api(k8s_client)
    name = "train-ok"
    batch.create_namespaced_job(k8s_namespace, _job(name, gpus=1, pool="a100",
                                                    annotations={ANNOTATION_RUN_SECONDS: "3"}))

    running = wait_for("the Job's pod Running",
                       lambda: next((p for p in core.list_namespaced_pod(
                           k8s_namespace, label_selector=f"job-name={name}").items
                           if p.status.phase == "Running"), None))
    assert _job_condition(batch, k8s_namespace, name) is None  # still running: the run time holds it

    assert wait_for("Job Complete", lambda: _job_condition(batch, k8s_namespace, name)) == "Complete"
    pod = _only_pod(core, k8s_namespace, name)
    assert pod.metadata.name == running.metadata.name
    assert pod.status.phase == "Succeeded"
    node = core.read_node(pod.spec.node_name)
    assert node.metadata.annotations.get("kwok.x-k8s.io/node") == "fake"
    assert node.metadata.labels[LABEL_POOL] == "a100"
    assert _node_gpus(node) >= 1
    terminated = pod.status.container_statuses[0].state.terminated
    assert terminated.exit_code == 0
    assert terminated.finished_at - pod.status.start_time >= timedelta(seconds=2)
    job = batch.read_namespaced_job_status(name, k8s_namespace)
    assert job.status.succeeded == 1


def test_job_pod_fails_with_annotated_exit_code(k8s_client: client.ApiClient, k8s_namespace: str) -> None:
    core, batch = client.CoreV1Api(k8s_client), client.BatchV1Api(k8s_client)
    name = "train-crash"
    batch.create_namespaced_job(k8s_namespace, _job(name, gpus=4, pool="l4", annotations={
        ANNOTATION_RUN_SECONDS: "1", ANNOTATION_EXIT_CODE: "3"}))

    assert wait_for("Job Failed", lambda: _job_condition(batch, k8s_namespace, name)) == "Failed"
    pod = _only_pod(core, k8s_namespace, name)
    assert pod.status.phase == "Failed"
    assert pod.status.container_statuses[0].state.terminated.exit_code == 3
    assert core.read_node(pod.spec.node_name).metadata.labels[LABEL_POOL] == "l4"


def test_pod_wanting_more_gpus_than_any_node_stays_pending(
        k8s_client: client.ApiClient, k8s_namespace: str) -> None:
    core = client.CoreV1Api(k8s_client)
    most = max(_node_gpus(n) for n in core.list_node().items)
    pod = client.V1Pod(
        metadata=client.V1ObjectMeta(name="too-big"),
        spec=client.V1PodSpec(restart_policy="Never", tolerations=[GPU_TOLERATION],
                              containers=[_container(most * 2)]),
    )
    core.create_namespaced_pod(k8s_namespace, pod)

    def unschedulable() -> Any:
        status = core.read_namespaced_pod_status("too-big", k8s_namespace).status
        return next((c for c in status.conditions or []
                     if c.type == "PodScheduled" and c.status == "False" and c.reason == "Unschedulable"), None)

    cond = wait_for("PodScheduled=False/Unschedulable", unschedulable)
    assert f"Insufficient {GPU_RESOURCE}" in cond.message
    pod = core.read_namespaced_pod("too-big", k8s_namespace)
    assert pod.status.phase == "Pending"
    assert pod.spec.node_name is None


def _priority_class(sched: client.SchedulingV1Api, name: str, value: int) -> None:
    sched.create_priority_class(client.V1PriorityClass(metadata=client.V1ObjectMeta(name=name), value=value))


def _pinned_pod(name: str, node: str, gpus: int, priority_class: str) -> client.V1Pod:
    return client.V1Pod(
        metadata=client.V1ObjectMeta(name=name),
        spec=client.V1PodSpec(restart_policy="Never", priority_class_name=priority_class,
                              node_selector={"kubernetes.io/hostname": node},
                              tolerations=[GPU_TOLERATION], termination_grace_period_seconds=5,
                              containers=[_container(gpus)]),
    )


def test_scheduler_preempts_lower_priority_pod(k8s_client: client.ApiClient, k8s_namespace: str) -> None:
    core, sched = client.CoreV1Api(k8s_client), client.SchedulingV1Api(k8s_client)
    node = core.list_node(label_selector=f"{LABEL_POOL}=l4").items[0]
    gpus = _node_gpus(node)
    suffix = uuid.uuid4().hex[:6]
    low, high = f"cd-test-low-{suffix}", f"cd-test-high-{suffix}"
    _priority_class(sched, low, 1_000)
    _priority_class(sched, high, 100_000)
    try:
        core.create_namespaced_pod(k8s_namespace, _pinned_pod("victim", node.metadata.name, gpus, low))
        wait_for("victim Running", lambda: core.read_namespaced_pod(
            "victim", k8s_namespace).status.phase == "Running")

        core.create_namespaced_pod(k8s_namespace, _pinned_pod("urgent", node.metadata.name, gpus, high))
        urgent = core.read_namespaced_pod("urgent", k8s_namespace)
        assert urgent.spec.priority == 100_000  # resolved by the Priority admission plugin

        def victim_gone() -> bool:
            try:
                core.read_namespaced_pod("victim", k8s_namespace)
            except ApiException as err:
                return err.status == 404
            return False

        wait_for("victim preempted and deleted", victim_gone)
        urgent = wait_for("urgent Running", lambda: (p := core.read_namespaced_pod(
            "urgent", k8s_namespace)).status.phase == "Running" and p)
        assert urgent.spec.node_name == node.metadata.name
        events = wait_for("Preempted event", lambda: [
            e for e in core.list_namespaced_event(k8s_namespace).items
            if e.involved_object.name == "victim" and e.reason == "Preempted"])
        assert "urgent" in events[0].message or urgent.metadata.uid in events[0].message
    finally:
        for name in (low, high):
            sched.delete_priority_class(name)


def test_up_is_idempotent_and_down_stops_every_process(k8s_binaries: Path, tmp_path: Path) -> None:
    """A second plane in its own state directory: up twice, then down."""
    state = tmp_path / "plane"
    pools = (k8s.NodePool("gpu", 1, cpu="8", memory="64Gi", gpus=2, gpu_product="NVIDIA-L4"),)
    try:
        kubeconfig = k8s.up(state, pools=pools)
        first = k8s.status(state)
        assert first.running
        assert first.addons["karpenter"]["alive"]  # beside the plane, recorded apart
        assert kubeconfig == k8s.kubeconfig_path(state) and kubeconfig.is_file()

        assert k8s.up(state, pools=pools) == kubeconfig  # the same processes: nothing started again
        assert {n: p["pid"] for n, p in k8s.status(state).processes.items()} == \
            {n: p["pid"] for n, p in first.processes.items()}

        api = config.new_client_from_config(config_file=str(kubeconfig))
        try:
            nodes = client.CoreV1Api(api).list_node().items
        finally:
            api.close()
        assert [(n.metadata.name, _node_gpus(n)) for n in nodes] == [("gpu-0", 2)]

        # Fault injection: the API server goes away and comes back on the same etcd data.
        away = k8s.restart_component("kube-apiserver", state, pause=0.5)
        assert away >= 0.5
        again = k8s.status(state)
        assert again.running
        assert again.processes["kube-apiserver"]["pid"] != first.processes["kube-apiserver"]["pid"]
        api = config.new_client_from_config(config_file=str(kubeconfig))
        try:
            assert [n.metadata.name for n in client.CoreV1Api(api).list_node().items] == ["gpu-0"]
        finally:
            api.close()
        first = again
    finally:
        k8s.down(state)
    after = k8s.status(state)
    assert not after.running and not after.processes and not after.addons
    for info in [*first.processes.values(), *first.addons.values()]:
        assert not Path(f"/proc/{info['pid']}").exists() or \
            Path(f"/proc/{info['pid']}/stat").read_text().split(") ")[1][0] == "Z"
    k8s.down(state)  # idempotent


def test_component_that_cannot_start_fails_up_and_leaves_nothing_running(
        k8s_binaries: Path, tmp_path: Path) -> None:
    state = tmp_path / "broken"
    with pytest.raises(k8s.ControlPlaneError, match="kube-apiserver exited during start-up") as err:
        k8s.up(state, extra_args={"kube-apiserver": ["--no-such-flag"]}, timeout=60)
    assert "unknown flag: --no-such-flag" in str(err.value)  # the component's own log tail
    after = k8s.status(state)
    assert not after.running and after.processes == {}
    etcd_log = state / "log" / "etcd.log"
    assert etcd_log.is_file()  # etcd had started and was stopped again
    assert not [p for p in Path("/proc").iterdir() if p.name.isdigit() and _cwd_is(p, state)]


def _cwd_is(proc: Path, state: Path) -> bool:
    try:
        return Path(os.readlink(proc / "cwd")) == state
    except OSError:
        return False


def test_down_finds_components_whose_state_record_was_lost(k8s_binaries: Path, tmp_path: Path) -> None:
    state = tmp_path / "lost"
    k8s.up(state, pools=(k8s.NodePool("cpu", 1, cpu="4", memory="8Gi"),))
    pids = [p["pid"] for p in k8s.status(state).processes.values()]
    assert len(pids) == 5
    (state / "state.json").unlink()
    assert k8s.status(state).processes == {}
    k8s.down(state)
    assert not [p for p in Path("/proc").iterdir() if p.name.isdigit() and _cwd_is(p, state)]
