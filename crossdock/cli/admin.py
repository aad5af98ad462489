"""Admin commands: info (sinfo), config check, and up (run the whole service)."""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import time
from pathlib import Path

import typer

from crossdock.cli.common import console, fail, gateway, one_line, print_json, runtime
from crossdock.cli.liveconfig import config_apply, config_show
from crossdock.cli.render import info_table, node_rows
from crossdock.queue.errors import CrossdockError, StoreUnavailable

config_app = typer.Typer(help="Admin configuration files.", no_args_is_help=True)
config_app.command("apply")(config_apply)
config_app.command("show")(config_show)


@config_app.command("check")
def config_check(path: Path = typer.Argument(..., help="a crossdock YAML config")) -> None:
    """Validate a config: every error with its path, then warnings about risky settings."""
    from crossdock.queue.errors import ConfigError
    from crossdock.workers.liveconfig import validate

    try:
        checked = validate(path)  # what `up` loads, with the same backend catalog, and a dry cycle
        errors: list[str] = []
    except ConfigError as exc:
        errors = exc.errors
    if errors:
        for line in errors:  # file-level errors (unreadable, broken YAML) name the file already
            typer.echo(one_line(line if line.startswith(f"{path}:") else f"{path}: {line}"), err=True)
        raise typer.Exit(2)
    cfg = checked.config
    from crossdock.runtime import Runtime
    from crossdock.serve import declared_warnings

    warnings = checked.warnings + declared_warnings(Runtime.from_env(start_redis=False), cfg)
    for w in warnings:
        typer.echo(one_line(f"{path}: warning: {w}"), err=True)
    typer.echo(f"{path}: OK ({len(cfg.priority_classes)} priority classes, {len(cfg.pools)} pools,"
               f" {len(cfg.queues)} queues, {len(warnings)} warnings)")


def info(as_json: bool = typer.Option(False, "--json")) -> None:
    """Pools and nodes with free CPUs, memory and GPUs by model, like sinfo."""
    gw = gateway()
    used: dict[str, tuple[int, int, set[str]]] = {}
    for j in gw.jobs(gw.ids("queued")):
        for node in j.nodes:
            cpu, mem, gpus = used.get(node, (0, 0, set()))
            used[node] = (cpu + (j.alloc_cpu_milli or j.spec.cpus_per_node() * 1000), mem + j.alloc_mem_mib,
                          gpus | {g for g in j.gpu_ids if g.startswith(node + ":")})
    rows = node_rows(gw.inventory(), used)
    if as_json:
        print_json(rows)
    else:
        console.print(info_table(rows))


def up(workers: int = typer.Option(2, "--workers", "-w", help="Celery worker processes (0: scheduler only)"),
       scheduler: bool = typer.Option(True, "--scheduler/--no-scheduler", help="run the scheduling loop here"),
       multi_user: bool = typer.Option(False, "--multi-user", help="serve users through a Unix socket"
                                       " (CROSSDOCK_SOCKET, default /run/crossdock/crossdock.sock) that knows"
                                       " each caller from the kernel; only the service reaches Redis"),
       insecure_shared_redis: bool = typer.Option(False, "--insecure-shared-redis",
                                                  help="run as root on an external Redis that others could write"
                                                  " (no password, or a socket open to all): anyone who writes it"
                                                  " can change what jobs do; warned on every start"),
       verbose: bool = typer.Option(False, "--verbose", "-v")) -> None:
    """Run the scheduler and workers in the foreground and keep them running; Ctrl-C or SIGTERM
    stops them within seconds (running jobs keep running under their supervisors)."""
    from crossdock.backends.redis_store.embedded import shown
    from crossdock.settings import Settings, serving_socket
    from crossdock.workers.supervision import Service, UpLock, worker_queues

    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO, format="%(asctime)s %(name)s %(message)s")
    settings = Settings.from_env()
    lock = UpLock(settings.state_dir)
    try:
        lock.acquire()  # before anything starts: a second up on this state starts nothing
    except CrossdockError as exc:
        fail(str(exc), code=1)
    from crossdock import observe

    observe.enable()  # before anything builds the store (reading the live config does): its round trips count
    rt = runtime()
    if settings.redis_url is not None and os.geteuid() == 0:
        _refuse_shared_redis(rt.redis_url, insecure_shared_redis, lock)
    try:
        rt.config
    except Exception as exc:  # ConfigError, missing file
        fail(f"config {rt.settings.config_path}: {exc}")
    done = threading.Event()
    asked: list[float] = []  # when the stop was asked: "stopped in" counts from there

    def stop_asked(*_) -> None:
        asked.append(time.monotonic())
        done.set()

    for sig in (signal.SIGINT, signal.SIGTERM):  # before anything starts, so that a stop is always clean
        signal.signal(sig, stop_asked)
    parts = [*_metrics_part(rt)]
    if scheduler:  # the file is the leader's from now: stored at once, reloaded on SIGHUP and on change
        from crossdock.workers.liveconfig import Watcher

        watcher = Watcher(rt, rt.settings.config_path)
        if not watcher.reload() and watcher.last_result.startswith(("refused", "cannot")):
            lock.release()
            fail(f"config {rt.settings.config_path}: {watcher.last_result}")
        if watcher.behind:  # the config applied from elsewhere stays in force
            typer.echo(f"crossdock up: warning: config {watcher.behind}", err=True)
        signal.signal(signal.SIGHUP, lambda *_: watcher.request())
        parts.append(watcher)
    from crossdock.gateway.server import SocketPart

    if multi_user:
        parts.append(SocketPart(serving_socket(), rt))
    elif settings.socket is None:  # the owner's CLI, through its fast path (crossdock.cli.thin)
        from crossdock.cli import thin

        parts.append(SocketPart(Path(thin.user_socket()), rt, private=True))
    try:
        svc = Service(rt, workers, scheduler, embedded_redis=settings.redis_url is None, lock=lock, parts=parts)
    except CrossdockError as exc:  # the socket is another service's
        lock.release()
        fail(str(exc), code=1)
    serving = f", users through {serving_socket()}" if multi_user else ""
    console.print(f"crossdock up: redis {shown(rt.redis_url)}, config {rt.settings.config_path}, queues"
                  f" {worker_queues(rt)}{serving}. Ctrl-C to stop; `crossdock health` for each part's state.",
                  highlight=False)
    try:
        gave_up = svc.supervise(done)
    finally:
        console.print("stopping: the scheduler and the worker (running jobs keep running under their supervisors)")
        started = asked[0] if asked else time.monotonic()
        svc.stop()
        redis_line = _leave_redis(rt, svc.embedded_redis)
        lock.release()
    if gave_up:
        fail(f"{gave_up} (stopped in {time.monotonic() - started:.1f}s; {redis_line})", code=1)
    console.print(f"crossdock up: stopped in {time.monotonic() - started:.1f}s; {redis_line}", highlight=False)


def _refuse_shared_redis(url: str, insecure: bool, lock) -> None:
    """Root's service on an external Redis that others could write: refused, or (told
    ``--insecure-shared-redis``) a warning on every start."""
    from crossdock.backends.redis_store.exposure import exposure

    problems = exposure(url)
    if not problems:
        return
    why = "; ".join(problems)
    if not insecure:
        lock.release()
        fail(f"CROSSDOCK_REDIS_URL: {why}; anyone who can write it can change what root's service runs. Give it"
             " a password (requirepass or an ACL user, named in the URL) and a socket only the service may"
             " write, or pass --insecure-shared-redis to run anyway", code=1)
    sys.stderr.write(f"crossdock: warning: --insecure-shared-redis: {why}; anyone who can write it can change"
                     " what root's service runs\n")


def _metrics_part(rt) -> list:
    """The Prometheus exporter of this ``up`` (the config's ``metrics`` block or
    CROSSDOCK_METRICS_ADDRESS); none when disabled."""
    from crossdock.observe.exporter import BadAddress, MetricsPart, resolve

    try:
        base = resolve(rt.config.metrics)
    except BadAddress as exc:
        fail(str(exc))
    if base is None:
        return []
    return [MetricsPart(base, rt.settings.state_dir)]


def _leave_redis(rt, embedded_redis: bool) -> str:
    """Stop the embedded Redis unless jobs are placed: their supervisors (local jobs) report their
    end to it, and a job left SCHEDULED or RUNNING is followed again by the next ``up``. Every
    command starts it again on demand."""
    from crossdock.backends.redis_store import embedded
    from crossdock.backends.redis_store.store import probe

    if not embedded_redis:
        return f"Redis {embedded.shown(rt.redis_url)} is not crossdock's to stop"
    try:
        if probe(rt.redis_url) is not None:  # a quick no: the store's own retries take seconds
            return "the embedded Redis is not answering"
        placed = len(rt.store.active_ids())
    except StoreUnavailable:
        return "the embedded Redis is not answering"
    if placed:
        return (f"embedded Redis kept running (pid {embedded.pid(rt.settings.state_dir)}) on purpose: {placed} placed"
                " jobs report their end to it")
    embedded.stop(rt.settings.state_dir, timeout=5)
    return "embedded Redis stopped (no job is placed)"


def health(as_json: bool = typer.Option(False, "--json")) -> None:
    """Each part's state: the scheduler loop, the workers, Redis, the backends. Exit 0 when
    healthy, 1 when degraded or down."""
    report = _health()
    if as_json:
        print_json(report)
    else:
        for part in report["parts"]:
            colour = "green" if part["ok"] else "red"
            console.print(f"[{colour}]{'ok' if part['ok'] else 'FAIL':4}[/] {part['name']:<22} {part['detail']}",
                          highlight=False)
        console.print(f"crossdock: {report['status']}", highlight=False)
    raise typer.Exit(0 if report["status"] == "healthy" else 1)


def _health() -> dict:
    """The service's own report: through its socket in a multi-user installation (the service
    reads its state dir and store, which a user cannot), else collected here."""
    from crossdock.gateway.wire import ServiceUnavailable
    from crossdock.settings import Settings

    settings = Settings.from_env()
    if settings.socket is None:
        from crossdock.workers.health import collect

        return collect()
    from crossdock.gateway.remote import Remote

    try:
        return Remote(settings.socket).health()
    except ServiceUnavailable as exc:
        return {"status": "down", "parts": [{"name": "socket", "ok": False, "detail": str(exc)}], "up": None}


def __getattr__(name: str):
    """``start_worker``, ``stop_worker``, ``worker_queues`` and ``Service`` live in
    crossdock.workers.supervision now; imported on first use, so that every command does not pay
    for Celery."""
    if name in ("start_worker", "stop_worker", "worker_queues", "Service"):
        from crossdock.workers import supervision

        return getattr(supervision, name)
    raise AttributeError(name)
