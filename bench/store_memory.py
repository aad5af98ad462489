"""Redis bytes per queued job: ``python bench/store_memory.py [--jobs 10000] [--export NONE|ALL]``.

Submits ``--jobs`` one-line ``--wrap`` jobs (as ``crossdock submit --batch`` stores them, with the
caller's exported environment per ``--export``) to a fresh embedded Redis, no scheduler running,
and prints the growth of the server's ``used_memory`` per job, the part of it that is the job's
own payload (its stored spec), and the overhead beyond it (target: <= 1 KB; 1,000,000 queued jobs
in <= 1 GB).
"""

from __future__ import annotations

import argparse
import os
from datetime import datetime, timezone

from bench_submit import bench_store


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=10_000)
    ap.add_argument("--export", default="NONE")
    a = ap.parse_args()
    tmp, env = bench_store()
    os.environ.update(env)
    from crossdock.backends.redis_store import embedded
    from crossdock.backends.redis_store.codec import job_to_hash
    from crossdock.cli.submit import submitted_spec
    from crossdock.queue.admission import admit
    from crossdock.queue.environ import exportable
    from crossdock.queue.models import JobSpec
    from crossdock.runtime import Runtime

    try:
        rt = Runtime.from_env()
        base = exportable(dict(os.environ))
        specs = [submitted_spec(JobSpec(name=f"j{i % 100}", command=["/bin/sh", "-c", f"echo {i}"], export=a.export),
                                base) for i in range(a.jobs)]
        store = rt.store
        before = store.used_memory()
        now = datetime.now(timezone.utc)
        jobs = []
        for i in range(0, len(specs), 1000):  # as `submit --batch` stores them, a thousand per transaction
            jobs += store.submit([job for spec in specs[i:i + 1000] for job in admit(spec, rt.config, [], now)])
        grown = store.used_memory() - before
        payload = sum(len(job_to_hash(j)["spec"]) for j in jobs) / len(jobs)
        per_job = grown / len(jobs)
        print(f"{len(jobs)} queued jobs (--export={a.export}): Redis grew {grown / 2**20:.1f} MiB,"
              f" {per_job:.0f} B per job, of which the stored spec {payload:.0f} B;"
              f" overhead {per_job - payload:.0f} B per job (target <= 1024);"
              f" 1,000,000 jobs: {per_job * 1e6 / 2**30:.2f} GiB")
    finally:
        embedded.stop(tmp)


if __name__ == "__main__":
    main()
