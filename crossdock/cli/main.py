"""The ``crossdock`` entry point. ``crossdock submit`` — the command scripts run in loops, as
they run sbatch — goes straight to :mod:`crossdock.cli.submit`, without importing the Typer app
(typer, click, rich and every other command); everything else goes to :mod:`crossdock.cli.app`."""

from __future__ import annotations

import sys


def main() -> None:
    if sys.argv[1:2] == ["submit"]:
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
