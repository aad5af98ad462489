"""The CLI's fast path: ``crossdock submit|queue|show|cancel|wait`` handed whole to a running
service through its socket, when one answers.

Two services answer: the multi-user one (``crossdock up --multi-user``, :func:`multi_user_socket`),
and a single-user ``crossdock up``, which serves its owner's CLI on :func:`user_socket`. Either
knows the caller from the kernel (``SO_PEERCRED``) and runs the very code the CLI runs
(``crossdock.gateway.argv`` for submit, ``crossdock.gateway.commands`` for the others), already
imported and connected, and sends back what to print and the exit status.

Only the standard library is imported here, and only what a call needs (``os``, ``sys``,
``socket``, ``json``): none of crossdock's models, pydantic, redis, typer or rich. The client
reads what only it may read (the script, standard input) when the service asks for it. When no
socket answers, :func:`run` returns None and the caller takes the ordinary path, which then works
or says why.
"""

from __future__ import annotations

import json
import os
import socket
import sys

DEFAULT_SOCKET = "/run/crossdock/crossdock.sock"
"""``crossdock.settings.DEFAULT_SOCKET``, as text (importing the settings costs more than a call)."""
SUN_PATH_MAX = 100
"""A Unix socket's path is at most 107 bytes; a longer state directory's socket goes under /tmp."""
COMMANDS = ("submit", "queue", "show", "cancel", "wait")


def multi_user_socket() -> str | None:
    """The multi-user service's socket, by ``crossdock.settings.socket_from_env``'s rule:
    ``CROSSDOCK_SOCKET`` (``none``: none at all), else the default one when it exists."""
    named = os.environ.get("CROSSDOCK_SOCKET")
    if named:
        return None if named.lower() == "none" else named
    return DEFAULT_SOCKET if os.path.exists(DEFAULT_SOCKET) else None


def user_socket(state_dir: str | None = None) -> str:
    """Where a single-user ``crossdock up`` serves its owner's CLI: ``run/cli.sock`` in its state
    directory (``state_dir``, else ``CROSSDOCK_STATE_DIR``, else ``~/.local/state/crossdock``, as
    the settings), or, when that path is too long for a Unix socket, ``/tmp/crossdock-UID/`` and a
    digest of it."""
    state = state_dir or os.environ.get("CROSSDOCK_STATE_DIR") or os.path.join(
        os.path.expanduser("~"), ".local", "state", "crossdock")
    path = os.path.join(os.path.abspath(state), "run", "cli.sock")
    if len(os.fsencode(path)) <= SUN_PATH_MAX:
        return path
    import hashlib

    digest = hashlib.blake2s(os.fsencode(path), digest_size=10).hexdigest()
    return os.path.join("/tmp", f"crossdock-{os.geteuid()}", f"{digest}.sock")


def _ours(path: str) -> bool:
    """``path`` is a socket of this user's in a directory only this user writes: the fast path sends
    the environment, which must not reach a socket another user put there."""
    try:
        where, info = os.lstat(os.path.dirname(path)), os.lstat(path)
    except OSError:
        return False
    uid = os.geteuid()
    return where.st_uid == uid and not where.st_mode & 0o022 and info.st_uid == uid


def served(command: str, argv: list[str]) -> int | None:
    """Run ``command`` through the service that answers, multi-user first; its exit status, or
    None: run it here (no service answers, or what was asked needs this process: ``submit
    --batch``, a help text, ``wait``'s live display on a terminal)."""
    if command not in COMMANDS or "--help" in argv or (command == "submit" and any(
            a == "--batch" or a.startswith("--batch=") for a in argv[:1])):
        return None
    if command == "wait" and sys.stdout.isatty() and not {"-q", "--quiet"} & set(argv):
        return None
    path = multi_user_socket()
    if path is None:
        if os.environ.get("CROSSDOCK_SOCKET", "").lower() == "none":
            return None
        path = user_socket()
        if not _ours(path):
            return None
    try:
        return run(command, argv, path)
    except KeyboardInterrupt:
        sys.stderr.write("crossdock: aborted\n")
        return 1


def run(command: str, argv: list[str], path: str) -> int | None:
    """``command`` through the service at ``path``; the exit status, or None if it cannot be reached."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(path)
    except OSError:
        sock.close()
        return None
    with sock, sock.makefile("rb") as stream:
        try:
            _send(sock, _request(command, argv))
        except OSError:
            pass  # the service closed first: it may have said why (a limit), read below
        try:
            for line in stream:
                answer = json.loads(line)
                if "error" in answer:  # refused whole (over one of the service's limits)
                    sys.stderr.write(f"crossdock: error: {answer['error'].get('message')}\n")
                    return 2
                if "done" in answer:
                    done = answer["done"]
                    sys.stdout.write(done["stdout"])
                    sys.stderr.write(done["stderr"])
                    return int(done["code"])
                _send(sock, _read(answer["need"]))
        except OSError:
            pass  # the service went away mid-conversation (restarted, or closed an idle connection)
    sys.stderr.write(f"crossdock: error: the service at {path} closed the connection; try again\n")
    return 1


def _request(command: str, argv: list[str]) -> dict:
    if command == "submit":
        mask = os.umask(0o022)
        os.umask(mask)
        return {"op": "submit_argv", "args": {"argv": argv, "cwd": os.getcwd(), "umask": f"{mask:04o}",
                                              "environ": dict(os.environ), "tty": sys.stdout.isatty()}}
    tty, err_tty = sys.stdout.isatty(), sys.stderr.isatty()
    columns = None
    for fd in (1, 2) if tty or err_tty else ():
        try:
            columns = os.get_terminal_size(fd).columns
            break
        except OSError:
            continue
    return {"op": "cli_argv", "args": {"command": command, "argv": argv, "tty": tty, "err_tty": err_tty,
                                       "columns": columns}}


def _read(need: dict) -> dict:
    """The bytes the service asked for, read with this user's rights."""
    import base64

    try:
        if "file" in need:
            with open(need["file"], "rb") as f:
                data = f.read()
        elif sys.stdin.isatty():
            return {"data": None}
        else:
            data = sys.stdin.buffer.read()
    except OSError as exc:
        return {"error": exc.strerror or str(exc), "errno": exc.errno}
    except ValueError as exc:  # a NUL in the name
        return {"error": str(exc), "errno": 22}
    return {"data": base64.b64encode(data).decode()}


def _send(sock: socket.socket, obj: dict) -> None:
    sock.sendall(json.dumps(obj, separators=(",", ":")).encode() + b"\n")
