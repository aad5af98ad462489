"""crossdock's descheduler against the upstream descheduler, from the same fragmented GPU pool on the
live plane: GPU allocation reached, pending jobs started, evictions used.

    python bench/bench_descheduler.py [--nodes 8] [--used 6,7,7,7,7,7,7,7] [--pinned] [--passes 3]
                                      [--settle 60] [--side both|crossdock|upstream]
                                      [--upstream-scheduler most-allocated|default] [--json]

Against the local control plane (``crossdock.dev.k8s``, started if needed) or ``KUBECONFIG``. Each side
gets its own pool of ``--nodes`` 8-GPU kwok nodes and its own namespace, fragmented the same way
(``crossdock.dev.k8s.fragmented``: node ``i`` holds ``used[i]`` one-GPU low-priority jobs), then one
8-GPU high-priority job that may not preempt (``preemptionPolicy: Never``) waits: it can only start
once a descheduler empties a node. ``--pinned``: one of node 0's GPUs is held by an inference job
(a pod above every eviction threshold) instead of a fill job, so the least-used node cannot be
emptied and a 7/8 node must be.

- ``upstream``: the pinned ``sigs.k8s.io/descheduler`` release run once per pass
  (``--descheduling-interval=0``) with HighNodeUtilization on ``nvidia.com/gpu`` (nodes under 80 %
  are emptied: the 6/8 node), DefaultEvictor ``nodeFit`` and ``priorityThreshold`` = the blocked
  job's priority; the fill is a Deployment, so evicted pods come back through its ReplicaSet. Its
  pods use a second kube-scheduler scoring ``MostAllocated`` (HighNodeUtilization's documented
  requirement; ``--upstream-scheduler default`` uses the plane's LeastAllocated one instead). Up to
  ``--passes`` passes, each followed by up to ``--settle`` seconds for the pods to land.
- ``crossdock``: crossdock itself (scheduler loop with its descheduler step, a Celery worker, the
  Kubernetes backend) with defragmentation on; the fill is crossdock jobs, the blocked job too.

Evictions are counted the same way on both sides: pods of the side's namespace that carried the
``DisruptionTarget`` condition with reason ``EvictionByEvictionAPI`` (both evict through the Eviction
API). Allocation: GPUs requested by live pods on the pool's nodes over the pool's GPUs.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from kubernetes import client, config, watch  # noqa: E402

from crossdock.dev import k8s  # noqa: E402
from crossdock.dev.k8s import descheduler as upstream  # noqa: E402
from crossdock.dev.k8s import fragmented as frag  # noqa: E402


class EvictionWatch:
    """Pods of ``namespace`` seen with DisruptionTarget/EvictionByEvictionAPI (their uids)."""

    def __init__(self, api: client.ApiClient, namespace: str) -> None:
        self.core, self.namespace = client.CoreV1Api(api), namespace
        self.evicted: dict[str, str] = {}
        """uid → the node the pod was evicted from."""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            w = watch.Watch()
            try:
                for ev in w.stream(self.core.list_namespaced_pod, self.namespace, timeout_seconds=5):
                    pod = ev["object"]
                    for c in pod.status.conditions or []:
                        if c.type == "DisruptionTarget" and c.status == "True" and c.reason == "EvictionByEvictionAPI":
                            self.evicted[pod.metadata.uid] = pod.spec.node_name or ""
                    if self._stop.is_set():
                        break
            except Exception:  # noqa: BLE001 - a dropped watch is started again
                time.sleep(0.2)
            finally:
                w.stop()

    def __enter__(self) -> "EvictionWatch":
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join(10)


def namespace(api: client.ApiClient, name: str) -> str:
    core = client.CoreV1Api(api)
    core.create_namespace({"metadata": {"name": name}})
    frag.wait_until(f"service account {name}/default", lambda: core.list_namespaced_service_account(name).items)
    return name


def drop_namespace(api: client.ApiClient, name: str) -> None:
    core = client.CoreV1Api(api)
    for call in (client.AppsV1Api(api).delete_collection_namespaced_deployment,
                 client.BatchV1Api(api).delete_collection_namespaced_job, core.delete_collection_namespaced_pod):
        try:
            call(name, grace_period_seconds=0, propagation_policy="Background")
        except client.ApiException:
            pass
    core.delete_namespace(name)


def fill_of(args: argparse.Namespace) -> list[int]:
    """GPUs of fill jobs per node (with ``--pinned`` node 0's inference job holds one of ``used[0]``)."""
    return [u - (1 if args.pinned and i == 0 else 0) for i, u in enumerate(args.used)]


def allocation(api: client.ApiClient, nodes: list[str], gpus: int) -> float:
    return sum(frag.gpu_use(api, nodes).values()) / (gpus * len(nodes))


def run_upstream(api: client.ApiClient, kubeconfig: str, args: argparse.Namespace) -> dict[str, Any]:
    tag = f"bdu{secrets.token_hex(3)}"
    pool = frag.gpu_pool(tag, args.nodes)
    ns = namespace(api, tag)
    pcs = frag.priority_classes(api, tag)
    core, apps = client.CoreV1Api(api), client.AppsV1Api(api)
    try:
        with frag.own_nodes(api, pool) as nodes, _scheduler(kubeconfig, args.upstream_scheduler) as scheduler:
            frag.fragment_upstream(api, ns, pool.name, nodes, fill_of(args), pcs["low"], scheduler)
            if args.pinned:
                frag.pin_inference(api, ns, pool.name, nodes[0], pcs["inference"], scheduler)
            before = allocation(api, nodes, 8)
            labels = {"app": "big"}
            apps.create_namespaced_deployment(ns, {
                "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "big"},
                "spec": {"replicas": 1, "selector": {"matchLabels": labels},
                         "template": {"metadata": {"labels": labels},
                                      "spec": frag.gpu_pod_spec(pool.name, 8, pcs["high"], scheduler)}}})

            def big_pod(phase: str) -> Any:
                pods = core.list_namespaced_pod(ns, label_selector="app=big").items
                return next((p for p in pods if p.status.phase == phase and p.metadata.deletion_timestamp is None), None)

            frag.wait_until("the big pod pending", lambda: big_pod("Pending"))
            policy = upstream.high_node_utilization({upstream.GPU: 80}, pod_labels={"app": "fill"},
                                                    node_selector=f"crossdock.io/pool={pool.name}",
                                                    priority_threshold=frag.HIGH)
            passes, evicted_logged, bound_after = 0, 0, None
            with EvictionWatch(api, ns) as evictions:
                start = time.monotonic()
                for passes in range(1, args.passes + 1):
                    run = upstream.run_once(policy, kubeconfig)
                    evicted_logged += len(run.evicted)
                    try:
                        frag.wait_until("the big pod running", lambda: big_pod("Running"), args.settle)
                        bound_after = time.monotonic() - start
                        break
                    except TimeoutError:
                        continue
                frag.wait_until("the fill back", lambda: sum(1 for p in core.list_namespaced_pod(
                    ns, label_selector="app=fill").items if p.status.phase == "Running") == sum(fill_of(args)),
                    args.settle)
                after = allocation(api, nodes, 8)
                counted = len(evictions.evicted)
            return {"side": f"upstream {os.environ.get('DESCHEDULER_VERSION', '')}".strip(),
                    "scheduler": scheduler or "default", "passes": passes, "allocation_before": before,
                    "allocation_after": after, "pending_started": int(bound_after is not None),
                    "bound_after_s": bound_after, "evictions": counted, "evictions_logged": evicted_logged}
    finally:
        drop_namespace(api, ns)
        frag.delete_priority_classes(api, pcs)


class _NoScheduler:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: Any) -> None:
        return None


def _scheduler(kubeconfig: str, which: str) -> Any:
    return upstream.most_allocated_scheduler(kubeconfig) if which == "most-allocated" else _NoScheduler()


def run_crossdock(api: client.ApiClient, kubeconfig: str, args: argparse.Namespace) -> dict[str, Any]:
    from crossdock_service import CrossdockService

    from crossdock import service
    from crossdock.client import Client
    from crossdock.queue.models import GpuRequest, JobSpec
    from crossdock.queue.states import JobState

    tag = f"bdc{secrets.token_hex(3)}"
    pool = frag.gpu_pool(tag, args.nodes)
    ns = namespace(api, tag)
    try:
        with frag.own_nodes(api, pool) as nodes:
            svc = CrossdockService(frag.crossdock_config(pool.name), {"CROSSDOCK_KUBECONFIG": kubeconfig,
                                                                      "CROSSDOCK_K8S_NAMESPACE": ns}, reconcile=0.5)
            try:
                rt = svc.rt
                gateway = Client(rt).gateway
                kept = frag.fragment_crossdock(rt, lambda ids: gateway.cancel([str(i) for i in ids]), nodes,
                                               fill_of(args))
                if args.pinned:
                    (inf,) = service.submit(rt, [JobSpec(command=["serve"], queue="inference", nodelist=[nodes[0]],
                                                         gpus=GpuRequest(count=1))])
                    frag.wait_until("the inference job running",
                                    lambda: rt.store.get(inf.id).state is JobState.RUNNING)
                before = allocation(api, nodes, 8)
                with EvictionWatch(api, ns) as evictions:
                    start = time.monotonic()
                    (big,) = service.submit(rt, [JobSpec(command=["train"], queue="urgent", gpus=GpuRequest(count=8))])
                    bound_after = None
                    try:
                        frag.wait_until("the big job running", lambda: rt.store.get(big.id).state is JobState.RUNNING,
                                        args.settle * args.passes)
                        bound_after = time.monotonic() - start
                    except TimeoutError:
                        pass
                    moved = [i for ids in kept.values() for i in ids]
                    frag.wait_until("the moved jobs running again", lambda: all(
                        j.state is JobState.RUNNING for j in rt.store.get_many(moved)), args.settle)
                    after = allocation(api, nodes, 8)
                    counted = len(evictions.evicted)
                jobs = {j.id: j for j in rt.store.get_many(moved)}
                back = sum(1 for node, ids in kept.items() for i in ids if jobs[i].attempts > 1 and node in jobs[i].nodes)
            finally:
                svc.close()
            return {"side": "crossdock", "scheduler": "crossdock (binpack)", "passes": None,
                    "allocation_before": before, "allocation_after": after,
                    "pending_started": int(bound_after is not None), "bound_after_s": bound_after,
                    "evictions": counted, "returned_to_source": back}
    finally:
        drop_namespace(api, ns)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=8)
    ap.add_argument("--used", default="6,7,7,7,7,7,7,7", help="GPUs held on each node (comma-separated)")
    ap.add_argument("--pinned", action="store_true", help="node 0 holds an inference job among its used GPUs")
    ap.add_argument("--passes", type=int, default=3, help="upstream descheduler passes at most")
    ap.add_argument("--settle", type=float, default=60.0, help="seconds to wait after each pass")
    ap.add_argument("--side", choices=("both", "crossdock", "upstream"), default="both")
    ap.add_argument("--upstream-scheduler", choices=("most-allocated", "default"), default="most-allocated")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    args.used = [int(x) for x in args.used.split(",")]
    if len(args.used) != args.nodes or not all(0 <= u <= 8 for u in args.used) or (args.pinned and not args.used[0]):
        ap.error(f"--used: {args.used} must give {args.nodes} counts of 0–8 (with --pinned, node 0's at least 1)")
    kubeconfig = os.environ.get("KUBECONFIG") or str(k8s.up())
    api = config.new_client_from_config(config_file=kubeconfig)
    os.environ.setdefault("DESCHEDULER_VERSION", k8s.versions()["DESCHEDULER_VERSION"])
    results = []
    if args.side in ("both", "crossdock"):
        results.append(run_crossdock(api, kubeconfig, args))
    if args.side in ("both", "upstream"):
        results.append(run_upstream(api, kubeconfig, args))
    if args.json:
        print(json.dumps({"used": args.used, "pinned": args.pinned, "results": results}, indent=1))
    else:
        pinned = ", one an inference job on node 0" if args.pinned else ""
        print(f"fragmented pool: {args.nodes} x 8 GPUs, used {args.used}{pinned}; one 8-GPU job waiting")
        print(f"{'side':<22} {'alloc before':>12} {'alloc after':>11} {'started':>7} {'bound after':>11} "
              f"{'evictions':>9}")
        for r in results:
            bound = f"{r['bound_after_s']:.1f}s" if r["bound_after_s"] is not None else "-"
            print(f"{r['side']:<22} {r['allocation_before']:>12.1%} {r['allocation_after']:>11.1%} "
                  f"{r['pending_started']:>7} {bound:>11} {r['evictions']:>9}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
