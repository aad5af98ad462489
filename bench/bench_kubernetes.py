"""N jobs through crossdock to Kubernetes vs N direct client creates, same run.

    python bench/bench_kubernetes.py [--jobs 1000] [--rounds 1] [--mode crossdock|interleaved|sequential]
                                     [--threads 1] [--json]

Against the local control plane (``crossdock.dev.k8s``, started if needed) or ``KUBECONFIG``.
The bench adds its own kwok nodes (pool ``bench``, 110 pods each, enough for every pod of a
round at once) and removes them at the end. The paths:

- ``direct``: ``BatchV1Api.create_namespaced_job`` with the very manifests the backend builds
  (built before the clock starts) less crossdock's ``crossdock.io/once`` gate, as a user of the
  official client would call it;
- ``crossdock`` (``--mode crossdock``): the real path. A scheduler loop (a thread, as
  ``crossdock up`` runs it) and a Celery worker process on an embedded Redis; the N jobs are one
  array submitted with the Python ``Client``; one cycle admits them, ONE dispatch task creates
  ONE Indexed Job (N completions, parallelism N), the Job controller makes the pods. Started and
  warmed up (one job end to end) before the clock starts. Run one after the other with
  ``direct``, each in a fresh namespace once the other's pods are gone, the order alternating
  over ``--rounds``;
- ``backend`` (``--mode interleaved|sequential``): ``KubernetesBackend.submit(job)`` per job —
  manifest building, the GPU-product lookup, the idempotent create (409 → read) included.

``interleaved``: direct and backend in the same round, each in its own namespace, calls
alternating (direct, backend, backend, direct, …), so both see the same load on a shared
machine and the same control plane queues; ``create_s`` sums each path's call times.
``sequential``: one path after the other (``--threads`` concurrent calls per path); ``create_s``
is the wall time of the N calls. For ``crossdock``, ``create_s`` is until ``Client`` returns and
``in_k8s_s`` until every task has its Job.

``running_s`` runs from the first create (or the submit) until a watch on the path's namespace
has seen all N pods Running (kube-controller-manager makes the pods, kube-scheduler binds them,
kwok runs them); for ``crossdock`` also ``store_running_s``, until crossdock's store shows every
task RUNNING (follow every ``--reconcile`` s). ``ratio`` is ours / direct, medians over the rounds.
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

from crossdock_service import CrossdockService  # bench/ is on sys.path when a bench runs

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
    for body in bodies:  # a plain Job, as a user writes it: its pod starts without crossdock's gate
        del body["spec"]["template"]["spec"]["schedulingGates"]
    # Watching, as crossdock's leader does: the backend's releaser lets each pod through its gate.
    backend = KubernetesBackend(CONFIG, api, namespace=ns["backend"], ttl_seconds_after_finished=None)
    backend.sync_priority_classes()
    backend.informers()

    def direct(i: int) -> None:
        batch.create_namespaced_job(ns["direct"], bodies[i])

    def through_backend(i: int) -> None:
        backend.submit(work[i])

    return {"direct": direct, "backend": through_backend}


class CrossdockRun(CrossdockService):
    """crossdock with the bench pool as its one Kubernetes pool, creating Jobs in ``namespace``."""

    def __init__(self, kubeconfig: str, namespace: str, n: int, interval: float, reconcile: float,
                 workers: int = 2) -> None:
        super().__init__({
            "priority_classes": {"batch": {"value": 10}},
            "pools": {POOL: {"backend": "k8s", "selector": {"crossdock.io/pool": POOL}, "backend_queue": n}},
            "queues": {"batch": {"priority_class": "batch", "pools": [POOL], "placement": "most-requested"}},
            "default_queue": "batch",
            "scheduler": {"interval_seconds": interval, "max_array_size": max(n, 1001)},
        }, {"CROSSDOCK_KUBECONFIG": kubeconfig, "CROSSDOCK_K8S_NAMESPACE": namespace}, reconcile, workers)

    def submit(self, n: int, array: bool, env: dict[str, str] | None = None) -> list[int]:
        from crossdock.queue.models import ArraySpec, JobSpec as Spec

        base = {"command": ["true"], "cpus_per_task": 1, "user": self.client.user, "env": env or {}}
        specs = [Spec(**base, array=ArraySpec(task_ids=list(range(n))))] if array else [Spec(**base) for _ in range(n)]
        return [h.id for h in self.client.submit_specs(specs)]

    def wait(self, ids: list[int], what: str, test, start: float, timeout: float) -> float:
        store = self.rt.store
        deadline = time.monotonic() + timeout
        while True:
            jobs = store.get_many(ids)
            if all(test(j) for j in jobs):
                return time.perf_counter() - start
            if time.monotonic() > deadline:
                raise RuntimeError(f"crossdock: not all {what} after {timeout:.0f}s")
            time.sleep(0.1)


def run_crossdock(api: client.ApiClient, kubeconfig: str, namespace: str, n: int, args: argparse.Namespace
                  ) -> dict[str, float]:
    from crossdock.queue.states import JobState

    core = client.CoreV1Api(api)
    run = CrossdockRun(kubeconfig, namespace, n, args.interval, args.reconcile)
    try:
        # Worker, backend, informers and the first cycle warm: one short job end to end.
        warm = run.submit(1, array=False, env={"CROSSDOCK_SIMULATE_RUN_SECONDS": "0.1"})
        run.wait(warm, "warm-up job COMPLETED", lambda j: j.state is JobState.COMPLETED, time.perf_counter(), 120)
        with RunningWatch(core, namespace, n) as watch:
            start = time.perf_counter()
            ids = run.submit(n, array=not args.separate)
            created = time.perf_counter()
            in_k8s = run.wait(ids, "in Kubernetes", lambda j: bool(j.backend_ref), start, args.timeout)
            if not watch.done.wait(max(1.0, args.timeout - (time.perf_counter() - start))):
                raise RuntimeError(f"crossdock: only {len(watch.running)}/{n} pods Running after {args.timeout:.0f}s")
            assert watch.at is not None
            store_running = run.wait(ids, "RUNNING in the store", lambda j: j.state is JobState.RUNNING, start,
                                     args.timeout)
        return {"create_s": created - start, "in_k8s_s": in_k8s, "running_s": watch.at - start,
                "store_running_s": store_running}
    finally:
        run.close()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--mode", choices=("crossdock", "interleaved", "sequential"), default="crossdock")
    ap.add_argument("--threads", type=int, default=1, help="concurrent create calls per path (sequential mode)")
    ap.add_argument("--timeout", type=float, default=900, help="seconds to wait for all pods Running")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--separate", action="store_true", help="crossdock: N separate jobs instead of one array")
    ap.add_argument("--interval", type=float, default=1.0, help="crossdock: scheduler interval_seconds (1.0)")
    ap.add_argument("--reconcile", type=float, default=2.0, help="crossdock: seconds between follows (2.0)")
    args = ap.parse_args(argv)
    ours = "crossdock" if args.mode == "crossdock" else "backend"

    kubeconfig = os.environ.get("KUBECONFIG") or str(k8s.up())
    api = config.new_client_from_config(config_file=kubeconfig)
    api.configuration.connection_pool_maxsize = max(4, args.threads)
    core = client.CoreV1Api(api)
    tag = uuid.uuid4().hex[:6]
    nodes = bench_nodes(args.jobs * (2 if args.mode == "interleaved" else 1), tag)
    for node in nodes:
        core.create_node(node)
    results: dict[str, list[dict[str, float]]] = {"direct": [], ours: []}
    try:
        ready = time.monotonic() + 120
        while sum(any(c.type == "Ready" and c.status == "True" for c in (n.status.conditions or []))
                  for n in core.list_node(label_selector=f"crossdock.io/pool={POOL}").items) < len(nodes):
            if time.monotonic() > ready:
                raise RuntimeError("bench nodes not Ready")
            time.sleep(0.5)
        work = jobs(args.jobs)
        for rnd in range(args.rounds):
            if args.mode == "crossdock":
                for path in ("direct", "crossdock") if rnd % 2 == 0 else ("crossdock", "direct"):
                    name = _namespace(core, f"cd-bench-{path}-{tag}-{rnd}")
                    if path == "direct":
                        one = run_path(api, name, args.jobs, args.threads, _creators(api, {"direct": name,
                                       "backend": name}, work)["direct"], args.timeout)
                    else:
                        one = run_crossdock(api, kubeconfig, name, args.jobs, args)
                    results[path].append(one)
                    _report(rnd, path, one)
                    drain(api, name)
                continue
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
        mine = statistics.median(r[metric] for r in results[ours])
        summary[metric] = {"direct": round(direct, 3), ours: round(mine, 3), "ratio": round(mine / direct, 3)}
    for metric in ("in_k8s_s", "store_running_s"):
        if results[ours] and metric in results[ours][0]:
            summary[metric] = {ours: round(statistics.median(r[metric] for r in results[ours]), 3)}
    summary["target_ratio"] = 1.2
    summary["meets_target"] = all(summary[k]["ratio"] <= 1.2 for k in ("create_s", "running_s"))
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        for metric in ("create_s", "running_s"):
            s = summary[metric]
            print(f"{metric:16} direct {s['direct']:8.2f}s  {ours} {s[ours]:8.2f}s  ratio {s['ratio']:.2f}")
        for metric in ("in_k8s_s", "store_running_s"):
            if metric in summary:
                print(f"{metric:16} {ours} {summary[metric][ours]:8.2f}s")
        print(f"target ≤ 1.2×: {'met' if summary['meets_target'] else 'NOT met'}")
    return 0


def _report(rnd: int, path: str, res: dict[str, float]) -> None:
    print(f"round {rnd} {path:8} create {res['create_s']:7.2f}s  all Running {res['running_s']:7.2f}s",
          file=sys.stderr, flush=True)


if __name__ == "__main__":
    sys.exit(main())
