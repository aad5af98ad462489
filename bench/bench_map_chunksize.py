"""``Client.map`` of many short calls with ``chunksize=1`` (one task, one interpreter start, per
input) against the chunksize ``map`` chooses when given none (:func:`crossdock.client.auto_chunksize`),
in one run on the local backend: ``python bench/bench_map_chunksize.py [--inputs N] [--cpus C]``.
Prints each way's time to every result and their ratio."""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(__file__))
from crossdock_service import CrossdockService  # noqa: E402


def timed_map(service: CrossdockService, n: int, chunksize: int | None, workdir: str) -> tuple[float, int]:
    start = time.perf_counter()
    handles = service.client.map(lambda x: x * x, range(n), chunksize=chunksize, workdir=workdir)
    if [h.result(timeout=3600) for h in handles] != [x * x for x in range(n)]:
        raise RuntimeError("map: wrong values")
    return time.perf_counter() - start, len({h.id for h in handles})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--inputs", type=int, default=200)
    parser.add_argument("--cpus", type=int, default=4, help="the local pool's CPU slots")
    args = parser.parse_args()
    service = CrossdockService({
        "priority_classes": {"batch": {"value": 500}},
        "pools": {"here": {"backend": "local", "nodes": [{"name": "localhost", "cpus": args.cpus, "memory_mib": 16384}]}},
        "queues": {"batch": {"priority_class": "batch", "pools": ["here"]}},
        "default_queue": "batch",
        "scheduler": {"interval_seconds": 0.2},
    }, {}, reconcile=1.0)
    workdir = tempfile.mkdtemp(prefix="crossdock-bench-map-")
    try:
        timed_map(service, 4, 1, workdir)  # warm: worker, spawner, first cycles
        one, tasks_one = timed_map(service, args.inputs, 1, workdir)
        auto, tasks_auto = timed_map(service, args.inputs, None, workdir)
    finally:
        service.close()
    print(f"map of {args.inputs} inputs on {args.cpus} local CPU slots")
    print(f"  chunksize=1     {one:8.2f} s  ({tasks_one} tasks)")
    print(f"  auto chunksize  {auto:8.2f} s  ({tasks_auto} tasks)")
    print(f"  ratio           {one / auto:8.1f}x")


if __name__ == "__main__":
    main()
