"""The crossdock command line: thin commands over the service functions."""

from __future__ import annotations

import typer

from crossdock.cli import admin, jobs

app = typer.Typer(help="crossdock: one batch queue in front of Slurm, Kubernetes and this machine.",
                  no_args_is_help=True, pretty_exceptions_enable=False)

app.command(context_settings=jobs.RAW, add_help_option=False)(jobs.submit)
app.command("queue")(jobs.queue)
app.command()(jobs.show)
app.command()(jobs.cancel)
app.command()(jobs.hold)
app.command()(jobs.release)
app.command()(jobs.requeue)
app.command()(jobs.logs)
app.command()(jobs.wait)
app.command()(admin.info)
app.command()(admin.up)
app.add_typer(admin.config_app, name="config")


@app.command()
def demo(jobs_scale: int = typer.Option(1, "--scale", help="multiply the batch size")) -> None:
    """Run a realistic batch end to end on this machine and print a summary table."""
    from crossdock.cli.demo import run_demo

    raise typer.Exit(run_demo(jobs_scale))


dev_app = typer.Typer(help="Local clusters for development and CI.", no_args_is_help=True)
app.add_typer(dev_app, name="dev")


def _mount_optional() -> None:
    """Sub-apps whose modules pull optional dependencies are mounted when importable."""
    from crossdock.dev import k8s, slurm

    dev_app.add_typer(slurm.app, name="slurm")
    dev_app.add_typer(k8s.app, name="k8s")
    try:
        from crossdock.cli import simulate
    except ImportError:
        return
    app.add_typer(simulate.app, name="simulate")


_mount_optional()


def main() -> None:
    app()


if __name__ == "__main__":
    main()
