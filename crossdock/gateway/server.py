"""The multi-user service's Unix socket: who calls is what the kernel says (``SO_PEERCRED``), and
each request is one :class:`~crossdock.gateway.direct.Direct` call for that caller, so the
ownership checks are the service's own and nothing here decides.

The standard library's ``socketserver`` (a thread per connection, JSON lines) rather than an
RPC framework: the requests are a dozen short calls on one machine, peer credentials need the
raw socket (which gRPC/HTTP servers hide), and it adds no dependency to the service. The threads
are bounded by the config's ``limits:`` (connections per uid and in all, an idle timeout), and a
request is read a bounded piece at a time (:mod:`crossdock.gateway.bounded`), so that no local user
starves the service.

The socket is 0666 in a directory made 0755: anyone may connect, since identity comes from the
kernel and not from the request; a request's ``as`` (the API's ``user=``) is honoured only for
root or a configured admin.

A single-user ``crossdock up`` serves the same requests on its owner's socket
(:func:`~crossdock.settings.user_socket`, ``private=True``): 0600 in a 0700 directory, and a peer
the kernel names as anyone but the owner is refused before it is read — it is the CLI's fast path
(:mod:`crossdock.cli.thin`), not a way in for other users.
"""

from __future__ import annotations

import logging
import os
import socket
import socketserver
import struct
import threading
import time
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from crossdock import service
from crossdock.backends.redis_store.embedded import shown
from crossdock.gateway import wire
from crossdock.gateway.bounded import Connections, TooLarge, next_request
from crossdock.gateway.direct import LISTINGS, Direct
from crossdock.queue.bounds import request_too_large
from crossdock.queue.errors import CrossdockError, InvalidArgument, PermissionDenied, StoreUnavailable
from crossdock.queue.models import JobSpec, validation_message
from crossdock.runtime import Runtime
from crossdock.settings import user_name

log = logging.getLogger(__name__)


def peer_uid(sock: socket.socket) -> int:
    """The connecting process's uid, from the kernel."""
    _pid, uid, _gid = struct.unpack("3i", sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i")))
    return uid


class Handler(socketserver.StreamRequestHandler):
    server: "GatewayServer"

    def handle(self) -> None:
        uid = peer_uid(self.request)
        slot = self.server.connections.slot(uid)
        try:
            while True:
                limits = self.server.rt.config.limits
                with next_request(self.rfile, limits.max_request_bytes, slot, limits.idle_timeout_s) as line:
                    if not line:
                        return
                    if line.startswith((b'{"op":"submit_argv"', b'{"op":"cli_argv"')):  # a conversation,
                        self.server.converse(uid, line, self.rfile, self.wfile)     # not one answer
                        continue
                    self.wfile.write(wire.dumps(self.server.answer(uid, line)))
        except TooLarge:
            log.info("refused a request over limits.max_request_bytes from %s (uid %s)", user_name(uid), uid)
            refuse(self.request, request_too_large("request", self.server.rt.config.limits))
        except OSError:  # idle past limits.idle_timeout_s, or the client left: close
            return

    def finish(self) -> None:
        try:
            super().finish()
        except OSError:
            pass  # the client left with an answer unsent
        finally:
            self.server.connections.release(peer_uid(self.request))


NOTE_SECONDS = 60.0
"""A uid whose connections are refused is logged once in this long."""


def refuse(sock: socket.socket, message: str, kind: str = "LimitExceeded") -> None:
    """Answer one error line naming the limit (or who may connect) (the socket is closed after)."""
    try:
        sock.settimeout(1.0)
        sock.sendall(wire.dumps({"error": {"type": kind, "message": message}}))
    except OSError:
        pass  # the client left, or does not read


class GatewayServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    """One thread per connection, but at most ``limits.max_connections`` of them and
    ``limits.max_connections_per_user`` per uid; a connection idle ``limits.idle_timeout_s`` is
    closed; a request is read a bounded piece at a time (:mod:`crossdock.gateway.bounded`)."""

    daemon_threads = True
    block_on_close = False

    def __init__(self, path: Path, rt: Runtime, send: Any = None, private: bool = False):
        self.rt, self.path = rt, path
        self.owner = os.geteuid() if private else None
        """Private: the one uid served (this process's); else any peer."""
        self.direct = Direct(rt, service.Caller("crossdock", True), send)  # holds the one Celery sender
        path.parent.mkdir(mode=0o700 if private else 0o755, parents=True, exist_ok=True)
        if private:
            _own_directory(path.parent)
        if path.exists() or path.is_symlink():
            probe = socket.socket(socket.AF_UNIX)
            try:
                probe.connect(str(path))
                raise CrossdockError(f"{path} is served by another crossdock up; stop it, or set CROSSDOCK_SOCKET")
            except (ConnectionRefusedError, FileNotFoundError):
                path.unlink(missing_ok=True)  # left by a service that died
            finally:
                probe.close()
        self.connections = Connections()
        self._noted: dict[int, float] = {}
        super().__init__(str(path), Handler)
        os.chmod(path, 0o600 if private else 0o666)

    def process_request(self, request: Any, client_address: Any) -> None:  # type: ignore[override]
        """Refuse a connection over a limit (on a private socket: of another uid) with its line, without a
        thread; else serve it in one."""
        uid = peer_uid(request)
        limits = self.rt.config.limits
        if self.owner is not None and uid != self.owner:
            refusal, kind = (f"{self.path} serves only {user_name(self.owner)}; run crossdock as that user",
                             "PermissionDenied")
        else:
            refusal, kind = self.connections.admit(uid, limits), "LimitExceeded"
        if refusal is not None:
            if time.monotonic() - self._noted.get(uid, -NOTE_SECONDS) >= NOTE_SECONDS:  # a flood: one log line a minute
                self._noted[uid] = time.monotonic()
                log.info("refused a connection of %s (uid %s): %s", user_name(uid), uid, refusal)
            refuse(request, refusal, kind)
            self.shutdown_request(request)
            return
        request.settimeout(limits.idle_timeout_s)
        try:
            super().process_request(request, client_address)
        except BaseException:  # no thread: the connection is not counted
            self.connections.release(uid)
            raise

    def handle_error(self, request: Any, client_address: Any) -> None:
        log.debug("a socket connection ended on an error", exc_info=True)

    def answer(self, uid: int, line: bytes) -> dict[str, Any]:
        try:
            request = wire.json.loads(line)
            op = wire.OPS[request["op"]]
            args = {name: decode(request.get("args", {})[name]) if name in request.get("args", {}) else None
                    for name, decode in op.args.items()}
            who = service.caller(self.rt, request.get("as"), uid=uid)
            return {"ok": op.out(self.call(request["op"], who, args))}
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            if isinstance(exc, ValidationError):
                exc = InvalidArgument(validation_message(exc))
            elif not isinstance(exc, CrossdockError):
                exc = InvalidArgument(f"not a request this service answers ({type(exc).__name__}: {exc})")
            return {"error": wire.error_of(exc)}
        except StoreUnavailable as exc:
            cause = exc.__cause__ or exc
            return {"error": {"type": "ServiceUnavailable", "message": f"the service cannot reach its store"
                              f" ({type(cause).__name__}: {shown(str(cause))}); try again shortly"}}
        except CrossdockError as exc:
            if isinstance(exc, PermissionDenied):
                log.info("refused %s for %s (uid %s): %s", line[:80], user_name(uid), uid, exc)
            return {"error": wire.error_of(exc)}
        except Exception as exc:  # the service stays up; the caller gets one line, the log the rest
            log.exception("request from uid %s failed", uid)
            return {"error": {"type": "CrossdockError", "message": f"the service failed: {type(exc).__name__}: {exc}"}}

    def converse(self, uid: int, line: bytes, rfile: Any, wfile: Any) -> None:
        from crossdock.gateway import argv, commands

        try:
            request = wire.json.loads(line)
            if request["op"] == "cli_argv":
                commands.converse(self, uid, request["args"], wfile)
            else:
                argv.converse(self, uid, request["args"], rfile, wfile)
        except (KeyError, TypeError, ValueError) as exc:
            _done(wfile, 2, f"not a submission this service answers ({type(exc).__name__}: {exc})")
        except (StoreUnavailable, OSError) as exc:  # the store, or the client gone mid-conversation
            cause = exc.__cause__ or exc
            _done(wfile, 1, f"the service cannot answer ({type(cause).__name__}: {shown(str(cause))});"
                  " try again shortly")
        except Exception as exc:  # the service stays up; the caller gets one line, the log the rest
            log.exception("submission from uid %s failed", uid)
            _done(wfile, 1, f"the service failed: {type(exc).__name__}: {exc}")

    def call(self, name: str, who: service.Caller, args: dict[str, Any]) -> Any:
        view = Direct(self.rt, who, self.direct.send)
        if name in ("submit", "check"):
            args["specs"] = [self._sealed(spec, who) for spec in args["specs"]]
        if name == "ids" and args["which"] not in LISTINGS:
            raise InvalidArgument(f"which: {args['which']!r}; accepted: {', '.join(LISTINGS)}")
        if name == "submit":
            return view.submit(args["specs"], args["token"])
        return getattr(view, name)(**args)  # another user's work as the view shows it (private_data)

    def _sealed(self, spec: JobSpec, who: service.Caller) -> JobSpec:
        """A Python job's payload sealed here under its owner's key: the caller is authenticated,
        so the service vouches for what it sent (the client holds no key)."""
        if spec.python is None:
            return spec
        owner = service.Caller(spec.user or who.name, who.admin)
        signed = spec.python.model_copy(update={"signature": service.sign_payload(self.rt, owner, spec.python.payload)})
        return spec.model_copy(update={"python": signed})


def _own_directory(path: Path) -> None:
    """A private socket's directory: this process's own and 0700, else refused (another user could
    otherwise swap the socket for theirs)."""
    info = path.lstat()
    if path.is_symlink() or info.st_uid != os.geteuid():
        raise CrossdockError(f"{path}: not a directory of this user's (uid {info.st_uid}); remove it, or set"
                             " CROSSDOCK_STATE_DIR to one of yours")
    os.chmod(path, 0o700)


def _done(wfile: Any, code: int, message: str) -> None:
    try:
        wfile.write(wire.dumps({"done": {"stdout": "", "stderr": f"crossdock: error: {message}\n", "code": code}}))
    except OSError:
        pass  # the client left


class SocketPart:
    """The socket server as one supervised part of ``crossdock up`` (a thread that serves)."""

    name = "socket"

    def __init__(self, path: Path, rt: Runtime, private: bool = False):
        self.path, self.rt, self.private = path, rt, private
        self.server: GatewayServer | None = None
        self.thread: threading.Thread | None = None

    def start(self) -> None:
        if self.server is None:
            self.server = GatewayServer(self.path, self.rt, private=self.private)
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.2,), daemon=True, name="socket")
        self.thread.start()

    def alive(self) -> bool:
        return self.thread is not None and self.thread.is_alive()

    def report(self) -> dict[str, Any]:
        return {"path": str(self.path), "alive": self.alive()}

    def stop(self) -> None:
        if self.server is not None:
            if self.alive():
                self.server.shutdown()
            self.server.server_close()
            self.path.unlink(missing_ok=True)
            self.server = None
