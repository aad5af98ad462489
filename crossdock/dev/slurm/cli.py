"""``python -m crossdock.dev.slurm up|down|status`` (also ``crossdock dev slurm``)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import typer

from crossdock.dev.slurm.cluster import down, status, up
from crossdock.dev.slurm.layout import ClusterError

app = typer.Typer(help="A local multi-node Slurm 22.05 cluster (4 nodes, fake GPUs) for tests and CI.")

DirOption = typer.Option(None, "--dir", help="State directory [default: $CROSSDOCK_STATE_DIR/slurm]")


@app.command("up")
def up_command(
    dir: Path | None = DirOption,
    no_rest: bool = typer.Option(False, "--no-rest", help="Do not start slurmrestd."),
) -> None:
    """Install (if needed) and start the cluster; print how to load its environment."""
    try:
        env_file = up(dir, with_rest=not no_rest)
    except ClusterError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None
    typer.echo(f"export $(cat {env_file})")


@app.command("down")
def down_command(dir: Path | None = DirOption) -> None:
    """Cancel every job and stop every daemon."""
    stopped = down(dir)
    typer.echo(f"stopped: {', '.join(stopped) or 'nothing was running'}")


@app.command("status")
def status_command(
    dir: Path | None = DirOption,
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Show daemons and nodes; exit code 0 when up, 1 otherwise."""
    current = status(dir)
    if as_json:
        typer.echo(json.dumps(current, indent=2))
    else:
        typer.echo(f"{current['dir']}: {'up' if current['up'] else 'down'}")
        for name, info in current["daemons"].items():
            typer.echo(f"  {name:<20} {info['pid'] or '-'}")
        for name, state in current["nodes"].items():
            typer.echo(f"  node {name:<15} {state}")
    raise typer.Exit(0 if current["up"] else 1)


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    app()
