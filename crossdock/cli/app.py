"""The crossdock command line as a Typer app: thin commands over the service functions
(``crossdock.cli.main`` is the entry point; ``submit`` skips this module there)."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator, MutableMapping

import click
import typer
import typer.core
from typer.core import TyperGroup
from typer.main import get_group

from crossdock.cli import admin, api, autoscale, deschedule, events, history, jobs, keys, metrics, services, views, why
from crossdock.cli.common import one_line
from crossdock.queue.errors import StoreUnavailable

# Typer vendors its own click (typer._click) in recent versions; older ones use click itself.
_CLICK = getattr(typer.core, "_click", click).exceptions
_NO_ARGS = getattr(_CLICK, "NoArgsIsHelpError", ())


class _OneLineErrors(TyperGroup):
    """Click's usage errors (an unknown option, a missing argument) as every other error of the
    CLI: one line on stderr and exit status 2, rather than click's boxed usage text."""

    def main(self, *args, standalone_mode: bool = True, **kwargs):
        if not standalone_mode:
            return super().main(*args, standalone_mode=False, **kwargs)
        try:
            code = super().main(*args, standalone_mode=False, **kwargs)
        except _NO_ARGS as exc:  # a bare `crossdock` or `crossdock config`: the help, as before
            exc.show()
            sys.exit(exc.exit_code)
        except _CLICK.ClickException as exc:
            command = f"{exc.ctx.command_path}: " if getattr(exc, "ctx", None) else ""
            click.echo(f"crossdock: error: {one_line(command + exc.format_message())}", err=True)
            sys.exit(exc.exit_code)
        except typer.Abort:
            click.echo("crossdock: aborted", err=True)
            sys.exit(1)
        except StoreUnavailable as exc:  # whatever the command was reading: one line, not a traceback
            click.echo(f"crossdock: error: {one_line(str(exc))}", err=True)
            sys.exit(1)
        sys.exit(code if isinstance(code, int) else 0)


# -h is --help wherever a command does not give -h a meaning of its own (queue -h is squeue's
# --noheader, history -n... as in Slurm's tools: click leaves a command's own option alone).
app = typer.Typer(cls=_OneLineErrors, help="crossdock: one batch queue in front of Slurm, Kubernetes and this machine.",
                  no_args_is_help=True, pretty_exceptions_enable=False,
                  context_settings={"help_option_names": ["-h", "--help"]})


def _version(shown: bool) -> None:
    if shown:
        from crossdock import __version__

        click.echo(f"crossdock {__version__}")
        raise typer.Exit(0)


@app.callback()
def _main(version: bool = typer.Option(False, "--version", "-V", callback=_version, is_eager=True,
                                       help="print crossdock's version and exit (as sbatch -V)")) -> None:
    """crossdock: one batch queue in front of Slurm, Kubernetes and this machine."""

app.command(context_settings=jobs.RAW, add_help_option=False)(jobs.submit)
app.command("queue")(views.queue)
app.command()(views.show)
app.command()(views.priority)
app.command()(why.why)
app.command()(history.history)
app.command()(jobs.cancel)
app.command()(jobs.hold)
app.command()(jobs.release)
app.command()(jobs.requeue)
app.command()(jobs.update)
app.command()(jobs.logs)
app.command()(jobs.wait)
app.command()(admin.info)
app.command()(admin.up)
app.command()(admin.health)
app.command()(autoscale.autoscale)
app.command()(deschedule.deschedule)
app.command("issue-key")(keys.issue_key)
app.command("metrics-adapter")(metrics.metrics_adapter)
app.command()(events.events)
app.add_typer(admin.config_app, name="config")
app.command()(services.serve)
app.add_typer(services.services_app, name="services")
app.command("api")(api.api)
app.add_typer(api.tokens_app, name="tokens")


@app.command()
def demo(jobs_scale: int = typer.Option(1, "--scale", help="multiply the batch size"),
         steps: list[int] = typer.Option([], "--step", min=1, max=6,
                                          help="run only this step of the story (1-6; repeat for more)")) -> None:
    """Run a realistic batch end to end on this machine and print a summary table."""
    from crossdock.cli.demo import run_demo

    raise typer.Exit(run_demo(jobs_scale, steps))


class _LazyCommands(MutableMapping[str, click.Command]):
    """A group's commands, where the named sub-apps (``"module:attribute"``) are imported the
    first time one of them is looked up: to run it, or for help that lists them. Each is a
    Typer app mounted as a group (``get_group``, as ``add_typer`` would)."""

    def __init__(self, commands: MutableMapping[str, click.Command], lazy: dict[str, str]) -> None:
        self._commands = dict(commands)
        self._lazy = dict(lazy)

    def __getitem__(self, name: str) -> click.Command:
        if name not in self._commands and name in self._lazy:
            module, _, attribute = self._lazy[name].partition(":")
            command = get_group(getattr(importlib.import_module(module), attribute))
            command.name = name
            self._commands[name] = command
        return self._commands[name]

    def __setitem__(self, name: str, command: click.Command) -> None:
        self._lazy.pop(name, None)
        self._commands[name] = command

    def __delitem__(self, name: str) -> None:
        if self._lazy.pop(name, None) is None:
            del self._commands[name]
        else:
            self._commands.pop(name, None)

    def __iter__(self) -> Iterator[str]:
        yield from (name for name in self._commands if name not in self._lazy)
        yield from self._lazy

    def __len__(self) -> int:
        return len(set(self._commands) | set(self._lazy))


class _DevGroup(TyperGroup):
    """``crossdock dev``: crossdock.dev is imported only when a dev subcommand runs, never by
    ``crossdock --help`` or ``crossdock submit``."""

    LAZY = {"slurm": "crossdock.dev.slurm.cli:app", "k8s": "crossdock.dev.k8s.cli:app"}

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.commands = _LazyCommands(self.commands, self.LAZY)


dev_app = typer.Typer(cls=_DevGroup, help="Local clusters for development and CI.", no_args_is_help=True)
app.add_typer(dev_app, name="dev")


def _mount_optional() -> None:
    """Sub-apps whose modules pull optional dependencies are mounted when importable."""
    try:
        from crossdock.cli import simulate
    except ImportError:
        return
    app.add_typer(simulate.app, name="simulate")


_mount_optional()

