"""``crossdock queue|show|cancel|wait`` as one conversation on a service's socket: the client
sends the command's words and whether its stdout and stderr are terminals (and how wide), and the
service runs the very Typer command the CLI runs (already imported, its store connected) for the
peer's uid, and answers ``{"done": {stdout, stderr, code}}`` — so the call costs the client an
interpreter start and one round trip (``crossdock.cli.thin``).

The command acts as the caller the kernel names (``SO_PEERCRED``) through the same
:class:`~crossdock.gateway.direct.Direct` view the socket's other requests get: its ownership
checks and private data are the service's own. What the command prints goes to this conversation's
buffers, not to the service's streams (:class:`Routed`): each connection has its own thread.
"""

from __future__ import annotations

import io
import sys
import threading
from functools import lru_cache
from typing import Any, BinaryIO

from crossdock import service
from crossdock.gateway import wire
from crossdock.gateway.direct import Direct

COMMANDS = ("queue", "show", "cancel", "wait")
"""The commands a ``cli_argv`` conversation runs (``submit`` has its own: :mod:`crossdock.gateway.argv`)."""

_here = threading.local()


@lru_cache(maxsize=1)
def _cli() -> Any:
    """The CLI's Click command, built from the Typer app once per process (Typer builds it anew on
    every call of the app, some 40 ms: more than the rest of a call)."""
    import typer.main

    from crossdock.cli.app import app

    return typer.main.get_command(app)


class Routed(io.TextIOBase):
    """The service's ``sys.stdout``/``sys.stderr``: a thread running a command writes to its
    conversation's buffer (a terminal or not, as the client's is); every other to the real stream."""

    def __init__(self, name: str, real: Any) -> None:
        self.name, self.real = name, real

    def _buffer(self) -> io.StringIO | None:
        return getattr(_here, self.name, None)

    def write(self, text: str) -> int:
        buffer = self._buffer()
        return (self.real if buffer is None else buffer).write(text)

    def flush(self) -> None:
        if self._buffer() is None:
            self.real.flush()

    def isatty(self) -> bool:
        return bool(getattr(_here, "tty", {}).get(self.name)) if self._buffer() is not None else self.real.isatty()

    @property
    def encoding(self) -> str:  # a routed stream's text travels as JSON, UTF-8
        return "utf-8" if self._buffer() is not None else self.real.encoding

    @property
    def errors(self) -> str:
        return "strict" if self._buffer() is not None else self.real.errors

    @property
    def buffer(self) -> Any:
        """The real stream's bytes; none while routed (click would write past the conversation)."""
        if self._buffer() is not None:
            raise AttributeError("a command's output on the socket has no byte stream")
        return self.real.buffer

    def fileno(self) -> int:
        if self._buffer() is not None:
            raise io.UnsupportedOperation("a command's output on the socket has no file descriptor")
        return self.real.fileno()

    def __getattr__(self, name: str) -> Any:  # encoding, errors, buffer...: the real stream's
        return getattr(self.real, name)


def route_output() -> None:
    """Install :class:`Routed` as this process's ``sys.stdout`` and ``sys.stderr`` (once)."""
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if not isinstance(stream, Routed):
            setattr(sys, name, Routed(name, stream))


def converse(server: Any, uid: int, args: dict[str, Any], wfile: BinaryIO) -> None:
    """Run one ``cli_argv`` request for the peer ``uid`` and write its answer."""
    from crossdock.cli import common

    command, argv = str(args["command"]), [str(a) for a in args["argv"]]
    if command not in COMMANDS:
        raise ValueError(f"command {command!r} is not one of {', '.join(COMMANDS)}")
    tty = {"stdout": bool(args.get("tty")), "stderr": bool(args.get("err_tty"))}
    columns = args.get("columns")
    view = Direct(server.rt, service.caller(server.rt, None, uid=uid), server.direct.send)
    route_output()
    out, err = io.StringIO(), io.StringIO()
    _here.stdout, _here.stderr, _here.tty = out, err, tty
    code = 0
    try:
        with common.serving(view, width=int(columns) if tty["stdout"] and columns else None):
            _cli().main(args=[command, *argv], prog_name="crossdock")
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    finally:
        del _here.stdout, _here.stderr, _here.tty
    wfile.write(wire.dumps({"done": {"stdout": out.getvalue(), "stderr": err.getvalue(), "code": code}}))
