"""N jobs through crossdock's Kubernetes backend vs N direct client creates, same run.

    python bench/bench_kubernetes.py [--jobs 1000] [--rounds 1] [--mode interleaved|sequential]
                                     [--threads 1] [--json]

Against the local control plane (``crossdock.dev.k8s``, started if needed) or ``KUBECONFIG``.
The bench adds its own kwok nodes (pool ``bench``, 110 pods each, enough for every pod of a
round at once) and removes them at the end. The two paths:

- ``direct``: ``BatchV1Api.create_namespaced_job`` with the very manifests the backend builds
  (built before the clock starts), as a user of the official client would call it;
- ``backend``: ``KubernetesBackend.submit(job)`` per job — manifest building, the GPU-product
  lookup, the idempotent create (409 → read) included.

``interleaved`` (default): both paths in the same round, each in its own namespace, calls
alternating (direct, backend, backend, direct, …), so both see the same load on a shared
machine and the same control plane queues; ``create_s`` sums each path's call times.
``sequential``: one path after the other, each in a fresh namespace once the other's pods are
gone (``--threads`` concurrent calls per path); ``create_s`` is the wall time of the N calls.

``running_s`` runs from the first create until a watch on the path's namespace has seen all N
pods Running (kube-controller-manager makes the pods, kube-scheduler binds them, kwok runs
them). ``ratio`` is backend / direct, medians over the rounds.
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


def run_interleaved(api: client.ApiClient, namespaces: dict[str, str], n: int,
                    create: dict[str, Callable[[int], None]], timeout: float) -> dict[str, dict[str, float]]:
    core = client.CoreV1Api(api)
    spent = {path: 0.0 for path in namespaces}
    with RunningWatch(core, namespaces["direct"], n) as wd, RunningWatch(core, namespaces["backend"], n) as wb:
        start = time.perf_counter()
        for i in range(n):
            for path in ("direct", "backend") if i % 2 == 0 else ("backend", "direct"):
                t0 = time.perf_counter()
                create[path](i)
                spent[path] += time.perf_counter() - t0
        for path, watch in (("direct", wd), ("backend", wb)):
            if not watch.done.wait(max(1.0, timeout - (time.perf_counter() - start))):
                raise RuntimeError(f"{path}: only {len(watch.running)}/{n} pods Running after {timeout:.0f}s")
        assert wd.at is not None and wb.at is not None
        return {"direct": {"create_s": spent["direct"], "running_s": wd.at - start},
                "backend": {"create_s": spent["backend"], "running_s": wb.at - start}}


def _namespace(core: client.CoreV1Api, name: str) -> str:
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    deadline = time.monotonic() + 30
    while not core.list_namespaced_service_account(name, field_selector="metadata.name=default").items:
        if time.monotonic() > deadline:
            raise RuntimeError(f"no default service account in {name}")
        time.sleep(0.25)
    return name


def _creators(api: client.ApiClient, ns: dict[str, str], work: list[Job]) -> dict[str, Callable[[int], None]]:
    batch = client.BatchV1Api(api)
    bodies = [m.build(j, CONFIG, m.Options(namespace=ns["direct"], ttl_seconds_after_finished=None)) for j in work]
    backend = KubernetesBackend(CONFIG, api, namespace=ns["backend"], watch=False, ttl_seconds_after_finished=None)
    backend.sync_priority_classes()

    def direct(i: int) -> None:
        batch.create_namespaced_job(ns["direct"], bodies[i])

    def through_backend(i: int) -> None:
        backend.submit(work[i])

    return {"direct": direct, "backend": through_backend}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--mode", choices=("interleaved", "sequential"), default="interleaved")
    ap.add_argument("--threads", type=int, default=1, help="concurrent create calls per path (sequential mode)")
    ap.add_argument("--timeout", type=float, default=900, help="seconds to wait for all pods Running")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)

    kubeconfig = os.environ.get("KUBECONFIG") or str(k8s.up())
    api = config.new_client_from_config(config_file=kubeconfig)
    api.configuration.connection_pool_maxsize = max(4, args.threads)
    core = client.CoreV1Api(api)
    tag = uuid.uuid4().hex[:6]
    nodes = bench_nodes(args.jobs * (2 if args.mode == "interleaved" else 1), tag)
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
            if args.mode == "interleaved":
                ns = {p: _namespace(core, f"cd-bench-{p}-{tag}-{rnd}") for p in ("direct", "backend")}
                res = run_interleaved(api, ns, args.jobs, _creators(api, ns, work), args.timeout)
                for path in ("direct", "backend"):
                    results[path].append(res[path])
                    _report(rnd, path, res[path])
                for name in ns.values():
                    drain(api, name)
                continue
            for path in ("direct", "backend") if rnd % 2 == 0 else ("backend", "direct"):
                ns = {p: f"cd-bench-{p}-{tag}-{rnd}" for p in ("direct", "backend")}
                _namespace(core, ns[path])
                create = _creators(api, ns, work)[path]
                one = run_path(api, ns[path], args.jobs, args.threads, create, args.timeout)
                results[path].append(one)
                _report(rnd, path, one)
                drain(api, ns[path])
    finally:
        for node in nodes:
            try:
                core.delete_node(node["metadata"]["name"])
            except client.ApiException:
                pass
        api.close()

    summary: dict[str, Any] = {"jobs": args.jobs, "rounds": args.rounds, "mode": args.mode, "threads": args.threads,
                               "per_round": results}
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


def _report(rnd: int, path: str, res: dict[str, float]) -> None:
    print(f"round {rnd} {path:8} create {res['create_s']:7.2f}s  all Running {res['running_s']:7.2f}s",
          file=sys.stderr, flush=True)


if __name__ == "__main__":
    sys.exit(main())
