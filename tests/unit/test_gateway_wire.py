"""The socket's wire format: what the server answers is what the client rebuilds, errors keep
their class and line (what another user sees of a job: tests/unit/test_privacy.py)."""

from __future__ import annotations

import json
from datetime import datetime, timezone

import pytest

from crossdock.gateway import wire
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


def test_a_service_and_its_view_come_back_as_they_left():
    from crossdock.serve import ServiceView
    from crossdock.queue.serving import Endpoint, ServiceRecord, ServiceSpec, ServiceStatus

    rec = ServiceRecord(spec=ServiceSpec(name="chat", command=["serve"], user="alice"), generation=2,
                        status=ServiceStatus(ready=1), override=3, address="127.0.0.1:9000")
    view = ServiceView(rec, [(_job(command=["serve"]), Endpoint(7, 2, 0, "127.0.0.1", 9000, ready=True)),
                             (_job(command=["serve"]), None)], [{"event": "deployed"}], ["w"])
    for op, value in (("deploy", rec), ("services", [rec]), ("service", view)):
        line = wire.dumps({"ok": wire.OPS[op].out(value)})
        assert wire.OPS[op].back(json.loads(line)["ok"]) == value


def test_every_problem_of_a_config_comes_back_one_line_each():
    from crossdock.queue.errors import ConfigError

    rebuilt = wire.rebuild(json.loads(wire.dumps({"error": wire.error_of(ConfigError(["a: bad", "b: worse"]))}))["error"])
    assert isinstance(rebuilt, ConfigError) and rebuilt.errors == ["a: bad", "b: worse"]
