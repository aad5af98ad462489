"""Kubernetes node pools that grow and shrink (``ProvisionsNodes``) on a real control plane: the
kwok provider (Node objects crossdock creates) and Karpenter (NodeClaims Karpenter launches
through its kwok cloud provider, v1.14.1 as built by ``crossdock.dev.k8s build``).

One test body runs for both provisioners: a pool starts at ``min_nodes``, grows to what a backlog
needs (the fewest template nodes on which crossdock's own cycle places every pending job, as
cluster-autoscaler's estimator asks), the jobs run there through kube-scheduler, a node running a
non-preemptible job and a node crossdock did not make are refused on removal, and the pool
shrinks back to ``min_nodes`` once the work is done.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Iterator
from datetime import datetime, timezone
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from crossdock.backends.kubernetes import KubernetesBackend
from crossdock.backends.kubernetes import karpenter as kp
from crossdock.backends.kubernetes import provisioning as pv
from crossdock.backends.kubernetes.nodes import node_of
from crossdock.queue.config import ClusterConfig, parse_config
from crossdock.queue.cycle import run_cycle
from crossdock.queue.models import Job, JobSpec
from crossdock.queue.ports import NodeGroup, ProvisionsNodes
from crossdock.queue.snapshot import Snapshot
from crossdock.queue.states import JobState
from tests.conftest import k8s_unavailable
import k8s_helpers

pytestmark = [pytest.mark.kubernetes, pytest.mark.autoscale]

JOBS, CPUS_PER_JOB = 6, 4
TEMPLATE = {"cpus": 8, "memory_mib": 32768}  # one of crossdock.dev.k8s.karpenter.INSTANCE_TEMPLATES


def wait_for(what: str, fn: Callable[[], Any], timeout: float = 90.0, interval: float = 0.5) -> Any:
    return k8s_helpers.wait_for(what, fn, timeout, interval)


def config(pool: str, provisioner: str) -> ClusterConfig:
    return parse_config({
        "priority_classes": {"batch": {"value": 500, "preemptible": False, "grace_seconds": 1}},
        "pools": {pool: {"backend": "k8s", "selector": {"crossdock.io/pool": pool}, "provisioner": provisioner,
                         "min_nodes": 1, "max_nodes": 4, "node_template": TEMPLATE}},
        "queues": {"batch": {"priority_class": "batch", "pools": [pool], "placement": "binpack"}},
    })


@pytest.fixture(params=["kwok", "karpenter"])
def pool_backend(request, k8s_client: client.ApiClient, k8s_namespace: str) -> Iterator[KubernetesBackend]:
    provisioner = request.param
    custom = client.CustomObjectsApi(k8s_client)
    if provisioner == "karpenter":
        try:
            custom.list_cluster_custom_object(kp.GROUP, kp.VERSION, "nodepools", limit=1)
        except ApiException as err:
            k8s_unavailable(f"Karpenter's CRDs are not installed ({err.status}); python -m crossdock.dev.k8s up")
    pool = f"np{secrets.token_hex(3)}"
    backend = KubernetesBackend(config(pool, provisioner), k8s_client, namespace=k8s_namespace,
                                ttl_seconds_after_finished=None, watch=False)
    backend.sync_priority_classes()
    yield backend
    group = backend.node_group(pool)
    backend.remove_nodes(pool, [*group.ready, *group.starting])
    wait_for("the pool's nodes gone", lambda: backend.node_group(pool) == NodeGroup(pool) and not client.CoreV1Api(
        k8s_client).list_node(label_selector=pv.selector(pool, provisioner)).items)
    if provisioner == "karpenter":
        wait_for("the pool's NodeClaims gone", lambda: not custom.list_cluster_custom_object(
            kp.GROUP, kp.VERSION, "nodeclaims", label_selector=pv.selector(pool, provisioner))["items"])
        custom.delete_cluster_custom_object(kp.GROUP, kp.VERSION, "nodepools", kp.nodepool_name(pool))
        custom.delete_cluster_custom_object(kp.KWOK_GROUP, kp.KWOK_VERSION, kp.KWOK_CLASSES, kp.nodepool_name(pool))


def only_pool(backend: KubernetesBackend) -> str:
    (pool,) = backend.config.pools
    return pool


def job(cfg: ClusterConfig, pool: str, run_seconds: float | None = None) -> Job:
    env = {} if run_seconds is None else {"CROSSDOCK_SIMULATE_RUN_SECONDS": str(run_seconds)}
    spec = JobSpec(command=["python", "work.py"], cpus_per_task=CPUS_PER_JOB, env=env)
    return Job(id=secrets.randbelow(10**9) + 10**9, spec=spec,
               queue="batch", priority_class="batch", priority=500, preemptible=False, pools=[pool], pool=pool,
               backend="k8s")


def nodes_needed(cfg: ClusterConfig, pool: str, backlog: list[Job]) -> int:
    """The fewest template nodes on which crossdock's cycle places the whole backlog."""
    spec = cfg.pools[pool]

    def template_node(i: int) -> Any:
        raw = pv.kwok_node(pool, spec, spec.node_template, f"h-{i}")
        raw["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
        return node_of(raw, pool, cfg)

    for n in range(1, (spec.max_nodes or 0) + 1):
        snapshot = Snapshot(nodes=tuple(template_node(i) for i in range(n)))
        if len(run_cycle(snapshot, backlog, cfg, datetime.now(timezone.utc)).admitted) == len(backlog):
            return n
    pytest.fail(f"the backlog does not fit {spec.max_nodes} nodes")


def members(group: NodeGroup) -> set[str]:
    return {*group.ready, *group.starting}


def listed(names: list[str], group: NodeGroup) -> bool:
    """Every name asked for is in the group, ready or starting: a Karpenter node goes by its
    NodeClaim's name until its Node registers, then by the Node's (``kwok-<claim>-…``)."""
    return all(any(m == n or m.startswith(f"kwok-{n}-") for m in members(group)) for n in names)


def grown(backend: KubernetesBackend, pool: str, ready: int) -> Callable[[], NodeGroup | None]:
    def check() -> NodeGroup | None:
        group = backend.node_group(pool)
        return group if len(group.ready) == ready and not group.starting and not group.stopping else None
    return check


def test_a_pool_grows_to_its_backlog_and_shrinks_back(pool_backend: KubernetesBackend,
                                                      k8s_client: client.ApiClient) -> None:
    backend, cfg = pool_backend, pool_backend.config
    pool = only_pool(backend)
    spec = cfg.pools[pool]
    core = client.CoreV1Api(k8s_client)
    assert isinstance(backend, ProvisionsNodes)

    # min_nodes first.
    assert backend.node_group(pool) == NodeGroup(pool)
    first = backend.add_nodes(pool, spec.min_nodes)
    assert len(first) == 1 and listed(first, backend.node_group(pool))
    group = wait_for("min_nodes ready", grown(backend, pool, spec.min_nodes))
    (node,) = [n for n in backend.inventory().nodes if n.pool == pool]
    assert (node.cpu_milli, node.memory_mib, node.schedulable) == (8000, 32768, True)

    # A backlog that one node cannot hold: grow to what it needs, never past max_nodes.
    backlog = [job(cfg, pool, run_seconds=2) for _ in range(JOBS - 1)] + [job(cfg, pool)]  # the last runs on
    need = nodes_needed(cfg, pool, backlog)
    assert need == 3
    added = backend.add_nodes(pool, need - len(group.ready) - len(group.starting))
    assert len(added) == 2 and len(set(added) | set(first)) == 3
    assert len(backend.add_nodes(pool, 10)) == 1  # max_nodes: ready and starting nodes count
    assert len(members(backend.node_group(pool))) == spec.max_nodes
    assert backend.add_nodes(pool, 1) == []
    group = wait_for(f"{spec.max_nodes} nodes ready", grown(backend, pool, spec.max_nodes))

    # The jobs run on the new nodes, placed by crossdock and bound by kube-scheduler.
    inv = backend.inventory()
    result = run_cycle(Snapshot(nodes=inv.nodes, allocations=inv.foreign), backlog, cfg, datetime.now(timezone.utc))
    assert len(result.admitted) == JOBS, ([n for n in inv.nodes if n.pool == pool], inv.foreign, result.reasons)
    placed = {p.job_id: p for p in result.admitted}
    jobs = [j.model_copy(update={"nodes": list(placed[j.id].nodes), "pool": pool}) for j in backlog]
    for j in jobs:
        backend.submit(j)
    long = jobs[-1]

    def state(j: Job) -> JobState | None:
        st = backend.status([j]).get(j.id)
        return st.state if st else None

    wait_for("every job started", lambda: state(long) == JobState.RUNNING and all(
        state(j) in (JobState.RUNNING, JobState.COMPLETED) for j in jobs))
    assert {n for j in jobs for n in j.nodes} <= set(group.ready)

    # Never removed: a node running a non-preemptible crossdock job, a node crossdock did not make.
    busy = long.nodes[0]
    assert backend.remove_nodes(pool, [busy]) == []
    foreign = next(n.metadata.name for n in core.list_node().items
                   if pv.LABEL_PROVISIONER not in (n.metadata.labels or {}))
    assert backend.remove_nodes(pool, [foreign]) == []
    core.read_node(foreign)  # still there
    assert busy in backend.node_group(pool).ready and core.read_node(busy).spec.unschedulable is None

    # The work ends; the pool shrinks back to min_nodes, keeping one node.
    backend.cancel(long)
    wait_for("the short jobs completed", lambda: all(state(j) == JobState.COMPLETED for j in jobs[:-1]))
    wait_for("the cancelled job's pod gone", lambda: not core.list_pod_for_all_namespaces(
        label_selector=f"crossdock.io/job-id={long.id}").items)
    keep, *extra = group.ready
    assert sorted(backend.remove_nodes(pool, extra)) == sorted(extra)
    assert not set(extra) & set(backend.node_group(pool).ready)  # stopping (or gone) at once
    wait_for("back to min_nodes", grown(backend, pool, spec.min_nodes))
    assert backend.node_group(pool).ready == (keep,)
    remaining = {n.metadata.name for n in core.list_node(label_selector=pv.selector(pool, spec.provisioner)).items}
    assert remaining == {keep}
    assert backend.remove_nodes(pool, extra) == extra  # already gone: idempotent



def test_karpenter_leaves_pending_pods_to_crossdock(k8s_client: client.ApiClient, k8s_namespace: str) -> None:
    """Karpenter's own provisioning for pending pods is off on crossdock's NodePools: a pod that only
    the pool's nodes could hold makes Karpenter report it cannot schedule it, and no NodeClaim."""
    core, custom = client.CoreV1Api(k8s_client), client.CustomObjectsApi(k8s_client)
    try:
        custom.list_cluster_custom_object(kp.GROUP, kp.VERSION, "nodepools", limit=1)
    except ApiException as err:
        k8s_unavailable(f"Karpenter's CRDs are not installed ({err.status}); python -m crossdock.dev.k8s up")
    pool = f"np{secrets.token_hex(3)}"
    backend = KubernetesBackend(config(pool, "karpenter"), k8s_client, namespace=k8s_namespace, watch=False)
    backend.provisioners.of(pool).ensure(pool)  # what add_nodes does first
    name = kp.nodepool_name(pool)
    try:
        wait_for("the NodePool Ready", lambda: any(
            c["type"] == "Ready" and c["status"] == "True" for c in (custom.get_cluster_custom_object(
                kp.GROUP, kp.VERSION, "nodepools", name).get("status") or {}).get("conditions") or []))
        core.create_namespaced_pod(k8s_namespace, {
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "wants-the-pool"},
            "spec": {"nodeSelector": {"crossdock.io/pool": pool}, "restartPolicy": "Never",
                     "containers": [{"name": "main", "image": "busybox",
                                     "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}]}})
        event = wait_for("Karpenter's verdict on the pod", lambda: next(
            (e for e in core.list_namespaced_event(k8s_namespace, field_selector="involvedObject.name=wants-the-pool")
             .items if e.reason == "FailedScheduling" and (e.message or "").startswith("Failed to schedule pod")),
            None))
        assert "limit" in event.message, event.message
        assert custom.list_cluster_custom_object(kp.GROUP, kp.VERSION, "nodeclaims",
                                                 label_selector=f"{kp.LABEL_NODEPOOL}={name}")["items"] == []
    finally:
        custom.delete_cluster_custom_object(kp.GROUP, kp.VERSION, "nodepools", name)
        custom.delete_cluster_custom_object(kp.KWOK_GROUP, kp.KWOK_VERSION, kp.KWOK_CLASSES, name)
