"""The ``crossdock`` entry point. ``crossdock submit`` — the command scripts run in loops, as
they run sbatch — goes straight to :mod:`crossdock.cli.submit`, without importing the Typer app
(typer, click, rich and every other command); everything else goes to :mod:`crossdock.cli.app`."""

from __future__ import annotations

import sys


def main() -> None:
    if sys.argv[1:2] == ["submit"]:
        served = _served_submit(sys.argv[2:])
        if served is not None:
            sys.exit(served)
        from crossdock.cli import submit

        try:
            submit.run(sys.argv[2:])
        except KeyboardInterrupt:
            sys.stderr.write("crossdock: aborted\n")
            sys.exit(1)
        sys.exit(0)
    from crossdock.cli.app import app

    app()


def _served_submit(argv: list[str]) -> int | None:
    """A multi-user service's socket, when one runs, takes the whole submission (the client then
    imports nothing but the standard library: ``crossdock.cli.submit_thin``); None: submit here."""
    from crossdock.settings import socket_from_env

    path = socket_from_env()
    if path is None or argv[:1] == ["--batch"] or argv[:1] and argv[0].startswith("--batch="):
        return None
    from crossdock.cli import submit_thin

    try:
        return submit_thin.run(argv, str(path))
    except KeyboardInterrupt:
        sys.stderr.write("crossdock: aborted\n")
        return 1


def __getattr__(name: str):
    """``app``, for code that mounts or drives the CLI (``typer.testing.CliRunner``)."""
    if name == "app":
        from crossdock.cli.app import app

        return app
    raise AttributeError(name)


if __name__ == "__main__":
    main()
