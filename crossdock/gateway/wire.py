"""What travels on the service's socket: one JSON object per line each way.

Request ``{"op": NAME, "args": {...}, "as": USER|null}``; answer ``{"ok": VALUE}`` or
``{"error": {"type": NAME, "message": LINE}}``. :data:`OPS` is the one table of operations: the
name of the :class:`~crossdock.gateway.direct.Direct` method each calls, and how its arguments
and its answer are spelled in JSON, so that the server and the client cannot disagree.
"""

from __future__ import annotations

import base64
import dataclasses
import json
from dataclasses import dataclass
from typing import Any, Callable

from crossdock.backends.redis_store.codec import nodes_from_json, nodes_to_json
from crossdock.queue import errors
from crossdock.queue.errors import CrossdockError
from pydantic import BaseModel

from crossdock.queue.models import Job, JobSpec
from crossdock.queue.serving import Endpoint, ServiceRecord, ServiceSpec, ServiceStatus

MAX_LINE = 256 * 1024 * 1024
"""The longest answer a client reads (a result travels inside one). Requests are bounded by the
service's config, ``limits.max_request_bytes`` (:mod:`crossdock.gateway.bounded`)."""


MAX_IDS = 10_000
"""Job ids or references in one request: a longer list would make the service read that many jobs
at once (a 16 MiB line holds millions); the client asks in pieces (:class:`~crossdock.gateway.remote.Remote`)."""


def _ids(raw: list) -> list[int]:
    return [int(i) for i in _bounded(raw)]


def _bounded(raw: Any) -> list:
    if not isinstance(raw, list):
        raise errors.InvalidArgument(f"ids: {type(raw).__name__} is not a list of job ids")
    if len(raw) > MAX_IDS:
        raise errors.InvalidArgument(f"ids: {len(raw)} in one request is over {MAX_IDS}; ask in pieces")
    return raw


class ServiceUnavailable(CrossdockError):
    """The service's socket does not answer, or the service could not reach its store."""


def _job(j: Job) -> dict:
    return j.model_dump(mode="json")


def _jobs(js: list[Job]) -> list[dict]:
    return [_job(j) for j in js]


def _unjobs(raw: list[dict]) -> list[Job]:
    return [Job.model_validate(d) for d in raw]


def _pairs(pairs: list[tuple[Job, bool]]) -> list:
    return [[_job(j), done] for j, done in pairs]


def _unpairs(raw: list) -> list[tuple[Job, bool]]:
    return [(Job.model_validate(j), bool(done)) for j, done in raw]


def _specs(raw: list) -> list[JobSpec]:
    return [JobSpec.model_validate(d) for d in raw]


def _record(rec: ServiceRecord) -> dict:
    plain = {f.name: getattr(rec, f.name) for f in dataclasses.fields(rec) if f.name not in ("spec", "status")}
    return {**plain, "spec": rec.spec.model_dump(mode="json"), "status": rec.status.model_dump(mode="json")}


def _unrecord(raw: dict) -> ServiceRecord:
    return ServiceRecord(**{**raw, "spec": ServiceSpec.model_validate(raw["spec"]),
                            "status": ServiceStatus.model_validate(raw["status"])})


def _view(view: Any) -> dict:
    return {"record": _record(view.record), "events": view.events, "warnings": view.warnings,
            "replicas": [[_job(j), None if e is None else dataclasses.asdict(e)] for j, e in view.replicas]}


def _unview(raw: dict) -> Any:
    from crossdock.serve import ServiceView

    return ServiceView(_unrecord(raw["record"]),
                       [(Job.model_validate(j), None if e is None else Endpoint(**e)) for j, e in raw["replicas"]],
                       list(raw["events"]), list(raw["warnings"]))


def _optional_int(x: Any) -> int | None:
    return None if x is None else int(x)


def _same(x: Any) -> Any:
    return x


def _b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode()


def _unb64(text: str | None) -> bytes | None:
    return None if text is None else base64.b64decode(text)


@dataclass(frozen=True)
class Op:
    args: dict[str, Callable[[Any], Any]]
    """Each argument's decoder (JSON -> Python); the client spells them with :func:`encode_arg`."""
    out: Callable[[Any], Any]
    """The answer, Python -> JSON."""
    back: Callable[[Any], Any]
    """The answer, JSON -> Python."""


OPS: dict[str, Op] = {
    "limits": Op({}, _same, _same),
    "submit": Op({"specs": _specs, "token": _same}, _jobs, _unjobs),
    "check": Op({"specs": _specs}, _jobs, _unjobs),
    "cancel": Op({"refs": _bounded}, lambda p: [list(x) for x in p], lambda r: [tuple(x) for x in r]),
    "hold": Op({"refs": _bounded, "held": bool}, _pairs, _unpairs),
    "requeue": Op({"refs": _bounded}, _pairs, _unpairs),
    "update": Op({"refs": _bounded, "changes": dict}, _pairs, _unpairs),
    "authorize": Op({"job_id": int, "action": str}, _same, _same),
    "result": Op({"job_id": int}, _b64, _unb64),
    "jobs": Op({"ids": _ids}, _jobs, _unjobs),
    "job": Op({"job_id": int}, _job, Job.model_validate),
    "resolve": Op({"ref": str}, _same, _same),
    "ids": Op({"which": str}, _same, _same),
    "events": Op({"job_id": int}, _same, _same),
    "event_stream": Op({"job_ids": _ids,
                        "since": lambda t: None if t is None else float(t),
                        "after": lambda a: None if a is None else str(a), "count": int,
                        "block_ms": lambda b: None if b is None else min(int(b), 5000)}, _same, _same),
    "ids_after": Op({"after": int, "count": int}, _same, _same),
    "history": Op({"since": lambda t: None if t is None else float(t)}, _same, _same),
    "planned": Op({"ids": _ids}, _same, _same),
    "why": Op({"job_id": int}, _same, _same),
    "usage": Op({}, _same, _same),
    "inventory": Op({}, lambda ns: json.loads(nodes_to_json(ns)), lambda raw: nodes_from_json(json.dumps(raw))),
    "backend_logs": Op({"job_id": int}, _same, _same),
    "health": Op({}, _same, _same),
    "autoscaling": Op({}, _same, _same),
    "deschedule": Op({"dry_run": bool}, _same, _same),
    "services": Op({}, lambda rs: [_record(r) for r in rs], lambda raw: [_unrecord(r) for r in raw]),
    "service": Op({"name": str}, _view, _unview),
    "deploy": Op({"spec": ServiceSpec.model_validate}, _record, _unrecord),
    "service_update": Op({"name": str, "changes": dict}, _record, _unrecord),
    "service_scale": Op({"name": str, "replicas": _optional_int}, _record, _unrecord),
    "service_delete": Op({"name": str}, _record, _unrecord),
    "config_in_force": Op({}, _same, _same),
    "apply_config": Op({"text": str, "source": str, "wait": float}, _same, _same),
}


def encode_arg(value: Any) -> Any:
    """A request argument as JSON: specs as their JSON dump, sequences as lists."""
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if isinstance(value, (list, tuple)):
        return [encode_arg(v) for v in value]
    return value


def error_of(exc: BaseException) -> dict[str, Any]:
    if isinstance(exc, errors.ConfigError):  # every problem, one line each
        return {"type": type(exc).__name__, "message": "; ".join(exc.errors), "errors": list(exc.errors)}
    return {"type": type(exc).__name__, "message": str(exc)}


def rebuild(error: dict[str, Any]) -> CrossdockError:
    """The error the service raised, as its own class when it is one of crossdock's."""
    cls = getattr(errors, error.get("type", ""), None)
    if not (isinstance(cls, type) and issubclass(cls, CrossdockError)):
        cls = ServiceUnavailable if error.get("type") == "ServiceUnavailable" else CrossdockError
    exc = cls.__new__(cls)
    Exception.__init__(exc, error.get("message", ""))
    if isinstance(exc, errors.ConfigError):
        exc.errors = [str(e) for e in error.get("errors") or [error.get("message", "")]]
    if isinstance(exc, errors.NoSuchJob):
        exc.job_id = None
    return exc


def dumps(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode() + b"\n"
