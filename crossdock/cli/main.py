"""The ``crossdock`` entry point. The commands scripts run in loops, as they run sbatch, squeue,
scontrol and scancel — ``submit``, ``queue``, ``show``, ``cancel``, ``wait`` — go to a running
service's socket when one answers (:mod:`crossdock.cli.thin`: the standard library only), and
``submit`` otherwise straight to :mod:`crossdock.cli.submit`, without importing the Typer app
(typer, click, rich and every other command); everything else goes to :mod:`crossdock.cli.app`."""

from __future__ import annotations

import sys


def main() -> None:
    command = sys.argv[1] if len(sys.argv) > 1 else ""
    if command in ("submit", "queue", "show", "cancel", "wait"):
        from crossdock.cli import thin

        served = thin.served(command, sys.argv[2:])
        if served is not None:
            sys.exit(served)
    if command == "submit":
        from crossdock.cli import submit

        try:
            submit.run(sys.argv[2:])
        except KeyboardInterrupt:
            sys.stderr.write("crossdock: aborted\n")
            sys.exit(1)
        sys.exit(0)
    from crossdock.cli.app import app

    app()


def __getattr__(name: str):
    """``app``, for code that mounts or drives the CLI (``typer.testing.CliRunner``)."""
    if name == "app":
        from crossdock.cli.app import app

        return app
    raise AttributeError(name)


if __name__ == "__main__":
    main()
