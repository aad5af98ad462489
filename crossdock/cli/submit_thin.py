"""``crossdock submit`` when a multi-user service runs: hand the whole submission to it.

Only the standard library is imported here, none of crossdock's models, pydantic or redis: the
service parses, admits and stores the submission with the same code the CLI runs
(``crossdock.gateway.argv``) and sends back what to print and the exit status. The client reads
what only it may read (the script, standard input) when the service asks for it. When the socket
does not answer, ``run`` returns None and the caller takes the ordinary path, which then says why.
"""

from __future__ import annotations

import base64
import json
import os
import socket
import sys


def run(argv: list[str], path: str) -> int | None:
    """Submit through the service at ``path``; the exit status, or None if it cannot be reached."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(path)
    except OSError:
        sock.close()
        return None
    mask = os.umask(0o022)
    os.umask(mask)
    request = {"op": "submit_argv", "args": {"argv": argv, "cwd": os.getcwd(), "umask": f"{mask:04o}",
                                             "environ": dict(os.environ), "tty": sys.stdout.isatty()}}
    with sock, sock.makefile("rb") as stream:
        try:
            _send(sock, request)
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


def _read(need: dict) -> dict:
    """The bytes the service asked for, read with this user's rights."""
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
