"""How records look in Redis: a job as a hash of strings, the inventory as JSON, and the compact
history record a finished job leaves behind when it expires from the hot keys."""

from __future__ import annotations

import json
from dataclasses import asdict, fields
from datetime import datetime
from functools import lru_cache
from types import MappingProxyType
from typing import Any, Sequence

from pydantic import ValidationError

from crossdock.queue.models import Attempt, Job, JobSpec
from crossdock.queue.snapshot import GpuDevice, JobFacts, Node
from crossdock.queue.states import JobState

STATUS_FIELDS = ("state", "reason", "attempts", "queue", "priority_class", "priority", "preemptible", "pools",
                 "array_job_id", "array_task_id", "backend", "pool", "backend_ref", "nodes", "gpu_ids",
                 "preempt_requested", "preempt_grace", "preempt_deadline", "cancel_requested", "dispatched", "pid",
                 "explanation", "alloc_cpu_milli", "alloc_mem_mib", "exit_code", "signal", "submit_time",
                 "eligible_time", "scheduled_time", "start_time", "end_time", "max_rss_kib", "past_attempts")
"""Every field of a job hash besides ``spec``: exactly the status fields of :class:`Job`."""
STORE_FORMAT = 2
"""The store's format (``Keys.store_format``): 2, specs sealed; a store without the key is 1,
crossdock 0.1's, its specs unsealed (:mod:`.upgrade` brings it to 2)."""
SPEC_CACHE_SIZE, SPEC_CACHE_CHARS = 10_000, 16_384
"""Parsed specs kept (:func:`spec_from_json`): more than the pending jobs of a busy queue, each
at most that long (a spec with a large script is parsed each time), so at most ~160 MiB."""
FIELDS = frozenset(("spec", *STATUS_FIELDS))
_JSON = frozenset(("pools", "nodes", "gpu_ids"))
_INT = frozenset(("attempts", "priority", "array_job_id", "array_task_id", "alloc_cpu_milli", "alloc_mem_mib",
                  "exit_code", "signal", "pid", "max_rss_kib"))
_FLOAT = frozenset(("preempt_grace",))
_BOOL = frozenset(("preemptible", "preempt_requested", "cancel_requested"))
ATTEMPT_FIELDS = ("backend", "pool", "backend_ref", "nodes", "exit_code", "signal", "max_rss_kib", "start_time",
                  "end_time")
"""The job hash's fields an ended attempt keeps as they were (the requeue's Lua copies them into
``past_attempts``, with the attempt's number, the state it ended in and the requeue's reason)."""
_TIME = frozenset(("submit_time", "eligible_time", "scheduled_time", "start_time", "end_time", "dispatched",
                   "preempt_deadline"))


def encode(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):  # flags are present ("1") or absent: HEXISTS and truthiness agree
        return "1" if value else ""
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, (list, tuple, dict)):
        return json.dumps(value)
    return str(value)


def encode_fields(values: dict[str, Any]) -> dict[str, str]:
    """Status fields as stored ("" deletes); an unknown name is a programming error."""
    unknown = set(values) - FIELDS
    if unknown:
        raise KeyError(f"not a job field: {', '.join(sorted(unknown))}")
    return {k: encode(v) for k, v in values.items()}


def _decode(name: str, v: str) -> Any:
    if name == "past_attempts":
        return [_attempt(a) for a in json.loads(v)]
    if name in _JSON:
        return json.loads(v)
    if name in _INT:
        return int(v)
    if name in _FLOAT:
        return float(v)
    if name in _TIME:
        try:
            return datetime.fromisoformat(v)
        except ValueError:  # written as epoch seconds by an earlier version
            return datetime.fromtimestamp(float(v)).astimezone()
    if name in _BOOL:
        return v == "1"
    return v


def _attempt(stored: dict[str, str]) -> Attempt:
    """One ended attempt from its stored form: the job hash's strings, as the Lua copied them."""
    return Attempt(attempt=int(stored["attempt"]),
                   **{k: _decode(k, v) for k, v in stored.items() if k != "attempt" and v})


def attempts_to_json(attempts: Sequence[Attempt]) -> str:
    """``past_attempts`` as the job hash stores it (what the requeue's Lua writes)."""
    return json.dumps([{k: encode(v) for k, v in a.model_dump().items() if encode(v) != ""} for a in attempts])


_UNSTORED_DEFAULTS = {"reason": "None", "past_attempts": "[]", "nodes": "[]", "gpu_ids": "[]", "alloc_cpu_milli": "0",
                      "alloc_mem_mib": "0"}
"""A new job's fields left out of its hash while they hold these defaults (read back as the
model's defaults): ~70 B of every queued job. ``attempts`` stays (the Lua guards compare it)."""


def job_to_hash(job: Job, spec_text: str | None = None) -> dict[str, str]:
    """``spec_text``: the spec as stored, when it is not the spec's whole JSON (:mod:`.sealing`)."""
    h = {"spec": job.spec.model_dump_json(exclude_defaults=True) if spec_text is None else spec_text}
    for f in STATUS_FIELDS:
        v = attempts_to_json(job.past_attempts) if f == "past_attempts" else encode(getattr(job, f))
        if v != "" and _UNSTORED_DEFAULTS.get(f) != v:
            h[f] = v
    return h


def spec_from_json(raw: str) -> JobSpec:
    """A stored spec, parsed and validated once per distinct text (up to ``SPEC_CACHE_CHARS``):
    the scheduler reads every pending job each cycle, and a spec changes only by being rewritten
    (hold flips its flag), so the same text is the same spec. Specs are values: nothing changes
    one in place (they are replaced with ``model_copy``), which is what makes sharing the parsed
    one safe."""
    return _cached_spec(raw) if len(raw) <= SPEC_CACHE_CHARS else _parse_spec(raw)


@lru_cache(maxsize=SPEC_CACHE_SIZE)
def _cached_spec(raw: str) -> JobSpec:
    return _parse_spec(raw)


def _parse_spec(raw: str) -> JobSpec:
    try:
        return JobSpec.model_validate_json(raw)
    except ValidationError:
        # Stored before today's bounds (or around admission): kept as stored, so that it can be
        # listed and cancelled, and the scheduler sets it aside (InvalidSpec) instead of failing.
        return JobSpec.model_construct(**json.loads(raw))


def hash_to_job(job_id: int, h: dict[str, str], spec: JobSpec | None = None) -> Job:
    """The job of hash ``h``; ``spec``: its spec as already read (with its environment opened)."""
    spec = spec_from_json(h["spec"]) if spec is None else spec
    data: dict[str, Any] = {"id": job_id, "spec": _BLANK}
    for f in STATUS_FIELDS:
        v = h.get(f)
        if v:
            data[f] = _decode(f, v)
    try:
        # The status fields validated around a blank spec: pydantic runs a model's after-validators
        # again on an instance it is handed, and the spec was validated when it was parsed.
        return Job.model_validate(data).model_copy(update={"spec": spec})
    except ValidationError:
        return Job.model_construct(**{**data, "spec": spec, "state": JobState(data.get("state", JobState.PENDING))})


_BLANK = JobSpec()


# --- inventory --------------------------------------------------------------------------------

def nodes_to_json(nodes: Sequence[Node]) -> str:
    return json.dumps([{f.name: getattr(n, f.name) for f in fields(Node)}
                       | {"labels": dict(n.labels), "gpus": [asdict(g) for g in n.gpus]} for n in nodes])


def nodes_from_json(raw: str) -> list[Node]:
    nodes = []
    for d in json.loads(raw):
        d["gpus"] = tuple(GpuDevice(**{**g, "mig": tuple(g.get("mig", ()))}) for g in d["gpus"])
        d["labels"] = MappingProxyType(d["labels"])
        d["taints"] = tuple(d.get("taints", ()))
        nodes.append(Node(**d))
    return nodes


# --- history ----------------------------------------------------------------------------------

def history_record(job: Job) -> dict[str, Any]:
    """What stays of a finished job once it leaves the hot keys: who, what, where, how it ended
    (sacct's view), in a few hundred bytes; the spec's command, script and environment are dropped."""
    spec = job.spec
    return {k: v for k, v in {
        "id": job.id, "name": spec.display_name(), "user": spec.user, "queue": job.queue,
        "priority_class": job.priority_class, "state": job.state.value, "reason": job.reason,
        "exit_code": job.exit_code, "signal": job.signal, "attempts": job.attempts,
        "array_job_id": job.array_job_id, "array_task_id": job.array_task_id,
        "backend": job.backend, "pool": job.pool, "backend_ref": job.backend_ref, "nodes": job.nodes,
        "gpu_ids": job.gpu_ids, "alloc_cpu_milli": job.alloc_cpu_milli, "alloc_mem_mib": job.alloc_mem_mib,
        "submit_time": encode(job.submit_time), "start_time": encode(job.start_time),
        "end_time": encode(job.end_time), "workdir": spec.workdir, "max_rss_kib": job.max_rss_kib,
        "past_attempts": [a.model_dump(mode="json", exclude_none=True) for a in job.past_attempts],
    }.items() if v not in (None, "", [])}


def facts_from_record(rec: dict[str, Any]) -> JobFacts:
    """Dependency facts of an expired job, from its history record."""
    def when(key: str) -> datetime | None:
        return datetime.fromisoformat(rec[key]) if rec.get(key) else None

    return JobFacts(id=rec["id"], state=JobState(rec["state"]), exit_code=rec.get("exit_code"),
                    name=rec.get("name", ""), user=rec.get("user", ""), array_job_id=rec.get("array_job_id"),
                    array_task_id=rec.get("array_task_id"), end_time=when("end_time"), start_time=when("start_time"))
