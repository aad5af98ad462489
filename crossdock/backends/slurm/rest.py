"""Drive Slurm through slurmrestd (openapi v0.0.38, Slurm 22.05).

Two ways in: a unix socket with ``rest_auth/local`` (requests run as slurmrestd's own user; a
root service submits another user's job through slurmrestd run as that user, :mod:`owner_restd`),
or TCP with a JWT (``X-SLURM-USER-NAME``/``X-SLURM-USER-TOKEN``; requests run as the token's
user). Uses the standard library's ``http.client`` with one kept-alive connection per thread.

v0.0.38 has no requeue, hold, release, node update (power up/down) or will-run endpoint; those
go to ``fallback`` (a CLI driver) when one is given and raise :class:`Unsupported` otherwise. The ``job`` object accepts
sbatch's long option names, which is how ``nodelist`` and ``exclude`` get through although
the published schema lists neither.
"""

from __future__ import annotations

import http.client
import json
import os
import pwd
import socket
import threading
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any
from urllib.parse import quote, urlsplit

from crossdock.backends.slurm.driver import (
    UNAVAILABLE_PATTERNS,
    SlurmDriver,
    SlurmError,
    SlurmJob,
    SlurmNode,
    SlurmPartition,
    SlurmUnavailable,
    SubmitRejected,
    SubmitRequest,
    Unsupported,
    WillRun,
    parse_job,
    parse_node,
)
from crossdock.backends.slurm.owner_restd import OwnerRestd
from crossdock.backends.slurm.states import node_names
from crossdock.queue.environ import exportable

OPENAPI = "openapi/v0.0.38"
API = "/slurm/v0.0.38"
DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float):
        super().__init__("localhost", timeout=timeout)
        self._path = path

    def connect(self) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(self._path)


def job_properties(req: SubmitRequest, base_env: Mapping[str, str]) -> dict[str, Any]:
    """The v0.0.38 ``job`` object for ``req``. REST jobs inherit no environment: ``export=ALL``
    sends the submitter's, as sbatch would."""
    if req.export.upper() == "ALL":
        environment = {**base_env, **req.env}
    else:
        environment = dict(req.env)
    environment.setdefault("PATH", DEFAULT_PATH)
    job: dict[str, Any] = {
        "name": req.name,
        "comment": req.comment,
        "current_working_directory": req.workdir,
        "nodes": [req.nodes, req.nodes_max or req.nodes],
        "tasks": req.ntasks,
        "cpus_per_task": req.cpus_per_task,
        "environment": environment,
        "requeue": req.requeue,
        "open_mode": "append",  # a requeued job keeps every run's output
    }
    if req.signal is not None and ":" in req.signal:
        # slurmrestd 22.05 refuses the flags sbatch takes ("Invalid SIGNAL specification")
        raise SubmitRejected(f"--signal={req.signal}: slurmrestd refuses the B:/R: flags; use the CLI driver"
                             " (slurm.driver: cli) or a --signal without them")
    optional = {
        "partition": req.partition,
        "nodelist": ",".join(req.nodelist),
        "exclude": ",".join(req.exclude),
        "tasks_per_node": req.ntasks_per_node,
        "memory_per_node": req.mem_per_node_mib,
        "memory_per_cpu": req.mem_per_cpu_mib,
        "gres": ",".join(req.gres),
        "gpus": req.gpus,
        "gpus_per_task": req.gpus_per_task,
        "time_limit": req.time_limit_minutes,
        "array": req.array,
        "dependency": req.dependency,
        "standard_output": req.stdout,
        "standard_error": req.stderr,
        "nice": req.nice or None,
        "constraints": req.constraint,
        "signal": req.signal,
        "time_minimum": req.time_min_minutes,
        "reservation": req.reservation,
        "licenses": req.licenses,
        "argv": list(req.args) or None,
    }
    job.update({k: v for k, v in optional.items() if v not in (None, "")})
    if req.hold:
        job["hold"] = True
    if req.exclusive:
        job["exclusive"] = "true"
    return job


class UserTokens:
    """Per-user JWTs from ``scontrol token username=<user>`` (which only root or SlurmUser may run:
    the service), each kept until shortly before it expires."""

    def __init__(self, env: Mapping[str, str], lifespan_s: int = 3600, timeout_s: float = 30.0):
        self.env = dict(env)
        self.env.pop("SLURM_JWT", None)  # scontrol authenticates with munge, as the service
        self.lifespan_s, self.timeout_s = lifespan_s, timeout_s
        self._cache: dict[str, tuple[str, float]] = {}
        self._lock = threading.Lock()

    def __call__(self, user: str) -> str:
        with self._lock:
            token, until = self._cache.get(user, ("", 0.0))
            if time.monotonic() < until:
                return token
            argv = ["scontrol", "token", f"username={user}", f"lifespan={self.lifespan_s}"]
            try:
                done = subprocess.run(argv, env=self.env, capture_output=True, text=True, timeout=self.timeout_s)
            except (OSError, subprocess.TimeoutExpired) as exc:
                raise SlurmError(f"scontrol token: {exc}") from None
            token = next((line.split("=", 1)[1] for line in done.stdout.splitlines() if line.startswith("SLURM_JWT=")), "")
            if done.returncode != 0 or not token:
                raise SlurmError(f"scontrol token username={user} failed: {(done.stderr or done.stdout).strip()}")
            self._cache[user] = (token, time.monotonic() + self.lifespan_s * 0.8)
            return token


class RestDriver:
    name = "rest"

    def __init__(
        self,
        *,
        socket_path: str | None = None,
        url: str | None = None,
        user: str | None = None,
        token: str | None = None,
        fallback: SlurmDriver | None = None,
        job_env: Mapping[str, str] | None = None,
        timeout_s: float = 30.0,
        tokens: Callable[[str], str] | None = None,
        owners: OwnerRestd | None = None,
    ):
        """``tokens``: a JWT for a given user (:class:`UserTokens`), so that a job is submitted, and
        so recorded and run by Slurm, as its owner; without it every job is the token user's.
        ``owners`` (unix socket, service run as root): a job of another user is submitted by
        slurmrestd run as that user (:mod:`owner_restd`); without it, or not root, every job is
        slurmrestd's user's."""
        if (socket_path is None) == (url is None):
            raise ValueError("give exactly one of socket_path (local auth) or url (JWT)")
        if url is not None and not token:
            raise ValueError("a JWT (token=) is needed with url=; `scontrol token` issues one")
        self.socket_path = socket_path
        self.url = urlsplit(url) if url else None
        self.headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if token:
            self.headers["X-SLURM-USER-NAME"] = user or "root"
            self.headers["X-SLURM-USER-TOKEN"] = token
        self.fallback = fallback
        self.tokens = tokens
        self.owners = owners
        self.job_env = exportable(dict(os.environ if job_env is None else job_env))  # a job's: no secrets
        self.timeout_s = timeout_s
        self._local = threading.local()

    @classmethod
    def from_env(cls, env: Mapping[str, str], *, transport: str = "jwt", fallback: SlurmDriver | None = None) -> "RestDriver":
        """From the variables ``crossdock dev slurm up`` writes (SLURMRESTD_URL, SLURM_LOCAL_JWT,
        SLURMRESTD_SOCKET)."""
        if transport == "unix":
            return cls(socket_path=env["SLURMRESTD_SOCKET"], fallback=fallback, owners=OwnerRestd(env, OPENAPI))
        return cls(url=env["SLURMRESTD_URL"], token=env["SLURM_LOCAL_JWT"], user=env.get("SLURM_LOCAL_USER", "root"),
                   fallback=fallback, tokens=UserTokens(env))

    # --- plumbing ---------------------------------------------------------------------------

    def _connection(self) -> http.client.HTTPConnection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            if self.socket_path:
                conn = _UnixConnection(self.socket_path, self.timeout_s)
            else:
                conn = http.client.HTTPConnection(self.url.hostname, self.url.port or 80, timeout=self.timeout_s)
            self._local.conn = conn
        return conn

    def _request(self, method: str, path: str, body: Any = None, headers: Mapping[str, str] | None = None,
                 as_owner: str | None = None) -> dict[str, Any]:
        payload = json.dumps(body).encode() if body is not None else None
        for attempt in (0, 1):  # one reconnect: slurmrestd closes idle keep-alive connections
            if as_owner:  # slurmrestd run as the owner, one request (owner_restd)
                status, raw = self.owners.request(as_owner, method, API + path, payload, self.headers)
                break
            conn = self._connection()
            try:
                conn.request(method, API + path, body=payload, headers=dict(headers or self.headers))
                resp = conn.getresponse()
                status, raw = resp.status, resp.read()
                break
            except (OSError, http.client.HTTPException) as exc:
                conn.close()
                self._local.conn = None
                if attempt:
                    raise SlurmUnavailable(f"slurmrestd unreachable: {exc}") from None
        try:
            data = json.loads(raw) if raw else {}
        except ValueError:
            data = {"errors": [{"error": raw[:500].decode(errors="replace")}]}
        errors = [e for e in data.get("errors", []) if e]
        if status in (401, 403):
            raise SlurmError(f"slurmrestd refused the credentials ({status}) for {method} {path}")
        if status >= 400 or errors:
            message = "; ".join(
                " ".join(str(e[k]) for k in ("error", "description", "source") if e.get(k)) for e in errors
            ) or f"HTTP {status}"
            # A read while slurmctld is down fails with only "Unspecified error" (errno -1).
            if UNAVAILABLE_PATTERNS.search(message) or (method == "GET" and "Unspecified error" in message):
                raise SlurmUnavailable(f"{method} {path}: {message}")
            raise SlurmError(f"{method} {path} failed ({status}): {message}")
        return data

    def _fallback(self, operation: str) -> SlurmDriver:
        if self.fallback is None:
            raise Unsupported(f"slurmrestd v0.0.38 has no {operation}; construct RestDriver with fallback=CliDriver()")
        return self.fallback

    # --- SlurmDriver ------------------------------------------------------------------------

    def _owner_headers(self, user: str) -> Mapping[str, str] | None:
        """Credentials of the job's owner (None: the driver's own, when it is the owner or has no tokens)."""
        if self.tokens is None or not user or user == self.headers.get("X-SLURM-USER-NAME"):
            return None
        try:
            pwd.getpwnam(user)  # Slurm would issue a token for any name, and run the job as nobody
        except KeyError:
            raise SubmitRejected(f"the job's owner {user!r} has no passwd entry; Slurm runs jobs as their owner") from None
        try:
            token = self.tokens(user)
        except SlurmError as exc:
            raise SubmitRejected(f"cannot submit as the job's owner {user!r}: {exc}") from None
        return {**self.headers, "X-SLURM-USER-NAME": user, "X-SLURM-USER-TOKEN": token}

    def _owner_process(self, user: str) -> str | None:
        """The owner slurmrestd must run as (None: the socket's slurmrestd, whose user runs the job:
        no ``owners``, not root, the owner is that user, or root, as which slurmrestd refuses to run)."""
        if self.owners is None or os.geteuid() != 0 or not user or user == "root":
            return None
        try:
            pwd.getpwnam(user)
        except KeyError:
            raise SubmitRejected(f"the job's owner {user!r} has no passwd entry; Slurm runs jobs as their owner") from None
        try:
            if pwd.getpwuid(os.stat(self.socket_path).st_uid).pw_name == user:
                return None
        except (OSError, KeyError):
            pass
        return user

    def submit(self, request: SubmitRequest) -> int:
        if request.native:  # v0.0.38's job properties have no field for most of them
            return self._fallback(f"field for {request.native[0]}").submit(request)
        body = {"script": request.script, "job": job_properties(request, self.job_env)}
        try:
            data = self._request("POST", "/job/submit", body, self._owner_headers(request.user),
                                 as_owner=self._owner_process(request.user))
        except SlurmUnavailable:
            raise
        except SlurmError as exc:
            raise SubmitRejected(str(exc)) from None
        return int(data["job_id"])

    def jobs(self) -> list[SlurmJob]:
        return [parse_job(j) for j in self._request("GET", "/jobs").get("jobs", [])]

    def nodes(self) -> list[SlurmNode]:
        return [parse_node(n) for n in self._request("GET", "/nodes").get("nodes", [])]

    def partitions(self) -> list[SlurmPartition]:
        return [
            SlurmPartition(
                name=p["name"],
                nodes=tuple(node_names(p.get("nodes"))),
                priority_tier=int(p.get("priority_tier") or 1),
                default="default" in (p.get("flags") or ()),
                state=p.get("state") or "UP",
            )
            for p in self._request("GET", "/partitions").get("partitions", [])
        ]

    def signal(self, job_id: str, signal: str) -> None:
        self._request("DELETE", f"/job/{quote(job_id)}?signal={quote(signal)}")

    def cancel(self, job_id: str) -> None:
        self._request("DELETE", f"/job/{quote(job_id)}")

    def requeue(self, job_id: str) -> None:
        self._fallback("requeue").requeue(job_id)

    def hold(self, job_id: str) -> None:
        self._fallback("hold").hold(job_id)

    def release(self, job_id: str) -> None:
        self._fallback("release").release(job_id)

    def update_nodes(self, names: Sequence[str], state: str) -> None:
        self._fallback("node update (/node/{name} is read-only)").update_nodes(names, state)

    def will_run(self, request: SubmitRequest) -> WillRun:
        return self._fallback("will-run test (sbatch --test-only)").will_run(request)

    def batch_launched(self, job_id: str) -> bool | None:
        return self._fallback("step statistics (sstat)").batch_launched(job_id)

    def launch_timeout_s(self) -> float:
        return self._fallback("configuration (scontrol show config)").launch_timeout_s()
