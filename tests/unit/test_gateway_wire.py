"""The socket's wire format: what the server answers is what the client rebuilds, errors keep
their class and line, and another user's job travels without its environment or payload."""

from __future__ import annotations

import json
from datetime import datetime, timezone

import pytest

from crossdock import service
from crossdock.gateway import wire
from crossdock.gateway.server import redacted
from crossdock.queue.errors import CrossdockError, NoSuchJob, PermissionDenied
from crossdock.queue.models import Job, JobSpec, PythonCall


def _job(**spec) -> Job:
    return Job(id=7, spec=JobSpec(user="alice", env={"TOKEN": "x"}, **spec), attempts=2,
               submit_time=datetime(2026, 1, 2, tzinfo=timezone.utc), nodes=["n1"])


@pytest.mark.parametrize("op, value", [
    ("jobs", [_job(command=["true"])]),
    ("job", _job(python=PythonCall(payload="eA==", signature="ab"))),
    ("hold", [(_job(command=["true"]), True)]),
    ("cancel", [("7", "CANCELLED")]),
    ("result", b"\x00\xffpickle"),
    ("result", None),
], ids=["jobs", "job", "hold", "cancel", "result", "no-result"])
def test_an_answer_comes_back_as_it_left(op, value):
    line = wire.dumps({"ok": wire.OPS[op].out(value)})
    assert wire.OPS[op].back(json.loads(line)["ok"]) == value


@pytest.mark.parametrize("exc", [PermissionDenied("cancel job 7: it belongs to 'alice'"), NoSuchJob("12_x"),
                                 CrossdockError("plain")], ids=["denied", "no-such-job", "root"])
def test_an_error_keeps_its_class_and_its_line(exc):
    rebuilt = wire.rebuild(json.loads(wire.dumps({"error": wire.error_of(exc)}))["error"])
    assert type(rebuilt) is type(exc) and str(rebuilt) == str(exc)


def test_an_unknown_error_type_is_a_crossdock_error():
    rebuilt = wire.rebuild({"type": "SystemExit", "message": "no"})
    assert type(rebuilt) is CrossdockError and str(rebuilt) == "no"


def test_another_users_job_travels_without_its_environment_or_payload():
    job = _job(python=PythonCall(payload="eA==", signature="ab"))
    assert redacted(job, service.Caller("alice", False)) is job
    assert redacted(job, service.Caller("root", True)) is job
    other = redacted(job, service.Caller("bob", False))
    assert other.spec.env == {} and other.spec.python.payload == "" and other.spec.python.signature == ""
    assert other.spec.user == "alice" and other.id == 7 and job.spec.env == {"TOKEN": "x"}
