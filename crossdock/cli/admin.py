"""Admin commands: info (sinfo), config check, and up (run the whole service)."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import typer

from crossdock.cli.common import console, fail, one_line, print_json, runtime
from crossdock.cli.render import info_table, node_rows

config_app = typer.Typer(help="Admin configuration files.", no_args_is_help=True)


@config_app.command("check")
def config_check(path: Path = typer.Argument(..., help="a crossdock YAML config")) -> None:
    """Validate a config: every error with its path, then warnings about risky settings."""
    from datetime import datetime, timezone

    from crossdock.backends.local import gpus
    from crossdock.backends.local.backend import local_nodes
    from crossdock.backends.registry import catalog
    from crossdock.configfile import load_config
    from crossdock.queue.config import lint
    from crossdock.queue.errors import ConfigError
    from crossdock.queue.probe import dry_cycle

    try:
        cfg = load_config(path, catalog())  # what `up` loads, with the same backend catalog
        errors = dry_cycle(cfg, local_nodes(cfg, gpus.discover()), datetime.now(timezone.utc))
    except ConfigError as exc:
        errors = exc.errors
    if errors:
        for line in errors:  # file-level errors (unreadable, broken YAML) name the file already
            typer.echo(one_line(line if line.startswith(f"{path}:") else f"{path}: {line}"), err=True)
        raise typer.Exit(2)
    warnings = lint(cfg)
    for w in warnings:
        typer.echo(one_line(f"{path}: warning: {w}"), err=True)
    typer.echo(f"{path}: OK ({len(cfg.priority_classes)} priority classes, {len(cfg.pools)} pools,"
               f" {len(cfg.queues)} queues, {len(warnings)} warnings)")


def info(as_json: bool = typer.Option(False, "--json")) -> None:
    """Pools and nodes with free CPUs, memory and GPUs by model, like sinfo."""
    from crossdock.service import load_inventory

    rt = runtime()
    used: dict[str, tuple[int, int, set[str]]] = {}
    for j in rt.store.get_many(rt.store.active_ids()):
        for node in j.nodes:
            cpu, mem, gpus = used.get(node, (0, 0, set()))
            used[node] = (cpu + (j.alloc_cpu_milli or j.spec.cpus_per_node() * 1000), mem + j.alloc_mem_mib,
                          gpus | {g for g in j.gpu_ids if g.startswith(node + ":")})
    rows = node_rows(load_inventory(rt), used)
    if as_json:
        print_json(rows)
    else:
        console.print(info_table(rows))


def worker_queues(rt) -> str:
    from crossdock.workers.app import queue_for

    kinds = sorted({p.backend for p in rt.config.pools.values()} | {"local"})
    return ",".join(queue_for(k) for k in kinds)


def start_worker(rt, concurrency: int, logfile: Path | None = None, loglevel: str = "WARNING") -> subprocess.Popen:
    """A Celery worker process for every backend queue the config uses, in its own process group."""
    argv = [sys.executable, "-m", "celery", "-A", "crossdock.workers.worker", "worker", "-Q", worker_queues(rt),
            "-c", str(concurrency), "-P", "prefork", "--without-gossip", "--without-mingle", "--loglevel", loglevel]
    out = open(logfile, "ab") if logfile else None
    return subprocess.Popen(argv, env=rt.child_env(), stdout=out, stderr=out, start_new_session=True)


def stop_worker(proc: subprocess.Popen, timeout: float = 20) -> None:
    if proc.poll() is not None:
        return
    os.killpg(proc.pid, signal.SIGTERM)  # Celery's warm shutdown: finish running tasks
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


class Service:
    """The scheduler loop in a thread plus a Celery worker process, stopped cleanly together."""

    def __init__(self, rt, workers: int = 2, scheduler: bool = True, logfile: Path | None = None):
        from crossdock.workers.app import celery_sender, make_app
        from crossdock.workers.leader import Scheduler

        self.rt = rt
        self.stop_event = threading.Event()
        self.worker = start_worker(rt, workers, logfile) if workers else None
        self.thread = None
        if scheduler:
            sched = Scheduler(rt, celery_sender(make_app(rt.redis_url)))
            self.thread = threading.Thread(target=sched.run, args=(self.stop_event,), daemon=True, name="scheduler")
            self.thread.start()

    def stop(self) -> None:
        self.stop_event.set()
        if self.thread:
            self.thread.join(10)
        if self.worker:
            stop_worker(self.worker)


def up(workers: int = typer.Option(2, "--workers", "-w", help="Celery worker processes (0: scheduler only)"),
       scheduler: bool = typer.Option(True, "--scheduler/--no-scheduler", help="run the scheduling loop here"),
       verbose: bool = typer.Option(False, "--verbose", "-v")) -> None:
    """Run the scheduler and workers in the foreground; Ctrl-C stops them cleanly."""
    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO, format="%(asctime)s %(name)s %(message)s")
    rt = runtime()
    try:
        rt.config
    except Exception as exc:  # ConfigError, missing file
        fail(f"config {rt.settings.config_path}: {exc}")
    svc = Service(rt, workers, scheduler)
    console.print(f"crossdock up: redis {rt.redis_url}, config {rt.settings.config_path}, queues {worker_queues(rt)}."
                  " Ctrl-C to stop.", highlight=False)
    done = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: done.set())
    try:
        while not done.wait(1):
            if svc.worker is not None and svc.worker.poll() is not None:
                fail(f"the Celery worker exited with status {svc.worker.returncode}", code=1)
    finally:
        console.print("stopping: scheduler, then workers (running jobs keep running under their supervisors)")
        svc.stop()
