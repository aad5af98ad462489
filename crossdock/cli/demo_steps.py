"""The demo's steps beyond this machine's batch (:mod:`crossdock.cli.demo` tells the story and runs
them): one queue over this machine and the local Slurm cluster (step 2), a service following a
traffic step (step 5), and GPU placement on the fragmentation view (step 6)."""

from __future__ import annotations

import math
import os
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

from crossdock.cli.common import console
from crossdock.cli.demo import STEP_SECONDS, queue_nodes, sbatch, skipped, step, wait_for
from crossdock.cli.render import fragmentation_table
from crossdock.queue.states import JobState

HPC_PARTITION = "cpu"
"""The local Slurm cluster's partition that step 2's ``hpc`` pool names."""


@dataclass(frozen=True)
class SlurmProbe:
    env_file: Path | None
    """The env file of the local Slurm cluster, when it answers; None: it does not."""
    why: str
    """The cluster it found, or why none answers, in words."""


def local_slurm() -> SlurmProbe:
    """Whether the local Slurm cluster answers: its env file (``CROSSDOCK_SLURM_ENV``, else the
    one ``crossdock dev slurm up`` writes in the state directory) exists and ``scontrol`` lists its
    ``cpu`` partition. A site's own Slurm (``SLURM_CONF`` alone) is not the demo's to use."""
    from crossdock.backends.slurm import CliDriver, SlurmError, slurm_env
    from crossdock.backends.slurm.envfile import local_env_file

    path = Path(os.environ.get("CROSSDOCK_SLURM_ENV") or local_env_file())
    if not path.is_file():
        return SlurmProbe(None, f"no local Slurm cluster ({path} does not exist)")
    try:
        partitions = CliDriver(slurm_env({**os.environ, "CROSSDOCK_SLURM_ENV": str(path)}), timeout_s=10).partitions()
    except (SlurmError, OSError) as exc:
        return SlurmProbe(None, f"the local Slurm cluster does not answer ({exc})")
    if HPC_PARTITION not in {p.name for p in partitions}:
        return SlurmProbe(None, f"the Slurm cluster of {path} has no {HPC_PARTITION} partition")
    return SlurmProbe(path, f"the local Slurm cluster ({path.parent})")


# --- step 2: one queue over this machine and Slurm ------------------------------------------------
HYBRID_JOBS = 3


def two_backends(rt, client, slurm: SlurmProbe) -> bool:
    title = "one queue, two backends"
    if slurm.env_file is None:
        step(2, title, f"skipped: {slurm.why}; `crossdock dev slurm up` adds it")
        return True
    step(2, title, f"the hybrid queue spans this machine and the {HPC_PARTITION} partition of {slurm.why}")
    if skipped(rt, "hybrid"):
        return True
    pools = rt.config.queues["hybrid"].pools
    # each job as large as the smallest pool's largest node: one fills this machine (2 cores), and
    # binpack sends the next ones to the fuller Slurm node, wherever they fit
    nodes = queue_nodes(rt, "hybrid")
    cpus = min(max((n.cpu_milli for n in nodes if n.pool == pool), default=1000) for pool in pools) // 1000
    console.print(f"{HYBRID_JOBS} jobs of {cpus} CPUs, binpacked over its pools"
                  f" {' and '.join(f'{p} ({rt.config.pools[p].backend})' for p in pools)}", highlight=False)
    ids = [sbatch(client, ["-J", f"hybrid-{i}", "-p", "hybrid", "-c", str(cpus), "--wrap",
                           "echo on $SLURMD_NODENAME; sleep 2"])[0] for i in range(HYBRID_JOBS)]
    wait_for(lambda: all(j.state.terminal for j in rt.store.get_many(ids)), 2 * STEP_SECONDS)
    jobs = rt.store.get_many(ids)
    by_pool: dict[str, list] = {}
    for j in jobs:
        by_pool.setdefault(j.pool or "none", []).append(j)
    for pool, landed in sorted(by_pool.items()):
        backend = rt.config.pools[pool].backend if pool in rt.config.pools else "-"
        console.print(f"  {pool} ({backend}): jobs {', '.join(str(j.id) for j in landed)} on"
                      f" {', '.join(sorted({n for j in landed for n in j.nodes})) or '-'}", highlight=False)
    done = sum(j.state is JobState.COMPLETED for j in jobs)
    console.print(f"hybrid: {done}/{len(ids)} jobs completed, on {len(by_pool)} of its {len(pools)} pools",
                  highlight=False)
    return done == len(ids) and set(pools) <= set(by_pool)


# --- step 5: a service follows a traffic step ---------------------------------------------------
SERVICE = "chat"
TARGET_QPS, LOW_QPS, HIGH_QPS = 4, 2, 10
"""Requests per second one replica should take, and the offered load before and after the step:
1 replica, then ceil(10 / 4) = 3 (2.5: far from a rounding edge)."""
LOW_SECONDS = 3.0
SERVER = [sys.executable, "-m", "crossdock.jobtools.demo_server", "--service-ms", "20"]


def traffic_step(rt, client) -> bool:
    from crossdock.jobtools.loadgen import LoadRun, Step

    want = math.ceil(HIGH_QPS / TARGET_QPS)
    step(5, "a service follows traffic", f"the {SERVICE} service ({TARGET_QPS} requests/s per replica, 1 to 4"
                                         f" replicas) gets {LOW_QPS}, then {HIGH_QPS} requests/s")
    if skipped(rt, "web"):
        return True
    services = rt.store.services

    def ready() -> int:
        return sum(e.ready and not e.draining for e in services.endpoints(SERVICE))

    handle = client.serve(SERVICE, SERVER, replicas=(1, 4), target_qps=TARGET_QPS, queue="web")
    try:
        if not wait_for(lambda: ready() >= 1 and handle.address):
            console.print(f"{SERVICE}: no replica ready after {STEP_SECONDS:.0f} s", highlight=False)
            return False
        url = f"http://{handle.address}/"
        quiet = LoadRun(url, [Step(LOW_QPS, LOW_SECONDS)]).start().wait()
        console.print(f"  at {LOW_QPS} requests/s: {ready()} replica ready, {handle.record().status.desired} wanted",
                      highlight=False)
        busy = LoadRun(url, [Step(HIGH_QPS, 2 * STEP_SECONDS)]).start()
        wait_for(lambda: ready() >= want)
        busy.stop.set()
        loaded = busy.wait()
        for e in services.events(SERVICE, count=1000):
            if e.get("event") == "scaled":
                console.print(f"  {SERVICE}: {e.get('message', '')}", highlight=False)
        now, sent = ready(), quiet.samples + loaded.samples
        answered = sum(s.ok for s in sent)
        console.print(f"{SERVICE}: 1 → {now} replicas ready as its load stepped from {LOW_QPS} to {HIGH_QPS}"
                      f" requests/s; {answered}/{len(sent)} requests answered", highlight=False)
        return now >= want and answered == len(sent)
    finally:
        handle.delete()  # its replicas drain, then stop: the demo leaves none running
        gone = wait_for(lambda: services.get(SERVICE) is None)
        console.print(f"{SERVICE} deleted: {'its replicas drained and stopped' if gone else 'still stopping'}",
                      highlight=False)


# --- step 6: GPU placement on the fragmentation view -----------------------------------------------
SMALL_GPU_JOBS = (("embed", 1), ("tune-lora", 1), ("finetune", 2))
BIG_GPUS = 4


def gpu_placement(rt, client) -> bool:
    from crossdock.api.views import pool_view
    from crossdock.service import load_inventory

    step(6, "GPU placement", f"jobs of {', '.join(str(n) for _, n in SMALL_GPU_JOBS)} GPUs binpacked on the gpu"
                             f" pool (two nodes of 4 fake A100s), then one of {BIG_GPUS}")
    if skipped(rt, "gpu"):
        return True

    release = Path("gpu-step-shown")  # the small jobs hold their GPUs until the view has been shown

    def submit(name: str, gpus: int, wait: str = "") -> int:
        return sbatch(client, ["-J", name, "-p", "gpu", f"--gpus={gpus}", "--wrap",
                               f"echo GPUs $CUDA_VISIBLE_DEVICES on $SLURMD_NODENAME; {wait}sleep 1"])[0]

    def running(ids: list[int]) -> bool:
        return all(j.state is JobState.RUNNING for j in rt.store.get_many(ids))

    small = [submit(name, n, f"until [ -e {shlex.quote(str(release.resolve()))} ]; do sleep 0.2; done; ")
             for name, n in SMALL_GPU_JOBS]
    try:
        wait_for(lambda: running(small))
        gpu_pools = [p for p in pool_view(load_inventory(rt), rt.store.get_many(rt.store.active_ids()))
                     if p["gpu_models"]]
        console.print(fragmentation_table(gpu_pools))
        big = submit("train-big", BIG_GPUS)
        wait_for(lambda: rt.store.get(big).state is not JobState.PENDING)
    finally:
        release.touch()
    b = rt.store.get(big)
    shared = {n for j in rt.store.get_many(small) for n in j.nodes} & set(b.nodes)
    console.print(f"  train-big (job {big}, {BIG_GPUS} GPUs) placed on {','.join(b.nodes) or 'no node'}:"
                  f" {' '.join(b.gpu_ids) or 'no GPU'}" + ("" if shared or not b.nodes else ", the node binpack kept whole"),
                  highlight=False)
    ids = small + [big]
    wait_for(lambda: all(j.state.terminal for j in rt.store.get_many(ids)))
    done = sum(j.state is JobState.COMPLETED for j in rt.store.get_many(ids))
    console.print(f"gpu: {done}/{len(ids)} jobs completed", highlight=False)
    return done == len(ids) and not shared and len(b.gpu_ids) == BIG_GPUS
