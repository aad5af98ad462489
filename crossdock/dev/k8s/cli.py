"""``python -m crossdock.dev.k8s build|up|down|status|kubeconfig|node`` (also ``crossdock dev k8s``)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import typer

from crossdock.dev.k8s.build import COMPONENTS, build
from crossdock.dev.k8s.controlplane import down, pin, status, up
from crossdock.dev.k8s.errors import ControlPlaneError
from crossdock.dev.k8s.state import kubeconfig_path, state_dir_of

app = typer.Typer(help="Local Kubernetes control plane (etcd, kube-apiserver, "
                       "kube-controller-manager, kube-scheduler, kwok; Karpenter beside it) on loopback.",
                  no_args_is_help=True)

_STATE_OPT = typer.Option(None, "--state-dir", help="State directory (default: $CROSSDOCK_K8S_STATE_DIR "
                                                     "or ~/.cache/crossdock/k8s/state).")


@app.command("build")
def _cli_build(force: bool = typer.Option(False, "--force", help="Rebuild even when present."),
               kubelet: bool = typer.Option(False, "--kubelet", help="Also the kubelet (the real node's).")) -> None:
    """Build and cache the pinned binaries (skips what is already built)."""
    try:
        typer.echo(build(force=force, kubelet=kubelet))
    except ControlPlaneError as err:
        typer.echo(f"error: {err}", err=True)
        raise typer.Exit(1) from err


@app.command("up")
def _cli_up(state_dir: Path | None = _STATE_OPT,
            timeout: float = typer.Option(180.0, help="Seconds to wait for readiness.")) -> None:
    """Start the control plane (idempotent) and print the kubeconfig path."""
    started = time.monotonic()
    try:
        path = up(state_dir, timeout=timeout)
        pin(state_dir_of(state_dir))
    except ControlPlaneError as err:
        typer.echo(f"error: {err}", err=True)
        raise typer.Exit(1) from err
    typer.echo(f"ready in {time.monotonic() - started:.1f}s", err=True)
    typer.echo(path)


@app.command("down")
def _cli_down(state_dir: Path | None = _STATE_OPT) -> None:
    """Stop every component by its recorded PID (idempotent)."""
    down(state_dir)


@app.command("status")
def _cli_status(state_dir: Path | None = _STATE_OPT,
                as_json: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """Show PIDs and readiness; exit 1 unless everything runs."""
    st = status(state_dir)
    if as_json:
        typer.echo(json.dumps(st.to_dict(), indent=2))
    else:
        typer.echo(f"server:     {st.server or '-'}  ready={st.ready}")
        typer.echo(f"kubeconfig: {st.kubeconfig}")
        for name in COMPONENTS:
            info = st.processes.get(name)
            typer.echo(f"  {name:<24} " + (f"pid {info['pid']:<8} alive={info['alive']}" if info else "-"))
        for name, info in st.addons.items():
            typer.echo(f"  {name:<24} pid {info['pid']:<8} alive={info['alive']}")
    raise typer.Exit(0 if st.running else 1)


@app.command("kubeconfig")
def _cli_kubeconfig(state_dir: Path | None = _STATE_OPT) -> None:
    """Print the admin kubeconfig path."""
    typer.echo(kubeconfig_path(state_dir))


@app.command("node")
def _cli_node(action: str = typer.Argument(..., help="build, up, down or status"), state_dir: Path | None = _STATE_OPT,
              timeout: float = typer.Option(180.0, help="Seconds to wait for the node to be Ready.")) -> None:
    """One real node (kubelet, containerd, runc) in the running plane: build (the kubelet and the
    images, cached), up, down, status."""
    from crossdock.dev.k8s import realnode

    try:
        if action == "build":
            realnode.prepare()
            typer.echo(f"kubelet and images ready in {realnode.image_cache()}")
        elif action == "up":
            node = realnode.up(state_dir, timeout=timeout)
            typer.echo(f"node {node.name} Ready; image {node.image}")
        elif action == "down":
            realnode.down(state_dir)
        elif action == "status":
            st = realnode.status()
            typer.echo(" ".join(f"{k}={'running' if v else 'stopped'}" for k, v in st.items()))
            raise typer.Exit(0 if all(st.values()) else 1)
        else:
            typer.echo(f"error: node action {action!r}: use build, up, down or status", err=True)
            raise typer.Exit(2)
    except ControlPlaneError as err:
        typer.echo(f"error: {err}", err=True)
        raise typer.Exit(1) from err


def main() -> None:
    app()
