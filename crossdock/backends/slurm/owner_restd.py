"""One slurmrestd request made as a job's owner, for the ``rest-unix`` driver of a root service.

On slurmrestd's unix socket, ``rest_auth/local`` takes the caller from the peer's uid: root is
slurmrestd's own user (an ``X-SLURM-USER-NAME`` naming another is refused: auth/munge cannot alias
users, "rejecting thread config for user X while running as slurm"), and any other uid but
slurmrestd's is refused outright. So a job sent there runs as slurmrestd's user.

Instead, slurmrestd itself runs in inetd mode as the owner: root starts it with the owner's uid,
primary gid and no other groups, its stdin and stdout two pipes the owner owns (0600). Local auth
accepts a pipe owned by its own uid, munge signs the RPC as the owner, and slurmctld records and
slurmd runs the job as the owner. One short-lived process per submission (about 40 ms). The
config reaches it as ``/dev/fd/N`` (opened by the service), since the owner may not be able to
traverse the directory that holds it.
"""

from __future__ import annotations

import http.client
import io
import os
import pwd
import selectors
import shutil
import subprocess
import time
from collections.abc import Mapping

from crossdock.backends.slurm.driver import SlurmError, SlurmUnavailable

SBIN = ("/usr/sbin", "/usr/local/sbin", "/sbin")


class _Answer:
    """What :class:`http.client.HTTPResponse` parses a response from."""

    def __init__(self, data: bytes):
        self._file = io.BytesIO(data)

    def makefile(self, *_args, **_kwargs):
        return self._file


class OwnerRestd:
    def __init__(self, env: Mapping[str, str], openapi: str, timeout_s: float = 30.0):
        self.conf = env.get("SLURM_CONF") or "/etc/slurm/slurm.conf"
        self.openapi, self.timeout_s = openapi, timeout_s
        path = os.pathsep.join([env.get("PATH", ""), *SBIN])
        self.binary = shutil.which("slurmrestd", path=path)

    def request(self, user: str, method: str, target: str, payload: bytes | None,
                headers: Mapping[str, str]) -> tuple[int, bytes]:
        """(HTTP status, body) of one request made by slurmrestd running as ``user``."""
        if self.binary is None:
            raise SlurmError("slurmrestd not found (PATH, /usr/sbin): needed to submit as the job's owner")
        owner = pwd.getpwnam(user)
        lines = [f"{method} {target} HTTP/1.1", "Host: localhost", "Connection: close",
                 *(f"{k}: {v}" for k, v in headers.items()), f"Content-Length: {len(payload or b'')}"]
        raw = self._exchange(owner, ("\r\n".join(lines) + "\r\n\r\n").encode() + (payload or b""))
        resp = http.client.HTTPResponse(_Answer(raw))  # type: ignore[arg-type]
        try:
            resp.begin()
            return resp.status, resp.read()
        except (http.client.HTTPException, ValueError) as exc:
            raise SlurmUnavailable(f"slurmrestd as {user}: no HTTP answer ({exc}): {raw[:200]!r}") from None

    def _exchange(self, owner: pwd.struct_passwd, request: bytes) -> bytes:
        in_r, in_w = os.pipe()
        out_r, out_w = os.pipe()
        conf = -1
        try:
            for fd in (in_r, in_w, out_r, out_w):  # local auth: a pipe of slurmrestd's own uid
                os.fchown(fd, owner.pw_uid, owner.pw_gid)
            conf = os.open(self.conf, os.O_RDONLY | os.O_CLOEXEC)
            proc = subprocess.Popen(
                [self.binary, "-a", "rest_auth/local", "-s", self.openapi],
                stdin=in_r, stdout=out_w, stderr=subprocess.PIPE, pass_fds=[conf], cwd="/",
                env={"SLURM_CONF": f"/dev/fd/{conf}", "PATH": os.pathsep.join(SBIN + ("/usr/bin", "/bin"))},
                user=owner.pw_uid, group=owner.pw_gid, extra_groups=[])
        except OSError as exc:
            for fd in (in_r, in_w, out_r, out_w, conf):
                if fd >= 0:
                    os.close(fd)
            raise SlurmUnavailable(f"starting slurmrestd as {owner.pw_name}: {exc}") from None
        for fd in (in_r, out_w, conf):
            os.close(fd)
        answer = None
        try:
            answer = self._talk(in_w, out_r, request)
        finally:
            os.close(out_r)
            if answer is None:  # past the deadline (or the exchange failed): no need to wait
                proc.kill()
            try:
                proc.wait(self.timeout_s)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            log = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
            if proc.stderr:
                proc.stderr.close()
        if answer is None:
            raise SlurmUnavailable(f"slurmrestd as {owner.pw_name} did not answer within {self.timeout_s:.0f}s: "
                                   f"{log.strip()[-300:]}")
        if not answer:
            raise SlurmUnavailable(f"slurmrestd as {owner.pw_name} exited without an answer: {log.strip()[-300:]}")
        return answer

    def _talk(self, write_fd: int, read_fd: int, request: bytes) -> bytes | None:
        """Send ``request``, read until EOF; None past the deadline."""
        deadline = time.monotonic() + self.timeout_s
        out = bytearray()
        os.set_blocking(write_fd, False)
        pending = memoryview(request)
        with selectors.DefaultSelector() as sel:
            sel.register(read_fd, selectors.EVENT_READ)
            sel.register(write_fd, selectors.EVENT_WRITE)
            try:
                while True:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        return None
                    for key, _ in sel.select(left):
                        if key.fd == write_fd:
                            try:
                                pending = pending[os.write(write_fd, pending):]
                            except BrokenPipeError:
                                pending = pending[:0]
                            if not pending:
                                sel.unregister(write_fd)
                                os.close(write_fd)
                                write_fd = -1
                        else:
                            chunk = os.read(read_fd, 65536)
                            if not chunk:
                                return bytes(out)
                            out += chunk
            finally:
                if write_fd >= 0:
                    os.close(write_fd)
