"""``crossdock submit`` as one conversation on the multi-user socket: the client sends its argv,
directory, umask and environment, and the service runs the very submit path the CLI runs
(``crossdock.cli.submit.submit``), already imported and connected, so a submission costs the
client an interpreter start and one round trip (``crossdock.cli.thin``).

The client's files are read by the client, with its own rights: when the submit path needs the
script (or standard input), the service asks for it (``{"need": "file", "path": …}``,
``{"need": "stdin"}``) and the client answers with the bytes (base64) or why it could not. The
service never opens a path a user names. The answer ends with ``{"done": {stdout, stderr, code}}``.
"""

from __future__ import annotations

import base64
import errno
import json
from typing import Any, BinaryIO

from crossdock import service
from crossdock.gateway import wire
from crossdock.gateway.bounded import TooLarge, next_request
from crossdock.gateway.direct import Direct
from crossdock.queue.bounds import request_too_large


def converse(server: Any, uid: int, args: dict[str, Any], rfile: BinaryIO, wfile: BinaryIO) -> None:
    """Run one ``submit_argv`` request for the peer ``uid`` and write its answer."""
    from crossdock.cli.submit import Invocation, submit

    view = Direct(server.rt, service.caller(server.rt, None, uid=uid), server.direct.send)
    limits = server.rt.config.limits

    def ask(need: dict[str, Any]) -> bytes | None:
        wfile.write(wire.dumps({"need": need}))
        wfile.flush()
        try:
            with next_request(rfile, limits.max_request_bytes, server.connections.slot(uid),
                              limits.idle_timeout_s) as line:
                reply = json.loads(line or b"{}")
        except TooLarge:
            raise OSError(errno.EFBIG, request_too_large("its content", limits)) from None
        if "error" in reply:
            raise OSError(int(reply.get("errno") or 5), str(reply["error"]))
        data = reply.get("data")
        return None if data is None else base64.b64decode(data)

    out: list[str] = []
    err: list[str] = []
    inv = Invocation(environ=_strings(args.get("environ")), cwd=str(args["cwd"]), umask=str(args["umask"]),
                     read_file=lambda path: ask({"file": path}) or b"", read_stdin=lambda: ask({"stdin": True}),
                     out=out.append, err=err.append, tty=bool(args.get("tty")))
    code = 0
    try:
        submit([str(a) for a in args["argv"]], inv, lambda start_redis=True: view)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    wfile.write(wire.dumps({"done": {"stdout": "".join(out), "stderr": "".join(err), "code": code}}))


def _strings(environ: Any) -> dict[str, str]:
    if not isinstance(environ, dict):
        return {}
    return {str(k): str(v) for k, v in environ.items()}
