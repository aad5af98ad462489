"""The remote runner (``crossdock.workers.pyjob``): it reads its call from the store (a map task its
own parts), checks every seal, runs the call and stores the sealed outcome under its job id; a
return value that does not pickle or is too large is an error outcome that says so."""

from __future__ import annotations

import threading
from pathlib import Path
from types import SimpleNamespace

import pytest

from crossdock import signing
from crossdock.backends.kubernetes import manifests
from crossdock.backends.pypayload import args_context, fn_context, verified_payload
from crossdock.backends.slurm.request import render_script
from crossdock.pycall import ResultTooLarge, UnpicklableResult, decode_outcome, encode_args, encode_call, encode_fn
from crossdock.queue.errors import BadSignature, NoSuchJob
from crossdock.queue.models import ArraySpec, Job, JobSpec, PythonCall
from crossdock.workers import pyjob


class Store:
    """The store methods the runner uses, in memory."""

    def __init__(self, jobs: list[Job], parts: dict[str, dict[str, bytes]] | None = None):
        self.jobs, self.parts, self.results = {j.id: j for j in jobs}, parts or {}, {}

    def get(self, job_id: int) -> Job:
        if job_id not in self.jobs:
            raise NoSuchJob(job_id)
        return self.jobs[job_id]

    def resolve(self, ref: str) -> list[int]:
        head, _, task = ref.partition("_")
        return [j.id for j in self.jobs.values() if j.array_job_id == int(head) and j.array_task_id == int(task)]

    def call_parts(self, ref: str, *fields: str) -> list[bytes | None]:
        return [self.parts.get(ref, {}).get(f) for f in fields]

    def set_result(self, job_id: int, blob: bytes) -> None:
        self.results[job_id] = blob

    def append_output(self, job_id: int, chunks: list[str]) -> None:
        self.outputs = getattr(self, "outputs", {})
        self.outputs.setdefault(job_id, []).extend(chunks)

    def set_checkpoint(self, job_id: int, sealed: bytes) -> None:
        self.checkpoints = {**getattr(self, "checkpoints", {}), job_id: sealed}

    def checkpoint(self, job_id: int) -> bytes | None:
        return getattr(self, "checkpoints", {}).get(job_id)


def key(state: Path) -> bytes:
    return signing.user_key(state, "alice")


def submitted(state: Path, fn, *args, **kwargs) -> Job:
    payload = encode_call(fn, args, kwargs)
    return Job(id=7, attempts=1, spec=JobSpec(user="alice", python=PythonCall(
        payload=payload, qualname=getattr(fn, "__qualname__", ""),
        signature=signing.sign_text(key(state), "payload", payload))))


def mapped(state: Path, fn, items: list) -> Store:
    ref = "r1"
    parts = {"fn": signing.seal(key(state), fn_context(ref), encode_fn(fn))}
    parts.update({str(i): signing.seal(key(state), args_context(ref, i), encode_args((x,))) for i, x in enumerate(items)})
    spec = JobSpec(user="alice", python=PythonCall(payload="", parts=ref), array=ArraySpec(task_ids=list(range(len(items)))))
    jobs = [Job(id=10 + i, attempts=1, array_job_id=10, array_task_id=i, spec=spec) for i in range(len(items))]
    return Store(jobs, {ref: parts})


def run(state: Path, store: Store, **env: str) -> int:
    rt = SimpleNamespace(store=store, settings=SimpleNamespace(state_dir=state))
    return pyjob.run(rt, env)


def outcome(state: Path, store: Store, job_id: int) -> tuple:
    return decode_outcome(signing.unseal(key(state), f"result:{job_id}", store.results[job_id], "result"))


def scale(x, b=1):
    return x * b


def test_a_return_value_with_keywords_is_stored_sealed_under_the_job_id(tmp_path):
    store = Store([submitted(tmp_path, scale, 3, b=5)])
    assert run(tmp_path, store, CROSSDOCK_JOB_ID="7") == 0
    assert outcome(tmp_path, store, 7)[:2] == ("ok", 15)


def test_an_exception_is_stored_with_its_remote_traceback(tmp_path, capsys):
    store = Store([submitted(tmp_path, scale, "x", b=None)])
    assert run(tmp_path, store, CROSSDOCK_JOB_ID="7") == 1
    kind, exc, tb = outcome(tmp_path, store, 7)
    assert kind == "error" and isinstance(exc, TypeError) and "in scale" in tb
    assert "TypeError" in capsys.readouterr().err


def test_an_unpicklable_return_value_is_a_clear_error(tmp_path):
    store = Store([submitted(tmp_path, threading.Lock)])
    assert run(tmp_path, store, CROSSDOCK_JOB_ID="7") == 1
    kind, exc, _ = outcome(tmp_path, store, 7)
    assert kind == "error" and isinstance(exc, UnpicklableResult) and "cannot be pickled" in str(exc)


def test_a_result_over_the_limit_is_refused_with_the_limit_named(tmp_path):
    store = Store([submitted(tmp_path, bytes, 5000)])
    assert run(tmp_path, store, CROSSDOCK_JOB_ID="7", CROSSDOCK_RESULT_MAX_BYTES="1000") == 1
    kind, exc, _ = outcome(tmp_path, store, 7)
    assert isinstance(exc, ResultTooLarge) and "CROSSDOCK_RESULT_MAX_BYTES" in str(exc) and "1000" in str(exc)


@pytest.mark.parametrize("env", [{"CROSSDOCK_JOB_ID": "10"}, {"CROSSDOCK_ARRAY_JOB_ID": "10"}],
                         ids=["indexed-job", "slurm-array"])
def test_a_map_task_runs_its_own_input_and_stores_under_its_own_id(tmp_path, env):
    store = mapped(tmp_path, lambda x: x * 10, [1, 2, 3])
    assert run(tmp_path, store, SLURM_ARRAY_TASK_ID="2", **env) == 0
    assert list(store.results) == [12] and outcome(tmp_path, store, 12)[1] == 30


def test_a_forged_part_is_never_unpickled(tmp_path, capsys):
    store = mapped(tmp_path, abs, [1, 2])
    store.parts["r1"]["1"] = store.parts["r1"]["0"]  # task 0's sealed input replayed onto task 1
    assert run(tmp_path, store, CROSSDOCK_JOB_ID="11") == 2
    assert not store.results and "signature" in capsys.readouterr().err
    store.parts["r1"].pop("fn")
    with pytest.raises(BadSignature, match="not in the store"):
        verified_payload(store, tmp_path, store.get(10))


def test_slurm_and_kubernetes_run_the_runner_with_no_payload_in_the_command(tmp_path):
    job = submitted(tmp_path, scale, 2)
    script = render_script(job.spec)
    assert "crossdock.workers.pyjob" in script and job.spec.python.payload not in script
    argv, env = manifests._command(job, array=False)
    assert argv == manifests.PYTHON_RUNNER and not env


def test_submit_keywords_go_to_the_function_and_old_resource_keywords_warn():
    from crossdock.client import _legacy_options

    def f(a, b=0, queue=None):
        return a

    kwargs = {"b": 5, "queue": "q1"}
    assert _legacy_options(f, kwargs) == {} and kwargs == {"b": 5, "queue": "q1"}  # f takes them: f's own
    kwargs = {"b": 5, "cpus": 2, "resources": {"mem": "1G"}}
    with pytest.warns(DeprecationWarning, match="client.options"):
        assert _legacy_options(f, kwargs) == {"cpus": 2, "mem": "1G"}
    assert kwargs == {"b": 5}

    def g(**anything):
        return anything

    kwargs = {"cpus": 2}
    assert _legacy_options(g, kwargs) == {} and kwargs == {"cpus": 2}


def chatty(x):
    import os

    # the descriptors themselves, as print() writes to them in a runner (pytest swaps sys.stdout here)
    os.write(1, f"working on {x}\n".encode())
    os.write(2, b"a warning\n")
    os.system(f"echo a child sees {x}")
    return x


def test_what_the_call_prints_is_kept_in_the_store(tmp_path):
    store = Store([submitted(tmp_path, chatty, 4)])
    assert run(tmp_path, store, CROSSDOCK_JOB_ID="7") == 0
    kept = "".join(store.outputs[7])
    assert all(line in kept for line in ("working on 4\n", "a warning\n", "a child sees 4\n")), kept


class Halfway:
    def __init__(self):
        self.done = 0

    def __call__(self, n):
        import os
        import signal

        while self.done < n:
            self.done += 1
            if self.done == 2 and n == 5:
                os.kill(os.getpid(), signal.SIGTERM)  # as a preemption would
        return self.done

    def checkpoint(self, n):
        return self, (n + 1,), {}


def test_a_stopped_call_stores_its_sealed_checkpoint_and_the_next_attempt_runs_it(tmp_path):
    store = Store([submitted(tmp_path, Halfway(), 5)])
    assert run(tmp_path, store, CROSSDOCK_JOB_ID="7") == 128 + 15 and not store.results
    assert run(tmp_path, store, CROSSDOCK_JOB_ID="7") == 0
    assert outcome(tmp_path, store, 7)[:2] == ("ok", 6)  # resumed from done=2, with the call its hook chose
    store.checkpoints[7] = store.checkpoints[7][:-1] + b"x"  # tampered
    assert run(tmp_path, store, CROSSDOCK_JOB_ID="7") == 2
