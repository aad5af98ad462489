"""`crossdock demo`: the story of crossdock in about a minute, through the real Celery/Redis path on
this machine (the embedded default: nothing to install). Each step prints its name and what it
shows:

1. **one queue**: a realistic batch: training, inference and preprocessing jobs with their
   priority classes, an sbatch array with a throttle, a dependency chain, a job that fails on
   purpose (and the job that depended on it, cancelled because its dependency can never be
   satisfied) and one Python-function job;
2. **one queue, two backends**: when the local Slurm cluster (``crossdock dev slurm up``) answers,
   the ``hybrid`` queue spans this machine and its ``cpu`` partition, and its jobs land on both;
   when it does not, one line says how to add it;
3. **preemption**: a preemptible training job holding the whole machine is preempted by an
   inference job, requeued, and completes on its second attempt;
4. **elastic queue**: a backlog on the ``etl`` queue scales its fleet of local workers up, and
   back to zero once the queue is idle;
5. **a service follows traffic**: the ``chat`` service's replicas (demo servers behind the local
   router) go from 1 to 3 when its offered load steps up;
6. **GPU placement**: GPU jobs binpacked on two nodes of fake A100s (declared in the config, run
   here), shown on the fragmentation view the dashboard draws, keep a whole node for a 4-GPU job.

``crossdock demo --step N`` (repeatable) runs only those steps. Steps 2 and 5-6 live in
:mod:`crossdock.cli.demo_steps`. The demo runs on its own config
(``crossdock-demo.yaml`` in its output folder: the embedded default plus the queues and pools of
its steps, and no per-job caps) unless CROSSDOCK_CONFIG names one, in which case a step whose
queue that config lacks says so and is skipped; when it stops, it stops everything it started
(workers, the local spawner, the service's replicas, and the embedded Redis when no job is
placed), as ``crossdock up`` does.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, Iterable

import yaml
from rich.live import Live

from crossdock.backends.redis_store.embedded import shown
from crossdock.cli.common import console
from crossdock.cli.render import summary_table
from crossdock.queue.states import JobState

PREPROCESS = """#!/bin/sh
#SBATCH --job-name=tokenize
#SBATCH --partition=preprocessing
#SBATCH --array=0-5%2
#SBATCH --cpus-per-task=1 --mem=256M
#SBATCH --time=5
#SBATCH --output=tokenize-%A_%a.out
echo "shard $SLURM_ARRAY_TASK_ID of job $SLURM_ARRAY_JOB_ID on $SLURMD_NODENAME"
sleep 1
"""


def word_count(text: str) -> dict[str, int]:
    counts: dict[str, int] = {}
    for w in text.split():
        counts[w] = counts.get(w, 0) + 1
    return counts


def sbatch(client, argv: list[str], script: str | None = None, path: str | None = None) -> list[int]:
    from crossdock.queue.sbatch import build_spec
    from crossdock.service import submit

    sub = build_spec(argv, script, path)
    spec = sub.spec.model_copy(update={"user": client.user, "workdir": os.getcwd()})
    return [j.id for j in submit(client.runtime, [spec])]


ETL_QUEUE = {"priority_class": "preprocessing", "pools": ["local"], "placement": "most-requested",
             "elastic": {"metric": "queue_length", "per_replica": 2, "max": 3, "cooldown_seconds": 3,
                         "behavior": {"scaleDown": {"stabilizationWindowSeconds": 0}},
                         "fleet": {"backend": "local"}}}
"""The elastic queue of step 4: one local worker per 2 queued jobs, at most 3, none once idle for 3 s."""
WEB_QUEUE = {"priority_class": "inference", "pools": ["local"], "placement": "spread", "cpu_request_ratio": 0.25}
"""The service's queue of step 5: a replica of 1 CPU requests a quarter of one (demo servers idle
most of the time), so that four fit on a 2-core machine."""
GPU_POOL = {"backend": "local", "nodes": [{"name": f"gpu-{x}", "cpus": 8, "memory_mib": 16384, "gpus": 4,
                                           "gpu_model": "A100"} for x in "ab"]}
"""Step 6's pool: two nodes of 4 A100s, declared (no device behind them: their jobs run here, with
CUDA_VISIBLE_DEVICES set as on a real node)."""
GPU_QUEUE = {"priority_class": "training", "pools": ["gpu"], "placement": "binpack"}
HPC_POOL = {"backend": "slurm", "partition": "cpu"}
"""Step 2's Slurm pool: the local Slurm cluster's ``cpu`` partition (nodes cpu1 and cpu2)."""
HYBRID_QUEUE = {"priority_class": "preprocessing", "pools": ["local", "hpc"], "placement": "binpack"}
SERVICES = {"interval_seconds": 0.5, "router": {"window_seconds": 2, "probe_seconds": 0.2}}
"""The services controller's pace and the router's traffic window: a step in load is followed
within seconds (the defaults, 2 s and 10 s, suit a service more than a one-minute story)."""
STEP_SECONDS = 60.0
"""How long a story step waits for what it shows before it says what it saw instead."""


def demo_config(base: Path, folder: Path, slurm: bool = False) -> Path:
    """The embedded default ``base`` with the queues and pools of the steps (``hybrid`` over this
    machine and the Slurm pool only when ``slurm``) and without per-job caps (a job of step 3
    asks for the whole machine), written to ``folder``."""
    cfg = yaml.safe_load(base.read_text())
    for queue in cfg["queues"].values():
        queue.pop("per_job", None)
    cfg["pools"]["gpu"] = GPU_POOL
    cfg["queues"].update({"etl": ETL_QUEUE, "web": WEB_QUEUE, "gpu": GPU_QUEUE})
    if slurm:
        cfg["pools"]["hpc"] = HPC_POOL
        cfg["queues"]["hybrid"] = HYBRID_QUEUE
    cfg["autoscaler"] = {**cfg.get("autoscaler", {}), "interval_seconds": 0.5}
    cfg["services"] = {**cfg.get("services", {}), **SERVICES}
    path = folder / "crossdock-demo.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path


def step(n: int, title: str, what: str) -> None:
    console.print(f"\n[bold cyan]step {n}: {title}[/] — {what}", highlight=False)


def skipped(rt, queue: str) -> bool:
    """Whether the config in force lacks ``queue`` (a config of the user's, CROSSDOCK_CONFIG): then
    it says so, and the step is skipped."""
    if queue in rt.config.queues:
        return False
    console.print(f"skipped: {rt.settings.config_path} has no {queue} queue (the demo's own config has one)",
                  highlight=False)
    return True


def wait_for(condition: Callable[[], object], timeout: float = STEP_SECONDS) -> object:
    deadline = time.monotonic() + timeout
    while not (value := condition()) and time.monotonic() < deadline:
        time.sleep(0.25)
    return value


def queue_nodes(rt, queue: str) -> list:
    """The nodes of ``queue``'s pools, as the scheduler last saw them."""
    from crossdock.service import load_inventory

    pools = set(rt.config.queues[queue].pools)
    return [n for n in load_inventory(rt) if n.pool in pools]


def run_demo(scale: int = 1, steps: Iterable[int] = ()) -> int:
    """The story's ``steps`` (all when empty), in order; 0 when each showed what it should."""
    from crossdock.cli import demo_steps
    from crossdock.cli.admin import _leave_redis
    from crossdock.settings import Settings
    from crossdock.workers.supervision import Service

    started = time.monotonic()
    workdir = Path(tempfile.mkdtemp(prefix="crossdock-demo-"))
    os.chdir(workdir)
    slurm = demo_steps.local_slurm()
    if not os.environ.get("CROSSDOCK_CONFIG"):
        if slurm.env_file is not None:  # the demo's processes all reach that cluster
            os.environ["CROSSDOCK_SLURM_ENV"] = str(slurm.env_file)
        config = demo_config(Settings.from_env().config_path, workdir, slurm=slurm.env_file is not None)
        os.environ["CROSSDOCK_CONFIG"] = str(config)
    from crossdock.cli.common import runtime
    from crossdock.client import Client

    rt = runtime()
    client = Client(rt)
    console.print(f"[bold]crossdock demo[/] — Redis {shown(rt.redis_url)}, config {rt.settings.config_path},"
                  f" outputs in {workdir}", highlight=False)
    svc = Service(rt, workers=2, logfile=workdir / "worker.log")
    story = {1: lambda: batch(rt, client, workdir, scale), 2: lambda: demo_steps.two_backends(rt, client, slurm),
             3: lambda: preemption(rt, client), 4: lambda: elastic(rt, client),
             5: lambda: demo_steps.traffic_step(rt, client), 6: lambda: demo_steps.gpu_placement(rt, client)}
    try:
        ok = True
        for n in sorted(set(steps) or story):
            ok &= story[n]()
        took = f" in {time.monotonic() - started:.0f} s"
        console.print(f"\n[bold green]demo finished as expected{took}[/]" if ok
                      else f"\n[bold red]demo: unexpected states{took}[/]", highlight=False)
        return 0 if ok else 1
    finally:
        svc.stop()
        console.print(f"demo stopped: workers and spawner stopped; {_leave_redis(rt, rt.settings.redis_url is None)}",
                      highlight=False)


def batch(rt, client, workdir: Path, scale: int) -> bool:
    step(1, "one queue", "a batch of sbatch jobs and a Python function, with priorities, an array and dependencies")
    has_gpu = any(n.gpus for n in queue_nodes(rt, "training"))
    ids: list[int] = []
    for _ in range(scale):
        (workdir / "tokenize.sh").write_text(PREPROCESS)
        ids += sbatch(client, [], PREPROCESS, "tokenize.sh")
        gpu = ["--gpus=1"] if has_gpu else []
        prep = sbatch(client, ["-J", "prepare-data", "-p", "preprocessing", "-c", "2", "--wrap",
                               "echo preparing; sleep 2"])
        train = sbatch(client, ["-J", "train-resnet", "-q", "training", "-p", "training", "-c", "2", "-t",
                                "10", *gpu, f"--dependency=afterok:{prep[0]}", "--wrap",
                                "echo training on GPUs [$CUDA_VISIBLE_DEVICES]; sleep 3"])
        evaluate = sbatch(client, ["-J", "evaluate", "-p", "preprocessing", "-d", f"afterok:{train[0]}",
                                   "--wrap", "echo evaluating; sleep 1"])
        serve = [sbatch(client, ["-J", f"serve-{i}", "-p", "inference", "-c", "1", "-t", "2", "--wrap",
                                 "echo serving; sleep 2"])[0] for i in range(2)]
        broken = sbatch(client, ["-J", "flaky-export", "-p", "preprocessing", "--wrap",
                                 "echo export failed >&2; exit 3"])
        after_broken = sbatch(client, ["-J", "publish", "-p", "preprocessing", "-d",
                                       f"afterok:{broken[0]}", "--wrap", "echo never runs"])
        fn = client.submit(word_count, "to be or not to be", queue="preprocessing", cpus=1, name="word-count")
        ids += prep + train + evaluate + serve + broken + after_broken + [fn.id]
    with Live(console=console, refresh_per_second=4, transient=not sys.stdout.isatty()) as live:
        while True:
            jobs = rt.store.get_many(ids)
            live.update(summary_table(jobs, "jobs"))
            if all(j.state.terminal for j in jobs):
                break
            time.sleep(0.25)
    console.print(summary_table(jobs, "crossdock demo: summary"))
    by_state: dict[str, int] = {}
    for j in jobs:
        by_state[j.state.value] = by_state.get(j.state.value, 0) + 1
    console.print(f"word-count result: {fn.result()}", highlight=False)
    console.print("states: " + ", ".join(f"{k} {v}" for k, v in sorted(by_state.items())), highlight=False)
    failed, cancelled = set(broken), set(after_broken)
    return all(j.state is (JobState.FAILED if j.id in failed else JobState.CANCELLED if j.id in cancelled
                           else JobState.COMPLETED) for j in jobs)


def preemption(rt, client) -> bool:
    cpus = max(n.cpu_milli for n in queue_nodes(rt, "training")) // 1000
    step(3, "preemption", f"a preemptible training job holds all {cpus} CPUs; an inference job needs them")
    train, = sbatch(client, ["-J", "train-long", "-p", "training", "-q", "training", "-c", str(cpus), "--wrap",
                             "echo epoch $SLURM_RESTART_COUNT; sleep 4"])
    wait_for(lambda: rt.store.get(train).state is JobState.RUNNING)
    urgent, = sbatch(client, ["-J", "serve-urgent", "-p", "inference", "-c", str(cpus), "--wrap",
                              "echo answering; sleep 1"])
    wait_for(lambda: all(j.state.terminal for j in rt.store.get_many([train, urgent])))
    t, u = rt.store.get_many([train, urgent])
    preempted = sum(1 for e in rt.store.events(train) if e.get("to") == JobState.PREEMPTED.value)
    console.print(f"train-long (job {train}, preemptible) was preempted {preempted} time(s) for serve-urgent"
                  f" (job {urgent}, {u.state.value}), requeued, and ended {t.state.value} on attempt {t.attempts}",
                  highlight=False)
    return t.state is JobState.COMPLETED and u.state is JobState.COMPLETED and t.attempts >= 2 and preempted >= 1


def elastic(rt, client) -> bool:
    step(4, "elastic queue", "8 jobs on the etl queue scale its fleet of local workers up, then back to zero")
    if skipped(rt, "etl"):
        return True
    since = time.time()
    ids = [sbatch(client, ["-J", f"etl-{i}", "-p", "etl", "-c", "1", "--wrap", "sleep 2"])[0] for i in range(8)]

    def scaled() -> list[dict]:
        return [e for e in rt.store.read_events(since=since) if e.get("event") == "fleet_scaled"]

    wait_for(lambda: all(j.state.terminal for j in rt.store.get_many(ids)))
    wait_for(lambda: any(e.get("to") == "0" for e in scaled()))
    for e in scaled():
        console.print(f"  fleet of etl: {e.get('from')} -> {e.get('to')} workers ({e.get('reason', '')})",
                      highlight=False)
    peak = max((int(e.get("to", 0)) for e in scaled()), default=0)
    done = sum(1 for j in rt.store.get_many(ids) if j.state is JobState.COMPLETED)
    console.print(f"etl: {done}/{len(ids)} jobs completed; the fleet peaked at {peak} workers and went back to"
                  f" {'0' if any(e.get('to') == '0' for e in scaled()) else 'more than 0'}", highlight=False)
    return done == len(ids) and peak >= 2
