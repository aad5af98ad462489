"""Random requests at the two faces a local user can write bytes to: the REST API's submit body and
the multi-user socket's wire format. Every answer is a well-formed success or a well-formed error
(REST: 201/200 with the job, or 400/403/413/422 with ``{"error", "problems"}``; the socket: one JSON
line ``{"ok": …}`` or ``{"error": {"type", "message"}}``): never a 500, never "the service failed",
never a traceback in the service's log, and the service still answers afterwards.

Every generated job is held (``hold: true``) and the REST API's sender is a sink: nothing runs.
"""

from __future__ import annotations

import json
import socket
from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from crossdock.gateway import wire
from crossdock.queue.submission import EXTRA, RENAMED, SAME
from tests.integration.local.rest import make_token
from tests.integration.security.test_security_bounds import api_of
from tests.integration.local.test_users_socket import service  # noqa: F401

pytestmark = [pytest.mark.security, pytest.mark.redis]
FUZZ = settings(max_examples=150, deadline=None, database=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])

scalars = st.one_of(st.none(), st.booleans(), st.integers(-2**63, 2**63), st.floats(allow_nan=False),
                    st.text(max_size=40))
values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                       st.dictionaries(st.text(max_size=10), inner, max_size=4)),
                      max_leaves=12)
FIELDS = [*SAME, *EXTRA, *RENAMED]
typical = st.fixed_dictionaries({}, optional={
    "command": st.one_of(st.lists(st.text(max_size=20), max_size=3), values),
    "script": st.one_of(st.just("#!/bin/sh\ntrue\n"), st.text(max_size=60)),
    "name": st.text(max_size=30), "cpus_per_task": st.integers(-5, 2**40), "mem_per_node_mib": values,
    "env": st.dictionaries(st.text(max_size=10), st.text(max_size=10), max_size=5),
    "array": st.one_of(st.fixed_dictionaries({"task_ids": st.lists(st.integers(-3, 5000), max_size=5)}), values),
    "time_limit_seconds": values, "export": values, "dependency": values, "user": st.text(max_size=10),
})
bodies = st.one_of(
    st.builds(lambda a, b: {**a, **b, "hold": True}, typical,
              st.dictionaries(st.sampled_from(FIELDS), values, max_size=4)),
    st.dictionaries(st.text(max_size=12), values, max_size=4),  # unknown fields
    values,  # not an object at all
)


@pytest.fixture
def api(runtime):
    with api_of(runtime) as server:
        yield server


def test_any_rest_submit_body_is_answered_with_a_job_or_a_well_formed_error(api, runtime, tmp_path):
    alice = make_token(runtime.store, "alice")
    statuses: Counter = Counter()

    @FUZZ
    @given(body=bodies, key=st.one_of(st.none(), st.text(st.characters(min_codepoint=33, max_codepoint=126),
                                                         min_size=1, max_size=300)))
    def one(body, key):
        if isinstance(body, dict):
            body = {"chdir": str(tmp_path), **body}
        headers = {**alice, **({"Idempotency-Key": key} if key else {})}
        r = api.client.post("/v1/jobs", content=json.dumps(body), headers={**headers, "Content-Type": "application/json"})
        statuses[r.status_code] += 1
        assert r.status_code in (201, 400, 403, 413, 422), r.text
        answer = r.json()
        if r.status_code == 201:
            assert isinstance(answer["job_id"], int) and answer["jobs"]
        else:
            assert isinstance(answer["error"], str) and answer["problems"]
            assert all(isinstance(p, str) and p and "Traceback" not in p for p in answer["problems"])

    one()
    print(f"\nREST submit bodies: {dict(statuses)}")
    assert api.client.get("/healthz").status_code == 200


def _args(op: str) -> st.SearchStrategy:
    named = {name: values for name in wire.OPS[op].args if name != "block_ms"}  # block_ms: up to 5 s each
    if op in ("submit", "check"):
        specs = st.lists(st.builds(lambda a, b: {**a, **b, "hold": True}, typical,
                                   st.dictionaries(st.sampled_from(FIELDS), values, max_size=3)), max_size=3)
        named["specs"] = st.one_of(specs, values)
    return st.fixed_dictionaries({}, optional=named)


SAFE_OPS = sorted(set(wire.OPS) - {"hold", "requeue"})
"""Every operation but those that could release a held job: nothing the fuzz stores may run."""
requests = st.one_of(
    st.sampled_from(SAFE_OPS).flatmap(lambda op: st.fixed_dictionaries(
        {"op": st.just(op), "args": st.one_of(_args(op), values)}, optional={"as": st.one_of(st.none(), st.text(max_size=8))})
    ).map(lambda r: json.dumps(r).encode()),
    st.dictionaries(st.text(max_size=8), values, max_size=3).map(lambda r: json.dumps(r).encode()),
    st.binary(max_size=200).map(lambda b: b.replace(b"\n", b" ")),  # not JSON, or not UTF-8
)


def test_any_socket_line_is_answered_with_one_well_formed_line(service):  # noqa: F811
    kinds: Counter = Counter()
    sock = socket.socket(socket.AF_UNIX)
    sock.connect(str(service["sock"]))
    sock.settimeout(60)
    lines = sock.makefile("rb")

    @FUZZ
    @given(line=requests)
    def one(line):
        if line.startswith(b'{"op": "submit_argv"') or line.lstrip().startswith(b'{"op":"submit_argv"'):
            return  # a conversation, not one answer
        sock.sendall(line + b"\n")
        answer = json.loads(lines.readline())
        if line.startswith(b'{"op":"cli_argv"'):  # a command's conversation: it ends in one "done" line
            assert set(answer) == {"done"} and set(answer["done"]) == {"stdout", "stderr", "code"}, answer
            assert "Traceback" not in answer["done"]["stderr"] and "the service failed" not in answer["done"]["stderr"]
            kinds["done"] += 1
            return
        assert set(answer) in ({"ok"}, {"error"}), answer
        if "error" in answer:
            error = answer["error"]
            assert set(error) == {"type", "message"} and error["type"] and error["message"], error
            assert not error["message"].startswith("the service failed"), error
            kinds[error["type"]] += 1
        else:
            kinds["ok"] += 1

    one()
    sock.close()
    print(f"\nsocket lines: {dict(kinds)}")
    assert "Traceback" not in service["log"].read_text()
