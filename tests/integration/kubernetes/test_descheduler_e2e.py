"""The descheduler end to end on the live plane: crossdock (scheduler leader with its descheduler step, a
Celery worker, the Kubernetes backend) over kwok GPU nodes of the test's own (unique names, deleted
after), fragmented as ``crossdock.dev.k8s.fragmented`` builds it.

- Eight 8-GPU nodes left 6/7/7/7/7/7/7/7 used by one-GPU training jobs, one of node 0's six an
  inference job (never moved), a PodDisruptionBudget of 1 (minAvailable 1 of 2) over two training
  jobs of node 1, and an 8-GPU job of a higher class that may not preempt: it binds after the
  fewest migrations (nodes 0 and 1 cannot be emptied, so another 7/8 node: 7 moves), no migrated
  job goes back to its node, the inference job is untouched and the budget never broken.
- HighNodeUtilization empties the nodes under its threshold (their jobs pack onto the others), so an
  autoscaler could retire them.
"""

from __future__ import annotations

import secrets
import threading
import time
import uuid
from pathlib import Path
from typing import Any, Callable

import pytest
import yaml
from kubernetes import client

from crossdock import service
from crossdock.backends.kubernetes import manifests as m
from crossdock.dev.k8s import fragmented as frag
from crossdock.queue.models import GpuRequest, JobSpec
from crossdock.queue.states import JobState
import k8s_helpers

pytestmark = [pytest.mark.kubernetes, pytest.mark.descheduler, pytest.mark.redis, pytest.mark.celery]


def wait_for(what: str, fn: Callable[[], Any], timeout: float = 180.0) -> Any:
    return k8s_helpers.wait_for(what, fn, timeout)


def explained(rt: Any, what: str, fn: Callable[[], Any], timeout: float = 180.0) -> Any:
    """``wait_for``, failing with the descheduler's last plan and the latest events."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if last := fn():
            return last
        time.sleep(0.25)
    events = [{k: e.get(k) for k in ("job", "event", "to", "reason", "from", "why") if e.get(k)}
              for e in rt.store.events(count=100_000)][-30:]
    pytest.fail(f"timed out after {timeout:.0f}s waiting for {what}\nplan: {rt.store.deschedule.last_plan()}\n"
                f"events: {events}")


def crossdock_on(tmp_path: Path, redis_url: str, monkeypatch, kubeconfig: Path, namespace: str, pool: str,
                 descheduler: dict[str, Any] | None = None):
    from crossdock.runtime import Runtime
    from tests.conftest import Cluster

    path = tmp_path / "crossdock.yaml"
    path.write_text(yaml.safe_dump(frag.crossdock_config(pool, descheduler)))
    env = {"CROSSDOCK_REDIS_URL": redis_url, "CROSSDOCK_STATE_DIR": str(tmp_path / "state"),
           "CROSSDOCK_CONFIG": str(path), "CROSSDOCK_PREFIX": f"d{uuid.uuid4().hex[:10]}",
           "CROSSDOCK_KUBECONFIG": str(kubeconfig), "CROSSDOCK_K8S_NAMESPACE": namespace,
           "CROSSDOCK_K8S_TTL_SECONDS": "600"}
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    return Cluster(Runtime.from_env(), tmp_path)


class BudgetWatch:
    """Samples the pods a PDB covers; ``worst`` is the most of them ever down at once."""

    def __init__(self, api: client.ApiClient, namespace: str, selector: str, expected: int) -> None:
        self.core, self.ns, self.selector, self.expected = client.CoreV1Api(api), namespace, selector, expected
        self.worst = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            pods = self.core.list_namespaced_pod(self.ns, label_selector=self.selector).items
            up = sum(1 for p in pods if p.status.phase == "Running" and p.metadata.deletion_timestamp is None)
            self.worst = max(self.worst, self.expected - up)
            time.sleep(0.1)

    def __enter__(self) -> "BudgetWatch":
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join(10)


def test_blocked_8_gpu_job_binds_after_the_fewest_migrations(tmp_path, redis_url, monkeypatch, k8s_kubeconfig,
                                                             k8s_namespace, k8s_client):
    pool = frag.gpu_pool(f"dsk{secrets.token_hex(3)}")
    with frag.own_nodes(k8s_client, pool) as nodes:
        cluster = crossdock_on(tmp_path, redis_url, monkeypatch, k8s_kubeconfig, k8s_namespace, pool.name)
        try:
            rt = cluster.rt
            cancel = lambda ids: service.cancel(rt, [str(i) for i in ids], cluster.send)  # noqa: E731
            # node 0: 5 training jobs (+ the inference job below), the others 7
            kept = frag.fragment_crossdock(rt, cancel, nodes, [5, 7, 7, 7, 7, 7, 7, 7])
            (inference,) = service.submit(rt, [JobSpec(command=["serve"], queue="inference", nodelist=[nodes[0]],
                                                       gpus=GpuRequest(count=1))])
            wait_for("the inference job running", lambda: rt.store.get(inference.id).state is JobState.RUNNING)
            training = sorted(i for ids in kept.values() for i in ids)
            # A PDB of 1 over two training jobs of node 1: emptying node 1 would take both down at once.
            pair = kept[nodes[1]][:2]
            policy = client.PolicyV1Api(k8s_client)
            selector = f"{m.LABEL_JOB_ID} in ({','.join(map(str, pair))})"
            policy.create_namespaced_pod_disruption_budget(k8s_namespace, {
                "apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "pair"},
                "spec": {"selector": {"matchExpressions": [
                    {"key": m.LABEL_JOB_ID, "operator": "In", "values": [str(i) for i in pair]}]}, "minAvailable": 1}})
            wait_for("the PDB counted", lambda: (s := policy.read_namespaced_pod_disruption_budget(
                "pair", k8s_namespace).status) is not None and s.expected_pods == 2 and s.disruptions_allowed == 1)
            source = {i: node for node, ids in kept.items() for i in ids}

            with BudgetWatch(k8s_client, k8s_namespace, selector, len(pair)) as budget:
                (big,) = service.submit(rt, [JobSpec(command=["train"], queue="urgent", gpus=GpuRequest(count=8))])
                done = explained(rt, "the 8-GPU job running", lambda: (j := rt.store.get(big.id)).state
                                 is JobState.RUNNING and j, 300)
                moved = [j for j in rt.store.get_many(training) if j.attempts > 1]
                wait_for("the moved jobs running again", lambda: all(
                    j.state is JobState.RUNNING for j in rt.store.get_many([j.id for j in moved])))
            moved = rt.store.get_many([j.id for j in moved])

            (target,) = done.nodes
            # node 0 holds the inference job and node 1 the PDB's pair: neither could be emptied
            assert target not in nodes[:2]
            assert {source[j.id] for j in moved} == {target}
            assert len(moved) == 7  # the fewest: every job of one 7/8 node, none more
            assert all(j.attempts == 2 for j in moved)
            assert not any(set(j.nodes) & {source[j.id]} for j in moved)  # none went back where it was
            assert budget.worst <= 1  # the PDB's one disruption, never more
            inf = rt.store.get(inference.id)
            assert (inf.state, inf.attempts, inf.nodes) == (JobState.RUNNING, 1, [nodes[0]])
            untouched = [j for j in rt.store.get_many(training) if source[j.id] != target]
            assert all(j.attempts == 1 and j.state is JobState.RUNNING for j in untouched)
            for j in moved:  # every move is an event saying from where, to where and why
                (ev,) = [e for e in rt.store.events(j.id) if e.get("event") == "migrated"]
                assert ev.get("reason") == "Migrated" and source[j.id] in str(ev.get("from")), ev
        finally:
            cluster.close()


def test_high_node_utilization_empties_the_least_used_nodes(tmp_path, redis_url, monkeypatch, k8s_kubeconfig,
                                                            k8s_namespace, k8s_client):
    pool = frag.gpu_pool(f"dsh{secrets.token_hex(3)}", count=4)
    descheduler = {"enabled": True, "interval_seconds": 0.5, "defrag": {"enabled": False},
                   "strategies": {"HighNodeUtilization": {"enabled": True, "thresholds": {"nvidia.com/gpu": 30}}}}
    with frag.own_nodes(k8s_client, pool) as nodes:
        cluster = crossdock_on(tmp_path, redis_url, monkeypatch, k8s_kubeconfig, k8s_namespace, pool.name,
                               descheduler)
        try:
            rt = cluster.rt
            cancel = lambda ids: service.cancel(rt, [str(i) for i in ids], cluster.send)  # noqa: E731
            # nothing under 30 % yet; then node 1 and node 0 fall under it one after the other, so
            # that each one's jobs have one place to go whatever order the cancelled pods end in (cut
            # together, node 0's job could land on a node 1 still on its way down, which then stays)
            kept = frag.fragment_crossdock(rt, cancel, nodes, [8, 8, 8, 5])
            for node, keep in ((nodes[1], 2), (nodes[0], 1)):
                drop, kept[node] = kept[node][keep:], kept[node][:keep]
                cancel(drop)
                wait_for(f"{node} under 30 %", lambda: all(j.state.terminal for j in rt.store.get_many(drop)))
            ids = [i for v in kept.values() for i in v]
            wait_for("nodes 0 and 1 emptied", lambda: frag.gpu_use(k8s_client, nodes) == {
                nodes[0]: 0, nodes[1]: 0, nodes[2]: 8, nodes[3]: 8} and all(
                    j.state is JobState.RUNNING for j in rt.store.get_many(ids)))
            moved = [j for j in rt.store.get_many(ids) if j.attempts > 1]
            assert sorted(i for n in nodes[:2] for i in kept[n]) == sorted(j.id for j in moved)
            assert all(j.nodes == [nodes[3]] for j in moved)
        finally:
            cluster.close()
