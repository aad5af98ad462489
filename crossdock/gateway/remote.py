"""The faces' view of a multi-user service: every call goes to its Unix socket, which knows the
caller from the kernel; this process never reaches Redis (nor needs its password)."""

from __future__ import annotations

import socket
import threading
from pathlib import Path
from typing import Any, Sequence

from crossdock.gateway import wire
from crossdock.gateway.wire import ServiceUnavailable
from crossdock.queue.models import Job, JobSpec
from crossdock.queue.serving import ServiceRecord, ServiceSpec
from crossdock.queue.snapshot import Node

TIMEOUT_SECONDS = 120.0
"""A call waits this long for its answer (the service's own store retries take seconds)."""


class Caller:
    """Who the service says this process is (``name``, ``admin``), as ``service.Caller``."""

    def __init__(self, name: str, admin: bool):
        self.name, self.admin = name, admin


class Remote:
    remote = True

    def __init__(self, path: Path, declared: str | None = None):
        self.path, self.declared = path, declared
        self._sock: socket.socket | None = None
        self._file: Any = None
        self._lock = threading.Lock()
        hello = self.call("limits")
        self.who = Caller(hello["user"], hello["admin"])
        self._limits = hello

    def _connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(TIMEOUT_SECONDS)
        try:
            sock.connect(str(self.path))
        except OSError as exc:
            sock.close()
            raise ServiceUnavailable(f"the crossdock service's socket {self.path} does not answer ({exc.strerror or exc});"
                                     " is `crossdock up --multi-user` running? (CROSSDOCK_SOCKET=none: no service)") from None
        self._sock, self._file = sock, sock.makefile("rb")

    def _close(self) -> None:
        if self._sock is not None:
            self._file.close()
            self._sock.close()
        self._sock = self._file = None

    def _said(self) -> bytes:
        """What the service wrote before it closed a connection our request could not finish on."""
        try:
            self._sock.settimeout(1.0)
            return self._file.readline(wire.MAX_LINE + 1)
        except (OSError, ValueError):
            return b""

    def call(self, op: str, **args: Any) -> Any:
        request = wire.dumps({"op": op, "args": {k: wire.encode_arg(v) for k, v in args.items()}, "as": self.declared})
        with self._lock:
            for attempt in (1, 2):  # once more on a connection the service closed (it restarted)
                if self._sock is None:
                    self._connect()
                try:
                    self._sock.sendall(request)
                    line = self._file.readline(wire.MAX_LINE + 1)
                except OSError as exc:
                    line = self._said()  # a refusal the service wrote before it closed (a limit's line)
                    self._close()
                    if line:
                        break
                    if attempt == 2:
                        raise ServiceUnavailable(f"the crossdock service at {self.path}: {exc}") from None
                    continue
                if line:
                    break
                self._close()
                if attempt == 2:
                    raise ServiceUnavailable(f"the crossdock service at {self.path} closed the connection")
        answer = wire.json.loads(line)
        if "error" in answer:
            raise wire.rebuild(answer["error"])
        return wire.OPS[op].back(answer["ok"])

    # --- the same methods as Direct ----------------------------------------------------------
    def limits(self) -> dict[str, Any]:
        return self._limits

    def submit(self, specs: Sequence[JobSpec], token: str | None = None) -> list[Job]:
        return self.call("submit", specs=list(specs), token=token)

    def check(self, specs: Sequence[JobSpec]) -> list[Job]:
        return self.call("check", specs=list(specs))

    def cancel(self, refs: Sequence[str]) -> list[tuple[str, str]]:
        return self.call("cancel", refs=list(refs))

    def hold(self, refs: Sequence[str], held: bool) -> list[tuple[Job, bool]]:
        return self.call("hold", refs=list(refs), held=held)

    def requeue(self, refs: Sequence[str]) -> list[tuple[Job, bool]]:
        return self.call("requeue", refs=list(refs))

    def update(self, refs: Sequence[str], changes: dict[str, Any]) -> list[tuple[Job, bool]]:
        return self.call("update", refs=list(refs), changes=dict(changes))

    def authorize(self, job_id: int, action: str) -> None:
        self.call("authorize", job_id=job_id, action=action)

    def result(self, job_id: int) -> bytes | None:
        return self.call("result", job_id=job_id)

    def sign(self, payload: str) -> str:
        return ""  # the service seals a payload that reaches it through the socket

    def jobs(self, ids: Sequence[int]) -> list[Job]:
        return [j for part in _pieces(ids) for j in self.call("jobs", ids=part)]

    def job(self, job_id: int) -> Job:
        return self.call("job", job_id=job_id)

    def resolve(self, ref: str) -> list[int]:
        return self.call("resolve", ref=ref)

    def ids(self, which: str) -> list[int]:
        return self.call("ids", which=which)

    def events(self, job_id: int) -> list[dict[str, str]]:
        return self.call("events", job_id=job_id)

    def event_stream(self, job_ids: Sequence[int], since: float | None, after: str | None, count: int,
                     block_ms: int | None) -> dict[str, Any]:
        return self.call("event_stream", job_ids=list(job_ids), since=since, after=after, count=count,
                         block_ms=block_ms)

    def ids_after(self, after: int, count: int) -> list[int]:
        return self.call("ids_after", after=after, count=count)

    def history(self, since: float | None) -> list[dict[str, Any]]:
        return self.call("history", since=since)

    def planned(self, ids: Sequence[int]) -> list[list[Any]]:
        return [p for part in _pieces(ids) for p in self.call("planned", ids=part)]

    def why(self, job_id: int) -> dict[str, Any]:
        return self.call("why", job_id=job_id)

    def usage(self) -> dict[str, float]:
        return self.call("usage")

    def inventory(self) -> list[Node]:
        return self.call("inventory")

    def backend_logs(self, job_id: int) -> str | None:
        return self.call("backend_logs", job_id=job_id)

    def health(self) -> dict[str, Any]:
        return self.call("health")

    def autoscaling(self) -> dict[str, Any]:
        return self.call("autoscaling")

    def deschedule(self, dry_run: bool) -> dict[str, Any]:
        return self.call("deschedule", dry_run=dry_run)

    def services(self) -> list[ServiceRecord]:
        return self.call("services")

    def service(self, name: str) -> Any:
        return self.call("service", name=name)

    def deploy(self, spec: ServiceSpec) -> ServiceRecord:
        return self.call("deploy", spec=spec)

    def service_update(self, name: str, changes: dict[str, Any]) -> ServiceRecord:
        return self.call("service_update", name=name, changes=changes)

    def service_scale(self, name: str, replicas: int | None) -> ServiceRecord:
        return self.call("service_scale", name=name, replicas=replicas)

    def service_delete(self, name: str) -> ServiceRecord:
        return self.call("service_delete", name=name)

    def config_in_force(self) -> dict[str, Any]:
        return self.call("config_in_force")

    def apply_config(self, text: str, source: str, wait: float) -> dict[str, Any]:
        return self.call("apply_config", text=text, source=source, wait=wait)

def _pieces(ids: Sequence[int]) -> list[list[int]]:
    """``ids`` in requests of at most :data:`wire.MAX_IDS` (what the service reads at once)."""
    ids = list(ids)
    return [ids[i:i + wire.MAX_IDS] for i in range(0, len(ids), wire.MAX_IDS)]
