"""The Python API for data teams.

    from crossdock import Client
    client = Client()
    handle = client.submit(train, dataset, cpus=4, queue="preprocessing")
    print(handle.wait().state, handle.result())

``submit`` takes a Python callable (run in a worker process, its return value or exception
coming back), ``submit_command`` an argv, ``submit_script`` a batch script; ``map`` submits an
array; ``@task`` turns a function into a submitter.
"""

from __future__ import annotations

import functools
import math
import os
import shlex
import time
import uuid
from typing import Any, Callable, Iterable, Sequence

from crossdock import gateway
from crossdock.pycall import decode_outcome, encode_call
from pydantic import ValidationError

from crossdock.queue.environ import exportable
from crossdock.queue.errors import CrossdockError, InvalidArgument, InvalidOption, shown
from crossdock.queue.models import ArraySpec, GpuRequest, Job, JobSpec, PythonCall, validation_message
from crossdock.queue.states import JobState
from crossdock.runtime import Runtime
from crossdock.settings import submit_umask


class JobFailed(CrossdockError):
    """The job ended without completing (its state and exit code are attached)."""

    def __init__(self, job: Job):
        self.job = job
        super().__init__(f"job {job.display_id} ended {job.state.value} (exit code {job.exit_code}, {job.reason})")


class RemoteError(CrossdockError):
    """Wraps a remote exception that could not be re-raised as itself."""


def _whole(name: str, value: Any, low: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgument(f"{name}: {shown(value, 80)} is not a whole number; give an int ≥ {low}")
    if value < low:
        raise InvalidArgument(f"{name}: {value} is below {low}")
    return value


def _mem_mib(value: Any) -> int:
    """Slurm's ``--mem``: MiB as an int, or a string with a unit (``"4G"``); a bare float has no unit."""
    from crossdock.queue.sbatch_formats import parse_mem

    if isinstance(value, str):
        try:
            return parse_mem(value, "mem")
        except InvalidOption as exc:
            raise InvalidArgument(str(exc)) from None
    if isinstance(value, float):
        raise InvalidArgument(f"mem: {value!r} is not a whole number of MiB; give an int of MiB (e.g. {int(value * 1024)}"
                              f" for {value:g} GiB) or a string with a unit such as '{value:g}G'")
    return _whole("mem", value, 0)


def _seconds(value: Any) -> int:
    """``time_limit``: seconds (an int, or a float rounded up), or a Slurm time string (``"1-00:00"``)."""
    from crossdock.queue.sbatch_formats import parse_time

    if isinstance(value, str):
        try:
            limit = parse_time(value, "time_limit")
        except InvalidOption as exc:
            raise InvalidArgument(str(exc)) from None
        if limit is None:
            raise InvalidArgument(f"time_limit: {value!r} means no limit; pass time_limit=None for that")
        return limit
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise InvalidArgument(f"time_limit: {shown(value, 80)} is not a positive number of seconds;"
                              " give seconds (e.g. 3600) or a Slurm time such as '1:00:00'")
    return math.ceil(value)


def _resources(cpus: int = 1, mem: int | str | None = None, gpus: int | None = None, gpu_model: str | Sequence[str] | None = None,
               time_limit: int | float | str | None = None, **hints: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"cpus_per_task": _whole("cpus", cpus), **hints}
    if mem is not None:
        out["mem_per_node_mib"] = _mem_mib(mem)
    if gpus is not None and _whole("gpus", gpus, 0):
        if gpu_model is not None and not isinstance(gpu_model, (str, list, tuple)):
            raise InvalidArgument(f"gpu_model: {shown(gpu_model, 80)} is not a model name or a list of them")
        models = [gpu_model] if isinstance(gpu_model, str) else list(gpu_model or [])
        out["gpus"] = GpuRequest(count=gpus, type=models[0] if len(models) == 1 else None, per="node",
                                 models=models if len(models) > 1 else [])
    if time_limit is not None:
        out["time_limit_seconds"] = _seconds(time_limit)
    return out


_ARGUMENT_OF = {"cpus_per_task": "cpus", "mem_per_node_mib": "mem", "time_limit_seconds": "time_limit"}
"""The spec's field -> the argument of this API that sets it, for messages."""


def _argv(argv: Any) -> list[str]:
    """``submit_command``'s argv: a list of strings; a string is split as a shell would (``shlex``),
    as sbatch's ``--wrap`` takes one, but without running a shell."""
    if isinstance(argv, str):
        try:
            argv = shlex.split(argv)
        except ValueError as exc:  # an unmatched quote
            raise InvalidArgument(f"argv: cannot split {shown(argv, 80)} as a command line ({exc}); pass a list") from None
    if isinstance(argv, (bytes, bytearray)) or not isinstance(argv, Sequence):
        raise InvalidArgument(f"argv: {shown(argv, 80)} is not a command; give a list of strings such as ['ls', '-l']")
    if not argv:
        raise InvalidArgument("argv: the command is empty; give at least the program to run")
    bad = next((a for a in argv if not isinstance(a, str)), None)
    if bad is not None:
        raise InvalidArgument(f"argv: {shown(bad, 80)} is not a string; every argument must be one (use str())")
    return list(argv)


class JobHandle:
    def __init__(self, client: "Client", job: Job):
        self.client, self.id, self._job = client, job.id, job

    def __repr__(self) -> str:
        return f"JobHandle({self._job.display_id}, {self.state.value})"

    @property
    def job(self) -> Job:
        self._job = self.client.gateway.job(self.id)
        return self._job

    @property
    def state(self) -> JobState:
        return self.job.state

    def wait(self, timeout: float | None = None, poll: float = 0.1) -> Job:
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            job = self.job
            if job.state.terminal:
                return job
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"job {job.display_id} still {job.state.value} after {timeout}s")
            time.sleep(poll)

    def result(self, timeout: float | None = None) -> Any:
        """The callable's return value; its exception re-raised here with the remote traceback."""
        self.client.gateway.authorize(self.id, "read the result of")  # before waiting
        job = self.wait(timeout)
        data = self.client.gateway.result(job.id)  # refuses a forged or unsigned one
        if data is None:
            raise JobFailed(job)
        kind, value, tb = decode_outcome(data)
        if kind == "ok":
            return value
        if isinstance(value, BaseException):
            value.add_note(f"remote traceback (job {job.display_id}):\n{tb}")
            raise value
        raise RemoteError(f"job {job.display_id} raised:\n{tb}")

    def cancel(self) -> None:
        self.client.gateway.cancel([str(self.id)])

    def hold(self) -> bool:
        return self.client.gateway.hold([str(self.id)], True)[0][1]

    def release(self) -> bool:
        return self.client.gateway.hold([str(self.id)], False)[0][1]

    def requeue(self) -> bool:
        return self.client.gateway.requeue([str(self.id)])[0][1]


class Client:
    def __init__(self, runtime: Runtime | None = None, user: str | None = None):
        """``user``: act as this user, which only root or a configured admin may name (default:
        the user this process runs as); else :class:`PermissionDenied`. Without ``runtime``, a
        service that runs multi-user is reached through its socket (see :mod:`crossdock.gateway`)."""
        self.gateway = gateway.connect(runtime, user)
        self.who = self.gateway.who
        self.user = self.who.name

    @property
    def runtime(self) -> Runtime:
        """This process's own store and config (single-user); a multi-user service keeps its own."""
        if self.gateway.remote:
            raise CrossdockError(f"this client reaches the multi-user service through {self.gateway.path}:"
                                 " it has no store of its own")
        return self.gateway.rt  # type: ignore[union-attr]

    def _spec(self, fields_of: Callable[[], dict[str, Any]]) -> JobSpec:
        """A validated spec; every problem an :class:`InvalidArgument` (a ValueError) that names the argument."""
        try:
            fields = fields_of()  # the models built there (ArraySpec, GpuRequest) validate too
            fields.setdefault("user", self.user)
            fields.setdefault("workdir", os.getcwd())
            # export=ALL as sbatch: the caller's environment at submit (no secrets), and its umask
            fields.setdefault("env", {**exportable(dict(os.environ)), "SLURM_UMASK": submit_umask()})
            unknown = sorted(set(fields) - set(JobSpec.model_fields))
            if unknown:
                raise InvalidArgument(f"{unknown[0]}: not a resource or option crossdock knows; known: cpus, mem, gpus,"
                                      " gpu_model, time_limit, and JobSpec's fields (queue, nodes, ntasks, …)")
            return JobSpec(**fields)
        except ValidationError as exc:
            message = validation_message(exc)
            field = message.partition(":")[0]
            raise InvalidArgument(_ARGUMENT_OF.get(field, field) + message[len(field):]) from None

    def _python(self, payload: str, fn: Callable[..., Any]) -> PythonCall:
        return PythonCall(payload=payload, qualname=getattr(fn, "__qualname__", ""),
                          signature=self.gateway.sign(payload))

    def submit_specs(self, specs: Iterable[JobSpec], token: str | None = None) -> list[JobHandle]:
        """Submit many specs in one atomic, pipelined step."""
        return [JobHandle(self, j) for j in self.gateway.submit(list(specs), token=token)]

    def submit(self, fn: Callable[..., Any], *args: Any, name: str | None = None, token: str | None = None,
               **resources: Any) -> JobHandle:
        """Run ``fn(*args)`` as a job; ``resources``: cpus, mem, gpus, gpu_model, time_limit (s), queue, …"""
        kwargs = resources.pop("kwargs", {})
        if not callable(fn):
            raise InvalidArgument(f"fn: {shown(fn, 80)} is not callable; submit_command runs a program")
        spec = self._spec(lambda: dict(name=name or getattr(fn, "__name__", "python"),
                                       python=self._python(encode_call(fn, args, kwargs), fn),
                                       **_resources(**resources)))
        return self.submit_specs([spec], token=token)[0]

    def submit_command(self, argv: Sequence[str], name: str | None = None, token: str | None = None,
                       **resources: Any) -> JobHandle:
        """Run ``argv`` (a list; a string is split with ``shlex`` and run without a shell)."""
        command = _argv(argv)
        spec = self._spec(lambda: dict(name=name or os.path.basename(command[0]), command=command,
                                       **_resources(**resources)))
        return self.submit_specs([spec], token=token)[0]

    def submit_script(self, text: str, args: Sequence[str] = (), name: str = "script", token: str | None = None,
                      **resources: Any) -> JobHandle:
        if not isinstance(text, str):
            raise InvalidArgument(f"text: {shown(text, 80)} is not a script; give its text (decode bytes as UTF-8)")
        spec = self._spec(lambda: dict(name=name, script=text, args=_argv(args) if args else [], **_resources(**resources)))
        return self.submit_specs([spec], token=token)[0]

    def map(self, fn: Callable[[Any], Any], inputs: Iterable[Any], max_running: int | None = None,
            **resources: Any) -> list[JobHandle]:
        """One array job, one task per input; handles in input order."""
        if not callable(fn):
            raise InvalidArgument(f"fn: {shown(fn, 80)} is not callable")
        items = list(inputs)
        if not items:
            return []
        name = resources.pop("name", getattr(fn, "__name__", "map"))
        payload = encode_call(_call_indexed, (fn, items))
        spec = self._spec(lambda: dict(name=name, python=self._python(payload, fn),
                                       array=ArraySpec(task_ids=list(range(len(items))), max_running=max_running),
                                       **_resources(**resources)))
        return self.submit_specs([spec])[: len(items)]


def _call_indexed(fn: Callable[[Any], Any], items: list[Any]) -> Any:
    return fn(items[int(os.environ["SLURM_ARRAY_TASK_ID"])])


def task(_fn: Callable[..., Any] | None = None, *, client: Client | None = None, **resources: Any):
    """``@task(queue="preprocessing", cpus=2, mem="1G")``: calling ``f.submit(*args)`` runs it as a job;
    calling ``f(*args)`` still runs it here."""

    def wrap(fn: Callable[..., Any]):
        @functools.wraps(fn)
        def local(*args: Any, **kwargs: Any) -> Any:
            return fn(*args, **kwargs)

        def submit(*args: Any, **kwargs: Any) -> JobHandle:
            return (client or _default_client()).submit(fn, *args, kwargs=kwargs, **resources)

        def map_(inputs: Iterable[Any], **extra: Any) -> list[JobHandle]:
            return (client or _default_client()).map(fn, inputs, **{**resources, **extra})

        local.submit = submit  # type: ignore[attr-defined]
        local.map = map_  # type: ignore[attr-defined]
        return local

    return wrap(_fn) if _fn is not None else wrap


@functools.lru_cache(maxsize=1)
def _default_client() -> Client:
    return Client()



def new_token() -> str:
    """A fresh idempotency token for callers that retry submissions."""
    return uuid.uuid4().hex
