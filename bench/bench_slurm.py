"""N trivial jobs through crossdock to Slurm vs a plain ``sbatch`` loop, same run.

    python bench/bench_slurm.py [--jobs 1000] [--ways loop,crossdock] [--rounds 1] [--json]

Runs on the local cluster (``crossdock.dev.slurm``, started if needed), one way after the
other, each once the cluster is idle again:

- ``sbatch loop``: N × ``sbatch --parsable --wrap true``, sequentially, as a user would;
- ``crossdock``: the real path. A scheduler loop (a thread, as ``crossdock up`` runs it) and a
  Celery worker process (``crossdock.cli.admin.start_worker``) on an embedded Redis; the N jobs
  are one array submitted with the Python ``Client``; the cycle admits what fits and hands the
  rest to Slurm's queue (the pool's ``backend_queue``), ONE dispatch task makes ONE
  ``sbatch --array``, and follow (``scontrol show job``) moves every task to its end state in
  crossdock's store. Started and warmed up (one job end to end) before the clock starts;
- ``backend array``: the N tasks as one crossdock array job → one Slurm ``--array`` submission
  through ``SlurmBackend`` alone (no scheduler, no Celery);
- ``backend batch``: N separate crossdock jobs through ``SlurmBackend.submit_many``;
- ``local``: the same N as separate jobs through crossdock to the local backend (a 16-CPU local
  node, one supervisor per job, forked by the spawner), to compare the local path with Slurm's.

With ``--map CHUNKSIZE`` the ``crossdock`` and ``local`` ways run ``Client.map`` of a Python
function over N inputs instead (one array, CHUNKSIZE inputs per task), timed until every input's
value is back and checked.

Submit time is the wall time of the submission calls (for ``crossdock``: until ``Client``
returns, with the time until every task is in Slurm as ``in_slurm_s``); time to all complete
runs from the first submission until every job is finished, polled every ``--poll`` seconds
(0.5): the loop with a cheap ``squeue -h -o %F`` of active jobs, ``crossdock`` by counting the
store's pending and active jobs, the backend ways with one batched ``status`` query. With
``--rounds`` > 1 the order of the ways alternates and the figures are medians.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


from crossdock.backends.slurm import SlurmBackend
from crossdock.dev import slurm as dev
from crossdock.queue.models import ArraySpec, Job, JobSpec

from crossdock_service import CrossdockService  # bench/ is on sys.path when a bench runs

POLL_S = 0.5


def _active_ids(env: dict[str, str]) -> set[str]:
    out = subprocess.run(["squeue", "-h", "-o", "%F"], env=env, capture_output=True, text=True, check=True).stdout
    return set(out.split())


def wait_idle(env: dict[str, str], poll: float, timeout: float = 600) -> None:
    deadline = time.monotonic() + timeout
    while _active_ids(env):
        if time.monotonic() > deadline:
            raise RuntimeError("cluster did not drain")
        time.sleep(poll)


def bench_sbatch_loop(env: dict[str, str], n: int, partition: str, workdir: str, poll: float) -> dict[str, float]:
    argv = ["sbatch", "--parsable", f"--partition={partition}", f"--chdir={workdir}", "--output=/dev/null", "--wrap", "true"]
    start = time.perf_counter()
    ids = {subprocess.run(argv, env=env, capture_output=True, text=True, check=True).stdout.strip().split(";")[0]
           for _ in range(n)}
    submitted = time.perf_counter()
    while ids & _active_ids(env):
        time.sleep(poll)
    return {"submit_s": submitted - start, "complete_s": time.perf_counter() - start}


def bench_backend_array(backend: SlurmBackend, n: int, partition: str, workdir: str, job_id: int,
                        poll: float) -> dict[str, float]:
    job = Job(id=job_id, spec=JobSpec(command=["true"], workdir=workdir, stdout="/dev/null",
                                      array=ArraySpec(task_ids=list(range(n)))))
    start = time.perf_counter()
    ref = backend.submit(job, partition=partition)
    submitted = time.perf_counter()
    while not (status := backend.status_refs([ref])[ref]).state.terminal:
        time.sleep(poll)
    assert len(status.tasks) == n, f"array reported {len(status.tasks)} tasks, expected {n}"
    return {"submit_s": submitted - start, "complete_s": time.perf_counter() - start}


def bench_backend_batch(backend: SlurmBackend, n: int, partition: str, workdir: str, first_id: int,
                        poll: float) -> dict[str, float]:
    jobs = [Job(id=first_id + i, spec=JobSpec(command=["true"], workdir=workdir, stdout="/dev/null")) for i in range(n)]
    start = time.perf_counter()
    backend.submit_many(jobs, partition=partition)
    submitted = time.perf_counter()
    while True:
        statuses = backend.status(jobs)
        if len(statuses) == n and all(s.state.terminal for s in statuses.values()):
            break
        time.sleep(poll)
    return {"submit_s": submitted - start, "complete_s": time.perf_counter() - start}


class CrossdockRun(CrossdockService):
    """crossdock whose one Slurm pool may queue ``backend_queue`` jobs in Slurm."""

    def __init__(self, partition: str, slurm_env_file: str, backend_queue: int, interval: float,
                 reconcile: float, workers: int = 2) -> None:
        super().__init__({
            "priority_classes": {"batch": {"value": 500}},
            "pools": {"hpc": {"backend": "slurm", "partition": partition, "backend_queue": backend_queue}},
            "queues": {"batch": {"priority_class": "batch", "pools": ["hpc"]}},
            "default_queue": "batch",
            "scheduler": {"interval_seconds": interval},
        }, {"CROSSDOCK_SLURM_ENV": slurm_env_file}, reconcile, workers)

    def left(self) -> int:
        """Jobs not yet in an end state (pending or active) in crossdock's store."""
        return self.rt.store.unfinished_count()

    def run(self, specs: list, poll: float, timeout: float = 900) -> dict[str, float]:
        from crossdock.queue.states import JobState

        store = self.rt.store
        start = time.perf_counter()
        handles = self.client.submit_specs(specs)
        submitted = time.perf_counter()
        ids = [h.id for h in handles]
        in_slurm = None
        deadline = time.monotonic() + timeout
        while self.left():
            if in_slurm is None and all(j.backend_ref or j.state not in (JobState.PENDING, JobState.SCHEDULED)
                                        for j in store.get_many(ids)):
                in_slurm = time.perf_counter() - start
            if time.monotonic() > deadline:
                raise RuntimeError(f"crossdock: {self.left()} jobs not finished after {timeout:.0f}s")
            time.sleep(poll)
        done = time.perf_counter()
        states = {j.state for j in store.get_many(ids)}
        if states != {JobState.COMPLETED}:
            raise RuntimeError(f"crossdock: jobs ended {sorted(s.value for s in states)}")
        return {"submit_s": submitted - start, "in_slurm_s": in_slurm if in_slurm is not None else done - start,
                "complete_s": done - start}


class LocalRun(CrossdockRun):
    """crossdock with one local pool of 16 CPU slots, as the Slurm partition has."""

    def __init__(self, interval: float, reconcile: float, workers: int = 2) -> None:
        CrossdockService.__init__(self, {
            "priority_classes": {"batch": {"value": 500}},
            "pools": {"here": {"backend": "local", "nodes": [{"name": "localhost", "cpus": 16, "memory_mib": 16384}]}},
            "queues": {"batch": {"priority_class": "batch", "pools": ["here"]}},
            "default_queue": "batch",
            "scheduler": {"interval_seconds": interval},
        }, {}, reconcile, workers)


def bench_map(run: CrossdockRun, n: int, chunksize: int, workdir: str) -> dict[str, float]:
    start = time.perf_counter()
    handles = run.client.map(lambda x: x * x, range(n), chunksize=chunksize, workdir=workdir, stdout="/dev/null")
    submitted = time.perf_counter()
    values = [h.result(timeout=1800) for h in handles]
    if values != [x * x for x in range(n)]:
        raise RuntimeError("map: wrong values")
    return {"submit_s": submitted - start, "complete_s": time.perf_counter() - start}


def bench_crossdock(run: CrossdockRun, n: int, workdir: str, poll: float, array: bool) -> dict[str, float]:
    from crossdock.queue.models import JobSpec as Spec

    base = {"command": ["true"], "workdir": workdir, "stdout": "/dev/null", "user": run.client.user}
    specs = [Spec(**base, array=ArraySpec(task_ids=list(range(n))))] if array else [Spec(**base) for _ in range(n)]
    return run.run(specs, poll)


WAYS = ("loop", "crossdock", "backend-array", "backend-batch", "local")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--ways", default="loop,crossdock",
                        help=f"comma-separated, from {', '.join(WAYS)} (default: loop,crossdock)")
    parser.add_argument("--rounds", type=int, default=1, help="repeat, alternating the order; medians reported")
    parser.add_argument("--driver", choices=["cli", "rest"], default="cli")
    parser.add_argument("--partition", default="cpu")
    parser.add_argument("--dir", default=None, help="cluster state directory")
    parser.add_argument("--poll", type=float, default=POLL_S, help="seconds between completion checks")
    parser.add_argument("--separate", action="store_true", help="crossdock: N separate jobs instead of one array")
    parser.add_argument("--backend-queue", type=int, default=None,
                        help="crossdock: the pool's backend_queue (default: --jobs, so the whole array goes at once)")
    parser.add_argument("--interval", type=float, default=1.0, help="crossdock: scheduler interval_seconds (1.0)")
    parser.add_argument("--reconcile", type=float, default=2.0, help="crossdock: seconds between follows (2.0)")
    parser.add_argument("--map", type=int, default=0, metavar="CHUNKSIZE",
                        help="crossdock and local: a Client.map over --jobs inputs, CHUNKSIZE per task")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args(argv)
    ways = [w.strip() for w in args.ways.split(",") if w.strip()]
    unknown = [w for w in ways if w not in WAYS]
    if unknown:
        parser.error(f"--ways: unknown {', '.join(unknown)}; choose from {', '.join(WAYS)}")

    state = dev.up(args.dir)
    env = {**os.environ, **dev.read_env(args.dir)}
    env.pop("SLURM_JWT", None)
    backend = SlurmBackend.from_env(env, driver=args.driver)
    workdir = tempfile.mkdtemp(prefix="crossdock-bench-", dir="/tmp")
    Path(workdir).chmod(0o777)
    base_id = int(time.time()) * 10_000 % 10**12
    poll = args.poll
    run = None
    if "crossdock" in ways:
        env_file = str(state if state.is_file() else state / "env")
        run = CrossdockRun(args.partition, env_file, args.backend_queue if args.backend_queue is not None else args.jobs,
                           args.interval, args.reconcile)
    local = LocalRun(args.interval, args.reconcile) if "local" in ways else None
    names = {"local": "crossdock local " + ("map" if args.map else "jobs"), "loop": "sbatch loop",
             "crossdock": "crossdock " + ("map" if args.map else "jobs" if args.separate else "array"),
             "backend-array": f"backend array ({args.driver})", "backend-batch": f"backend batch ({args.driver})"}
    per_round: dict[str, list[dict[str, float]]] = {names[w]: [] for w in ways}
    try:
        for warm in (run, local):  # warm: worker started, backend built, first cycle and follow done
            if warm is not None:
                bench_crossdock(warm, 1, workdir, poll, array=False)
        for rnd in range(args.rounds):
            for i, way in enumerate(ways if rnd % 2 == 0 else ways[::-1]):
                wait_idle(env, poll)
                if way == "loop":
                    r = bench_sbatch_loop(env, args.jobs, args.partition, workdir, poll)
                elif way in ("local", "crossdock") and args.map:
                    r = bench_map(local if way == "local" else run, args.jobs, args.map, workdir)
                elif way == "local":
                    r = bench_crossdock(local, args.jobs, workdir, poll, array=False)
                elif way == "crossdock":
                    r = bench_crossdock(run, args.jobs, workdir, poll, array=not args.separate)
                elif way == "backend-array":
                    r = bench_backend_array(backend, args.jobs, args.partition, workdir, base_id + 2 * rnd * 10**4, poll)
                else:
                    r = bench_backend_batch(backend, args.jobs, args.partition, workdir,
                                            base_id + (2 * rnd + 1) * 10**4, poll)
                per_round[names[way]].append(r)
                print(f"round {rnd} {names[way]:<22} " + "  ".join(f"{k} {v:.2f}" for k, v in r.items()),
                      file=sys.stderr, flush=True)
    finally:
        for done in (run, local):
            if done is not None:
                done.close()

    results = {name: {k: statistics.median(r[k] for r in rs) for k in rs[0]} for name, rs in per_round.items()}
    loop = results.get("sbatch loop")
    summary: dict = {"jobs": args.jobs, "driver": args.driver, "rounds": args.rounds, "results": results}
    if loop is not None:
        summary["ratios"] = {name: {"submit": r["submit_s"] / loop["submit_s"], "complete": r["complete_s"] / loop["complete_s"]}
                             for name, r in results.items() if name != "sbatch loop"}
        ours = next((v for k, v in summary["ratios"].items() if k.startswith("crossdock")), None)
        if ours is not None:
            summary["target_complete_ratio"] = 1.1
            summary["meets_target"] = ours["complete"] <= 1.1
    if args.json:
        print(json.dumps(summary, indent=2))
        return 0
    print(f"{args.jobs} trivial jobs (`true`) on partition {args.partition!r} (16 CPU slots), driver {args.driver},"
          f" {args.rounds} round(s)")
    print(f"{'way':<24}{'submit s':>10}{'all done s':>12}{'submit ×loop':>14}{'done ×loop':>12}")
    for name, r in results.items():
        ratio = (f"{r['submit_s'] / loop['submit_s']:>14.3f}{r['complete_s'] / loop['complete_s']:>12.3f}"
                 if loop else "")
        print(f"{name:<24}{r['submit_s']:>10.2f}{r['complete_s']:>12.2f}{ratio}")
        if "in_slurm_s" in r:
            print(f"{'':<24}(all tasks in Slurm after {r['in_slurm_s']:.2f} s)")
    if "meets_target" in summary:
        print(f"target: crossdock end to end ≤ 1.1 × the sbatch loop: {'met' if summary['meets_target'] else 'NOT met'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
