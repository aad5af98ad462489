"""N trivial jobs through crossdock's Slurm backend vs a plain ``sbatch`` loop, same run.

    python bench/bench_slurm.py [--jobs 1000] [--driver cli|rest] [--json]

Runs three ways on the local cluster (``crossdock.dev.slurm``, started if needed), one after
the other, each once the cluster is idle again:

- ``sbatch loop``: N × ``sbatch --parsable --wrap true``, sequentially, as a user would;
- ``backend array``: the N tasks as one crossdock array job → one Slurm ``--array`` submission;
- ``backend batch``: N separate crossdock jobs through ``SlurmBackend.submit_many`` (one
  lookup for the batch, then parallel submissions).

Submit time is the wall time of the submission calls; time to all complete runs from the
first submission until every job is finished, polled every ``--poll`` seconds (0.5): the
loop with a cheap ``squeue -h -o %F`` of active jobs, the backend with its one batched
``status`` query (which lists every job slurmctld holds, finished ones for MinJobAge).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from crossdock.backends.slurm import SlurmBackend
from crossdock.dev import slurm as dev
from crossdock.queue.models import ArraySpec, Job, JobSpec

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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--driver", choices=["cli", "rest"], default="cli")
    parser.add_argument("--partition", default="cpu")
    parser.add_argument("--dir", default=None, help="cluster state directory")
    parser.add_argument("--poll", type=float, default=POLL_S, help="seconds between completion checks")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args(argv)

    dev.up(args.dir)
    env = {**os.environ, **dev.read_env(args.dir)}
    env.pop("SLURM_JWT", None)
    backend = SlurmBackend.from_env(env, driver=args.driver)
    workdir = tempfile.mkdtemp(prefix="crossdock-bench-", dir="/tmp")
    Path(workdir).chmod(0o777)
    base_id = int(time.time()) * 10_000 % 10**12

    results: dict[str, dict[str, float]] = {}
    poll = args.poll
    wait_idle(env, poll)
    results["sbatch loop"] = bench_sbatch_loop(env, args.jobs, args.partition, workdir, poll)
    wait_idle(env, poll)
    results[f"backend array ({args.driver})"] = bench_backend_array(
        backend, args.jobs, args.partition, workdir, base_id, poll)
    wait_idle(env, poll)
    results[f"backend batch ({args.driver})"] = bench_backend_batch(
        backend, args.jobs, args.partition, workdir, base_id + 1, poll)

    loop = results["sbatch loop"]
    if args.json:
        print(json.dumps({"jobs": args.jobs, "driver": args.driver, "results": results}, indent=2))
        return 0
    print(f"{args.jobs} trivial jobs (`true`) on partition {args.partition!r} (16 CPU slots), driver {args.driver}")
    print(f"{'way':<24}{'submit s':>10}{'all done s':>12}{'submit ×loop':>14}{'done ×loop':>12}")
    for name, r in results.items():
        print(f"{name:<24}{r['submit_s']:>10.2f}{r['complete_s']:>12.2f}"
              f"{r['submit_s'] / loop['submit_s']:>14.3f}{r['complete_s'] / loop['complete_s']:>12.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
