"""``crossdock serve`` and ``crossdock services list|show|scale|update|delete``: thin commands over
:mod:`crossdock.serve` (checks, ownership) through the gateway (the socket in a multi-user
installation), and the leader's controller (the work)."""

from __future__ import annotations

import os
import shlex
import time
from typing import Any, List, Optional

import typer

from crossdock.cli.common import console, fail, gateway, print_json
from crossdock.queue.errors import CrossdockError

services_app = typer.Typer(help="Inference services: list, show, scale, update, delete.", no_args_is_help=True)


def _replicas(text: str) -> tuple[int, int]:
    """``--replicas``: ``N`` (fixed) or ``MIN:MAX``."""
    lo, sep, hi = text.partition(":")
    try:
        low, high = int(lo), int(hi) if sep else int(lo)
    except ValueError:
        fail(f"--replicas: invalid value {text!r}; give N or MIN:MAX, e.g. 2:8")
    return low, high


def _env(pairs: List[str]) -> dict[str, str]:
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            fail(f"--env: invalid value {pair!r}; give NAME=VALUE")
        out[key] = value
    return out


def _fields(command: Optional[str], args: List[str], image: Optional[str], port: Optional[int],
            ready_path: Optional[str], replicas: Optional[str], target_qps: Optional[float], p95_ms: Optional[float],
            cpus: Optional[int], mem: Optional[str], gpus: Optional[str], queue: Optional[str], pools: Optional[str],
            env: List[str], fallback_after: Optional[float], scale_down_window: Optional[float]) -> dict[str, Any]:
    """The spec fields the options give (those not given are absent)."""
    from crossdock.queue.errors import InvalidOption
    from crossdock.queue.sbatch_formats import parse_mem

    out: dict[str, Any] = {}
    if command is not None and args:
        fail("--command and a command after --: give one")
    if command is not None:
        try:
            out["command"] = shlex.split(command)
        except ValueError as exc:
            fail(f"--command: {exc}; quote it as a shell would")
    elif args:
        out["command"] = list(args)
    if replicas is not None:
        out["min_replicas"], out["max_replicas"] = _replicas(replicas)
    if mem is not None:
        try:
            out["mem_mib"] = parse_mem(mem)
        except InvalidOption as exc:
            fail(str(exc))
    if gpus is not None:
        kind, sep, count = gpus.rpartition(":")
        try:
            out["gpus"] = int(count)
        except ValueError:
            fail(f"--gpus: invalid value {gpus!r}; give N or TYPE:N, e.g. L4:1")
        if sep:
            out["gpu_type"] = kind
    if pools is not None:
        out["pools"] = [p for p in pools.split(",") if p]
    if env:
        out["env"] = _env(env)
    given = {"image": image, "port": port, "ready_path": ready_path, "target_qps": target_qps, "p95_ms": p95_ms,
             "cpus": cpus, "queue": queue, "fallback_after_seconds": fallback_after,
             "scale_down_stabilization_seconds": scale_down_window}
    out.update({k: v for k, v in given.items() if v is not None})
    return out


def _act(method: str, *args):
    """One call of the gateway (the socket in a multi-user installation, else this process's store)."""
    from crossdock.queue.errors import PermissionDenied

    try:
        return getattr(gateway(), method)(*args)
    except PermissionDenied as exc:
        fail(str(exc), code=1)
    except CrossdockError as exc:
        fail(str(exc))


_COMMAND = typer.Option(None, "--command", help="the server's command line (split as a shell would)")
_IMAGE = typer.Option(None, "--image", help="container image (Kubernetes pools)")
_PORT = typer.Option(None, "--port", help="the port the server listens on in its container (default 8000)")
_READY = typer.Option(None, "--ready-path", help="HTTP path answering 2xx once ready (default /healthz)")
_REPLICAS = typer.Option(None, "--replicas", help="N or MIN:MAX (default 1)")
_QPS = typer.Option(None, "--target-qps", help="requests per second per replica to scale by")
_P95 = typer.Option(None, "--p95-ms", help="95th percentile latency objective in ms (scales too)")
_CPUS = typer.Option(None, "--cpus", "-c", help="CPUs per replica")
_MEM = typer.Option(None, "--mem", help="memory per replica (sbatch's form: 4G, 512M)")
_GPUS = typer.Option(None, "--gpus", help="GPUs per replica: N or TYPE:N")
_QUEUE = typer.Option(None, "--queue", "-q", help="queue (its priority class and pools)")
_POOLS = typer.Option(None, "--pools", help="pools to use, preferred first (comma list; default the queue's)")
_ENV = typer.Option([], "--env", "-e", help="NAME=VALUE for the server's environment (repeatable)")
_FALLBACK = typer.Option(None, "--fallback-after", help="seconds pending before a replica may use the next pool")
_WINDOW = typer.Option(None, "--scale-down-window", help="seconds of lower traffic before replicas go (default 300)")


def serve(name: str = typer.Argument(..., help="service name (lowercase, digits, '-')"),
          args: Optional[List[str]] = typer.Argument(None, help="the server's command, after --"),
          command: Optional[str] = _COMMAND, image: Optional[str] = _IMAGE, port: Optional[int] = _PORT,
          ready_path: Optional[str] = _READY, replicas: Optional[str] = _REPLICAS,
          target_qps: Optional[float] = _QPS, p95_ms: Optional[float] = _P95, cpus: Optional[int] = _CPUS,
          mem: Optional[str] = _MEM, gpus: Optional[str] = _GPUS, queue: Optional[str] = _QUEUE,
          pools: Optional[str] = _POOLS, env: List[str] = _ENV, fallback_after: Optional[float] = _FALLBACK,
          scale_down_window: Optional[float] = _WINDOW,
          as_json: bool = typer.Option(False, "--json")) -> None:
    """Deploy an inference service (or update yours): replicas placed on the queue's pools in order,
    spread one per node, never preempted, scaled by traffic when a target is given."""
    from pydantic import ValidationError

    from crossdock.queue.models import validation_message
    from crossdock.queue.serving import ServiceSpec
    from crossdock.serve import with_deployer_path

    fields = _fields(command, args or [], image, port, ready_path, replicas, target_qps, p95_ms, cpus, mem, gpus,
                     queue, pools, env, fallback_after, scale_down_window)
    try:
        spec = ServiceSpec(name=name, **fields)
    except ValidationError as exc:
        fail(validation_message(exc))
    rec = _act("deploy", with_deployer_path(spec, os.environ))  # the replicas find programs on the deployer's PATH
    if as_json:
        print_json({"name": rec.spec.name, "generation": rec.generation, "state": rec.status.state.value})
        return
    console.print(f"service {rec.spec.name}: generation {rec.generation}, {rec.spec.min_replicas}–"
                  f"{rec.spec.max_replicas} replicas; `crossdock services show {rec.spec.name}` follows it",
                  highlight=False)


@services_app.command("list")
def list_(as_json: bool = typer.Option(False, "--json")) -> None:
    """Every service: state, replicas ready/desired, the traffic target, where it is reached."""
    from rich.table import Table

    records = _act("services")
    if as_json:
        print_json([{"name": r.spec.name, "owner": r.spec.user, "state": r.status.state.value, "ready": r.status.ready,
                     "replicas": r.status.replicas, "desired": r.status.desired, "override": r.override,
                     "generation": r.generation, "address": r.address} for r in records])
        return
    if not records:
        console.print("no services: `crossdock serve NAME -- COMMAND` deploys one", highlight=False)
        return
    table = Table(box=None, header_style="bold")
    for col in ("NAME", "OWNER", "STATE", "READY", "DESIRED", "MIN:MAX", "TARGET", "GEN", "ADDRESS"):
        table.add_column(col)
    for r in records:
        target = ", ".join(t for t in (f"{r.spec.target_qps:g} qps" if r.spec.target_qps else "",
                                       f"p95 {r.spec.p95_ms:g} ms" if r.spec.p95_ms else "") if t) or "-"
        desired = f"{r.status.desired}" + (" (by hand)" if r.override is not None else "")
        table.add_row(r.spec.name, r.spec.user or "-", r.status.state.value, f"{r.status.ready}/{r.status.replicas}",
                      desired, f"{r.spec.min_replicas}:{r.spec.max_replicas}", target, str(r.generation),
                      r.address or "-")
    console.print(table)


@services_app.command("show")
def show(name: str = typer.Argument(...), as_json: bool = typer.Option(False, "--json")) -> None:
    """One service: its status and why, its replicas (job, pool, node, ready), its last events and
    warnings (a CPU request below 0.8 of measured use: the throttling trap)."""
    from rich.table import Table

    view = _act("service", name)
    data = view.to_dict()
    if as_json:
        print_json(data)
        return
    rec, st = view.record, view.record.status
    console.print(f"[bold]{rec.spec.name}[/] ({rec.spec.user or 'admins'}) {st.state.value}: {st.ready} ready,"
                  f" {st.replicas} alive, {st.desired} desired, generation {rec.generation}"
                  + (f", {rec.address}" if rec.address else ""), highlight=False)
    console.print(f"  why: {st.message or '-'}", highlight=False, soft_wrap=True)
    for w in view.warnings:
        console.print(f"  [yellow]warning:[/] {w}", highlight=False, soft_wrap=True)
    table = Table(box=None, header_style="bold")
    for col in ("REPLICA", "JOB", "GEN", "STATE", "POOL", "NODE", "READY", "ENDPOINT"):
        table.add_column(col)
    for r in data["replicas"]:
        state = r["state"] + (" draining" if r["draining"] else "")
        table.add_row(str(r["replica"]), str(r["job_id"]), str(r["generation"]), state, r["pool"] or ",".join(r["pools"]),
                      ",".join(r["nodes"]) or "-", "yes" if r["ready"] else "no", r["endpoint"] or "-")
    console.print(table)
    now = time.time()
    for e in view.events[-10:]:
        ago = max(now - float(e.get("time", now)), 0)
        console.print(f"  {ago:>5.0f}s ago  {e.get('event')}: {e.get('message', '')}", highlight=False, soft_wrap=True)


@services_app.command("scale")
def scale(name: str = typer.Argument(...), replicas: Optional[int] = typer.Argument(None, help="replicas to pin"),
          auto: bool = typer.Option(False, "--auto", help="back to the autoscaler")) -> None:
    """Pin a service's replicas by hand (wins over the autoscaler), or hand it back with --auto."""
    if (replicas is None) == (not auto):
        fail("scale: give a replica count N, or --auto")
    rec = _act("service_scale", name, None if auto else replicas)
    console.print(f"service {name}: " + ("autoscaled" if rec.override is None else f"{rec.override} replicas by hand"),
                  highlight=False)


@services_app.command("update")
def update(name: str = typer.Argument(...),
           args: Optional[List[str]] = typer.Argument(None, help="a new command, after --"),
           command: Optional[str] = _COMMAND, image: Optional[str] = _IMAGE, port: Optional[int] = _PORT,
           ready_path: Optional[str] = _READY, replicas: Optional[str] = _REPLICAS,
           target_qps: Optional[float] = _QPS, p95_ms: Optional[float] = _P95, cpus: Optional[int] = _CPUS,
           mem: Optional[str] = _MEM, gpus: Optional[str] = _GPUS, queue: Optional[str] = _QUEUE,
           pools: Optional[str] = _POOLS, env: List[str] = _ENV, fallback_after: Optional[float] = _FALLBACK,
           scale_down_window: Optional[float] = _WINDOW) -> None:
    """Change a service: a new command, image, resources or env roll its replicas one at a time
    (surge 1, each new one ready before an old one drains); bounds and targets apply at once."""
    changes = _fields(command, args or [], image, port, ready_path, replicas, target_qps, p95_ms, cpus, mem, gpus,
                      queue, pools, env, fallback_after, scale_down_window)
    if not changes:
        fail("update: nothing to change; give options such as --image, --cpus, --replicas or a command after --")
    from crossdock.serve import with_deployer_path_changes

    before = _act("service", name).record
    rec = _act("service_update", name, with_deployer_path_changes(before.spec, changes, os.environ))
    rolled = "rolling update to generation" if rec.generation != before.generation else "generation stays"
    console.print(f"service {name}: {rolled} {rec.generation}", highlight=False)


@services_app.command("delete")
def delete(name: str = typer.Argument(...)) -> None:
    """Delete a service: every replica drains (its requests finish), then stops; then it is gone."""
    _act("service_delete", name)
    console.print(f"service {name}: deleting (replicas drain, then stop)", highlight=False)
