"""`crossdock demo`: a realistic batch through the real Celery/Redis path on this machine.

Training, inference and preprocessing jobs with their priority classes, an sbatch array with a
throttle, a dependency chain, a job that fails on purpose (and the job that depended on it,
cancelled because its dependency can never be satisfied) and one Python-function job.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

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


def _sbatch(client, argv: list[str], script: str | None = None, path: str | None = None) -> list[int]:
    from crossdock.queue.sbatch import build_spec
    from crossdock.service import submit

    sub = build_spec(argv, script, path)
    spec = sub.spec.model_copy(update={"user": client.user, "workdir": os.getcwd()})
    return [j.id for j in submit(client.runtime, [spec])]


def run_demo(scale: int = 1) -> int:
    from crossdock.workers.supervision import Service
    from crossdock.cli.common import runtime
    from crossdock.client import Client
    from crossdock.service import load_inventory

    rt = runtime()
    client = Client(rt)
    workdir = Path(tempfile.mkdtemp(prefix="crossdock-demo-"))
    os.chdir(workdir)
    has_gpu = any(n.gpus for n in load_inventory(rt))
    console.print(f"[bold]crossdock demo[/] — Redis {shown(rt.redis_url)}, config {rt.settings.config_path},"
                  f" outputs in {workdir}", highlight=False)
    svc = Service(rt, workers=2, logfile=workdir / "worker.log")
    try:
        ids: list[int] = []
        for _ in range(scale):
            (workdir / "tokenize.sh").write_text(PREPROCESS)
            ids += _sbatch(client, [], PREPROCESS, "tokenize.sh")
            gpu = ["--gpus=1"] if has_gpu else []
            prep = _sbatch(client, ["-J", "prepare-data", "-p", "preprocessing", "-c", "2", "--wrap",
                                    "echo preparing; sleep 2"])
            train = _sbatch(client, ["-J", "train-resnet", "-q", "training", "-p", "training", "-c", "2", "-t",
                                     "10", *gpu, f"--dependency=afterok:{prep[0]}", "--wrap",
                                     "echo training on GPUs [$CUDA_VISIBLE_DEVICES]; sleep 3"])
            evaluate = _sbatch(client, ["-J", "evaluate", "-p", "preprocessing", "-d", f"afterok:{train[0]}",
                                        "--wrap", "echo evaluating; sleep 1"])
            serve = [_sbatch(client, ["-J", f"serve-{i}", "-p", "inference", "-c", "1", "-t", "2", "--wrap",
                                      "echo serving; sleep 2"])[0] for i in range(2)]
            broken = _sbatch(client, ["-J", "flaky-export", "-p", "preprocessing", "--wrap",
                                      "echo export failed >&2; exit 3"])
            after_broken = _sbatch(client, ["-J", "publish", "-p", "preprocessing", "-d",
                                            f"afterok:{broken[0]}", "--wrap", "echo never runs"])
            fn = client.submit(word_count, "to be or not to be", queue="preprocessing", cpus=1, name="word-count")
            ids += prep + train + evaluate + serve + broken + after_broken + [fn.id]
        expected = {JobState.COMPLETED: set(ids) - set(broken) - set(after_broken)}
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
        ok = all(j.state is JobState.COMPLETED for j in jobs if j.id in expected[JobState.COMPLETED])
        ok &= rt.store.get(broken[0]).state is JobState.FAILED
        ok &= rt.store.get(after_broken[0]).state is JobState.CANCELLED
        console.print("[bold green]demo finished as expected[/]" if ok else "[bold red]demo: unexpected states[/]")
        return 0 if ok else 1
    finally:
        svc.stop()
