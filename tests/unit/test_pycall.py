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


def test_a_batch_gives_each_input_its_own_outcome(tmp_path, capsys):
    from crossdock.pycall import Batch

    code, (kind, outcomes, _) = run(tmp_path, encode_call(Batch(lambda b: divide(6, b)), (2, 0, 3), {}))
    assert (code, kind) == (0, "ok")  # the task ran; each input's outcome is its own
    each = [decode_outcome(o) for o in outcomes]
    assert [k for k, _v, _tb in each] == ["ok", "error", "ok"]
    assert each[0][1] == 3 and each[2][1] == 2
    assert isinstance(each[1][1], ZeroDivisionError) and "ZeroDivisionError" in each[1][2]
