"""Node pools driven by crossdock end to end, kwok and Karpenter: the scheduler leader's autoscaler pass
(``crossdock/workers/autoscaler.py``) raises the pool to ``min_nodes``, grows it for a backlog
submitted through crossdock, the jobs run there (Celery dispatch, kube-scheduler, kwok), and once
the backlog is gone the pool shrinks back after the (shortened) unneeded time, never removing
the node that still runs a non-preemptible job."""

from __future__ import annotations

import secrets
import uuid
from pathlib import Path
from typing import Any, Callable

import pytest
import yaml
from kubernetes import client
from kubernetes.client.rest import ApiException

from crossdock import service
from crossdock.backends.kubernetes import karpenter as kp
from crossdock.queue.models import JobSpec
from crossdock.queue.ports import NodeGroup
from crossdock.queue.states import JobState
from tests.conftest import k8s_unavailable
import k8s_helpers

pytestmark = [pytest.mark.kubernetes, pytest.mark.autoscale, pytest.mark.redis, pytest.mark.celery]

JOBS = 6  # of 4 CPUs, on 8-CPU nodes: 3 nodes


def wait_for(what: str, fn: Callable[[], Any], timeout: float = 120.0) -> Any:
    return k8s_helpers.wait_for(what, fn, timeout)


@pytest.fixture(params=["kwok", "karpenter"])
def crossdock_pool(request, tmp_path: Path, redis_url: str, monkeypatch, k8s_kubeconfig: Path, k8s_namespace: str,
                   k8s_client: client.ApiClient):
    from crossdock.runtime import Runtime
    from tests.conftest import Cluster

    provisioner = request.param
    if provisioner == "karpenter":
        try:
            client.CustomObjectsApi(k8s_client).list_cluster_custom_object(kp.GROUP, kp.VERSION, "nodepools", limit=1)
        except ApiException as err:
            k8s_unavailable(f"Karpenter's CRDs are not installed ({err.status}); python -m crossdock.dev.k8s up")
    pool = f"e2e{secrets.token_hex(3)}"
    cfg: dict[str, Any] = {
        "priority_classes": {"batch": {"value": 500, "preemptible": False, "grace_seconds": 1}},
        "pools": {pool: {"backend": "k8s", "selector": {"crossdock.io/pool": pool}, "provisioner": provisioner,
                         "min_nodes": 1, "max_nodes": 4, "node_template": {"cpus": 8, "memory_mib": 32768}}},
        "queues": {"batch": {"priority_class": "batch", "pools": [pool], "placement": "binpack"}},
        "default_queue": "batch",
        "scheduler": {"interval_seconds": 0.3, "lease_seconds": 2},
        "autoscaler": {"interval_seconds": 0.3, "scale_down_unneeded_seconds": 2,
                       "scale_down_delay_after_add_seconds": 0},
    }
    path = tmp_path / "crossdock.yaml"
    path.write_text(yaml.safe_dump(cfg))
    env = {"CROSSDOCK_REDIS_URL": redis_url, "CROSSDOCK_STATE_DIR": str(tmp_path / "state"),
           "CROSSDOCK_CONFIG": str(path), "CROSSDOCK_PREFIX": f"k{uuid.uuid4().hex[:10]}",
           "CROSSDOCK_KUBECONFIG": str(k8s_kubeconfig), "CROSSDOCK_K8S_NAMESPACE": k8s_namespace,
           "CROSSDOCK_K8S_TTL_SECONDS": "600"}
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    c = Cluster(Runtime.from_env(), tmp_path)
    try:
        yield c, pool
    finally:
        c.close()
        backend = c.rt.backends("k8s")
        group = backend.node_group(pool)
        backend.remove_nodes(pool, [*group.ready, *group.starting])
        wait_for("the pool's nodes gone", lambda: backend.node_group(pool) == NodeGroup(pool))
        if provisioner == "karpenter":
            custom = client.CustomObjectsApi(k8s_client)
            custom.delete_cluster_custom_object(kp.GROUP, kp.VERSION, "nodepools", kp.nodepool_name(pool))
            custom.delete_cluster_custom_object(kp.KWOK_GROUP, kp.KWOK_VERSION, kp.KWOK_CLASSES, kp.nodepool_name(pool))


def pool_events(rt, kind: str) -> list[dict]:
    return [e for e in rt.store.events(count=100_000) if e.get("event") == kind]


def test_crossdock_grows_a_kwok_pool_for_its_backlog_and_shrinks_it_back(crossdock_pool, k8s_client):
    cluster, pool = crossdock_pool
    rt = cluster.rt
    backend = rt.backends("k8s")
    seen: set[str] = set()

    def ready() -> tuple[str, ...]:
        group = backend.node_group(pool)
        seen.update(group.ready)
        return group.ready

    wait_for("min_nodes", lambda: len(ready()) == 1)
    env = {"CROSSDOCK_SIMULATE_RUN_SECONDS": "3"}
    short = service.submit(rt, [JobSpec(command=["work"], cpus_per_task=4, env=env) for _ in range(JOBS - 1)])
    (long,) = service.submit(rt, [JobSpec(command=["work"], cpus_per_task=4)])  # runs until cancelled
    wait_for("the backlog's nodes", lambda: len(ready()) >= 3)
    ids = [j.id for j in short]
    done = wait_for("the short jobs ended", lambda: ready() and all(
        j.state.terminal for j in rt.store.get_many(ids)) and rt.store.get_many(ids), 180)
    assert {j.state for j in done} == {JobState.COMPLETED}
    running = wait_for("the long job running", lambda: (j := rt.store.get(long.id)).state == JobState.RUNNING and j)
    (busy,) = running.nodes
    assert {n for j in [*done, running] for n in j.nodes} <= seen  # they ran on the pool's new nodes

    # The backlog is gone: back to min_nodes, the busy node kept.
    group = wait_for("back to min_nodes", lambda: (g := backend.node_group(pool)).ready == (busy,)
                     and not g.starting and not g.stopping and g)
    assert group.ready == (busy,)
    added = pool_events(rt, "nodes_added")
    removed = pool_events(rt, "nodes_removed")
    assert added and removed
    # at least what the backlog needs (JOBS * 4 CPUs on 8-CPU nodes), never past max_nodes
    assert JOBS * 4 // 8 <= max(int(e["to"]) for e in added) <= 4, added
    assert not any(busy in e["nodes"] for e in removed), removed
    assert rt.store.get(long.id).state == JobState.RUNNING
    service.cancel(rt, [str(long.id)], cluster.send)
    wait_for("the long job cancelled", lambda: rt.store.get(long.id).state == JobState.CANCELLED)
