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


class Resumable:
    """Stops itself halfway (as a preemption's SIGTERM would) and resumes from its checkpoint."""

    def __init__(self):
        self.done = 0

    def __call__(self, n):
        import os
        import signal

        while self.done < n:
            self.done += 1
            if self.done == 3:
                os.kill(os.getpid(), signal.SIGTERM)
        return self.done

    def checkpoint(self, n):
        return self, (n + 1,), {}


def test_a_stopped_call_with_a_checkpoint_hook_hands_on_the_call_that_resumes_it():
    import signal

    from crossdock.pycall import Stopped, run_payload

    saved = []
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(Stopped) as stop:
        run_payload(encode_call(Resumable(), (10,)), 1 << 20, saved.append)
    assert stop.value.signum == signal.SIGTERM and signal.getsignal(signal.SIGTERM) is before
    fn, args, kwargs = decode_call(saved[0])
    assert (fn.done, args, kwargs) == (3, (11,), {})  # the state it had, the call its hook chose
    outcome, ok = run_payload(saved[0], 1 << 20, saved.append)
    assert ok and decode_outcome(outcome)[1] == 11 and len(saved) == 1  # resumed past the stop: no second stop


def test_a_payload_that_does_not_unpickle_is_the_calls_error(capsys):
    from crossdock.pycall import run_payload

    outcome, ok = run_payload("bm90IGEgcGlja2xl", 1 << 20, lambda text: None)
    assert not ok and decode_outcome(outcome)[0] == "error"


@pytest.mark.parametrize("inputs,slots,max_tasks,chunksize", [
    (200, 4, 1001, 13),  # Pool.map's: four tasks per slot
    (10, 100, 1001, 1),  # more slots than inputs: one input per task
    (100_000, 1000, 1001, 100),  # no more tasks than an array holds
    (7, 0, 1001, 2),  # no slot known: as one
], ids=["four-per-slot", "plenty-of-slots", "array-limit", "no-slots"])
def test_map_chooses_its_chunksize(inputs, slots, max_tasks, chunksize):
    from crossdock.client import auto_chunksize

    assert auto_chunksize(inputs, slots, max_tasks) == chunksize


class _Store:
    def __init__(self):
        self.chunks, self.down = [], False

    def append_output(self, job_id, chunks):
        if self.down:
            raise ConnectionError("store down")
        self.chunks.extend(chunks)


def test_the_output_pump_keeps_text_whole_across_reads_and_outages_and_stops_at_its_limit(tmp_path):
    import os

    from crossdock.backends.joboutput import OutputPump

    path, store = tmp_path / "out", _Store()
    copy = os.open(tmp_path / "copy", os.O_WRONLY | os.O_CREAT)
    pump = OutputPump(store, 1, path, forward=copy, limit=20)
    path.write_bytes("été ".encode()[:1])  # "é" cut between two reads
    pump.pump()
    assert store.chunks == []
    with open(path, "ab") as f:
        f.write("été ".encode()[1:])
    store.down = True
    with pytest.raises(ConnectionError):
        pump.pump()
    store.down = False
    with open(path, "ab") as f:
        f.write(b"0123456789" * 3)
    pump.pump(final=True)
    os.close(copy)
    text = "".join(store.chunks)
    assert text.startswith("été 0123456789012345\n") and "the rest is not kept" in text
    assert (tmp_path / "copy").read_bytes() == path.read_bytes()  # the job's own output file gets it all
