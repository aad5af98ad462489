"""N jobs through crossdock's Kubernetes backend vs N direct client creates, same run.

    python bench/bench_kubernetes.py [--jobs 1000] [--rounds 1] [--threads 1] [--json]

Against the local control plane (``crossdock.dev.k8s``, started if needed) or ``KUBECONFIG``.
The bench adds its own kwok nodes (pool ``bench``, 110 pods each, enough for N pods at once)
and removes them at the end. Each round runs both paths, one after the other, each in a fresh
namespace once the previous path's pods are gone:

- ``direct``: ``BatchV1Api.create_namespaced_job`` with the very manifests the backend builds
  (built before the clock starts), as a user of the official client would call it;
- ``backend``: ``KubernetesBackend.submit(job)`` per job — manifest building, the GPU-product
  lookup, the idempotent create (409 → read) included.

``create_s`` is the wall time of the N create calls; ``running_s`` runs from the first create
until a watch on the namespace has seen all N pods Running (kube-controller-manager makes the
pods, kube-scheduler binds them, kwok runs them). ``ratio`` is backend / direct.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable

from kubernetes import client, config

from crossdock.backends.kubernetes import KubernetesBackend
from crossdock.backends.kubernetes import manifests as m
from crossdock.backends.kubernetes.informer import Informer
from crossdock.dev import k8s
from crossdock.queue.config import parse_config
from crossdock.queue.models import Job, JobSpec

POOL = "bench"
PODS_PER_NODE = 110
CONFIG = parse_config({
    "priority_classes": {"batch": {"value": 10}},
    "pools": {POOL: {"backend": "k8s", "selector": {"crossdock.io/pool": POOL}}},
    "queues": {"batch": {"priority_class": "batch", "pools": [POOL], "placement": "most-requested"}},
})


def bench_nodes(n_pods: int, tag: str) -> list[dict[str, Any]]:
    count = -(-n_pods // PODS_PER_NODE) + 1
    pool = k8s.NodePool(f"{POOL}-{tag}", count, cpu="1000", memory="4Ti", pods=str(PODS_PER_NODE))
    nodes = pool.nodes()
    for node in nodes:
        node["metadata"]["labels"]["crossdock.io/pool"] = POOL
    return nodes


def jobs(n: int) -> list[Job]:
    spec = JobSpec(command=["true"], cpus_per_task=1)
    return [Job(id=i, spec=spec, queue="batch", priority_class="batch", pools=[POOL], pool=POOL, attempts=1)
            for i in range(1, n + 1)]


class RunningWatch:
    """Counts the namespace's pods that reached Running, through a watch."""

    def __init__(self, core: client.CoreV1Api, namespace: str, n: int) -> None:
        self.n = n
        self.running: set[str] = set()
        self.done = threading.Event()
        self.at: float | None = None
        self.informer = Informer(lambda **kw: core.list_namespaced_pod(namespace, **kw), on_event=self._event,
                                 watch_timeout=300, name="bench-watch")

    def _event(self, kind: str, obj: dict[str, Any]) -> None:
        if kind != "DELETED" and (obj.get("status") or {}).get("phase") == "Running":
            self.running.add(obj["metadata"]["name"])
            if len(self.running) >= self.n and not self.done.is_set():
                self.at = time.perf_counter()
                self.done.set()

    def __enter__(self) -> "RunningWatch":
        self.informer.start()
        if not self.informer.wait_synced(30):
            raise RuntimeError("the pod watch did not start")
        return self

    def __exit__(self, *exc: Any) -> None:
        self.informer.stop()


def run_path(api: client.ApiClient, namespace: str, n: int, threads: int,
             create: Callable[[int], None], timeout: float) -> dict[str, float]:
    core = client.CoreV1Api(api)
    with RunningWatch(core, namespace, n) as watch:
        start = time.perf_counter()
        if threads > 1:
            with ThreadPoolExecutor(threads) as pool:
                list(pool.map(create, range(n)))
        else:
            for i in range(n):
                create(i)
        created = time.perf_counter()
        if not watch.done.wait(timeout):
            raise RuntimeError(f"{namespace}: only {len(watch.running)}/{n} pods Running after {timeout:.0f}s")
        assert watch.at is not None
    return {"create_s": created - start, "running_s": watch.at - start}


def drain(api: client.ApiClient, namespace: str, timeout: float = 600) -> None:
    core, batch = client.CoreV1Api(api), client.BatchV1Api(api)
    batch.delete_collection_namespaced_job(namespace, propagation_policy="Background")
    core.delete_collection_namespaced_pod(namespace, grace_period_seconds=0)
    deadline = time.monotonic() + timeout
    while core.list_namespaced_pod(namespace, limit=1).items or batch.list_namespaced_job(namespace, limit=1).items:
        if time.monotonic() > deadline:
            raise RuntimeError(f"{namespace} did not drain")
        time.sleep(1)
    core.delete_namespace(namespace)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--threads", type=int, default=1, help="concurrent create calls per path")
    ap.add_argument("--timeout", type=float, default=900, help="seconds to wait for all pods Running")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)

    kubeconfig = os.environ.get("KUBECONFIG") or str(k8s.up())
    api = config.new_client_from_config(config_file=kubeconfig)
    api.configuration.connection_pool_maxsize = max(4, args.threads)
    core = client.CoreV1Api(api)
    tag = uuid.uuid4().hex[:6]
    nodes = bench_nodes(args.jobs, tag)
    for node in nodes:
        core.create_node(node)
    results: dict[str, list[dict[str, float]]] = {"direct": [], "backend": []}
    try:
        ready = time.monotonic() + 120
        while sum(any(c.type == "Ready" and c.status == "True" for c in (n.status.conditions or []))
                  for n in core.list_node(label_selector=f"crossdock.io/pool={POOL}").items) < len(nodes):
            if time.monotonic() > ready:
                raise RuntimeError("bench nodes not Ready")
            time.sleep(0.5)
        work = jobs(args.jobs)
        for rnd in range(args.rounds):
            for path in ("direct", "backend") if rnd % 2 == 0 else ("backend", "direct"):
                ns = f"cd-bench-{path}-{tag}-{rnd}"
                core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=ns)))
                time.sleep(2)  # the namespace's default service account
                backend = KubernetesBackend(CONFIG, api, namespace=ns, watch=False, ttl_seconds_after_finished=None)
                backend.sync_priority_classes()
                if path == "direct":
                    batch = client.BatchV1Api(api)
                    bodies = [m.build(j, CONFIG, m.Options(namespace=ns, ttl_seconds_after_finished=None)) for j in work]

                    def create(i: int, batch: client.BatchV1Api = batch, ns: str = ns,
                               bodies: list[dict[str, Any]] = bodies) -> None:
                        batch.create_namespaced_job(ns, bodies[i])
                else:
                    def create(i: int, backend: KubernetesBackend = backend) -> None:
                        backend.submit(work[i])
                res = run_path(api, ns, args.jobs, args.threads, create, args.timeout)
                results[path].append(res)
                if not args.json:
                    print(f"round {rnd} {path:8} create {res['create_s']:7.2f}s  all Running {res['running_s']:7.2f}s",
                          file=sys.stderr)
                drain(api, ns)
    finally:
        for node in nodes:
            try:
                core.delete_node(node["metadata"]["name"])
            except client.ApiException:
                pass
        api.close()

    summary: dict[str, Any] = {"jobs": args.jobs, "rounds": args.rounds, "threads": args.threads}
    for metric in ("create_s", "running_s"):
        direct = statistics.median(r[metric] for r in results["direct"])
        ours = statistics.median(r[metric] for r in results["backend"])
        summary[metric] = {"direct": round(direct, 3), "backend": round(ours, 3), "ratio": round(ours / direct, 3)}
    summary["target_ratio"] = 1.2
    summary["meets_target"] = all(summary[k]["ratio"] <= 1.2 for k in ("create_s", "running_s"))
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        for metric in ("create_s", "running_s"):
            s = summary[metric]
            print(f"{metric:10} direct {s['direct']:8.2f}s  backend {s['backend']:8.2f}s  ratio {s['ratio']:.2f}")
        print(f"target ≤ 1.2×: {'met' if summary['meets_target'] else 'NOT met'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
