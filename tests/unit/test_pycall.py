"""A Python call's wire format: what the client encodes, the runner runs and the client decodes."""

from __future__ import annotations

import pytest

from crossdock.backends.local import pyrun
from crossdock.pycall import decode_call, decode_outcome, encode_call


def divide(a: int, b: int = 1) -> float:
    return a / b


def run(tmp_path, payload: str) -> tuple[int, tuple]:
    (tmp_path / "payload").write_text(payload)
    rc = pyrun.main(["pyrun", str(tmp_path / "payload"), str(tmp_path / "result.pkl")])
    return rc, decode_outcome((tmp_path / "result.pkl").read_bytes())


def test_a_call_round_trips():
    fn, args, kwargs = decode_call(encode_call(divide, (6,), {"b": 3}))
    assert fn(*args, **kwargs) == 2


@pytest.mark.parametrize("b,rc,kind", [(2, 0, "ok"), (0, 1, "error")], ids=["value", "exception"])
def test_the_runner_writes_the_outcome_and_exits_with_its_status(tmp_path, b, rc, kind, capsys):
    code, outcome = run(tmp_path, encode_call(divide, (6,), {"b": b}))
    assert (code, outcome[0]) == (rc, kind)
    if kind == "ok":
        assert outcome[1] == 3
    else:
        assert isinstance(outcome[1], ZeroDivisionError) and "ZeroDivisionError" in outcome[2]
