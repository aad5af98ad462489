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

import copy
import functools
import inspect
import math
import os
import shlex
import uuid
import warnings
from typing import TYPE_CHECKING, Any, Callable, Iterable, Sequence

from crossdock import gateway
from crossdock.gateway.wire import ServiceUnavailable
from crossdock.backends.pypayload import args_context, fn_context
from crossdock.backends.redis_store import embedded
from crossdock.handles import InputHandle, JobFailed, JobHandle, RemoteError, as_completed, wait  # noqa: F401 - the API's names
from crossdock.pycall import Batch, encode_args, encode_call, encode_fn
from pydantic import ValidationError
from tenacity import Retrying, retry_if_exception_type, stop_before_delay, wait_exponential

from crossdock.queue.environ import exportable
from crossdock.queue.errors import CrossdockError, InvalidArgument, InvalidOption, StoreUnavailable, shown
from crossdock.queue.models import ArraySpec, GpuRequest, JobSpec, PythonCall, validation_message
from crossdock.runtime import Runtime
from crossdock.settings import submit_umask

if TYPE_CHECKING:
    from crossdock.serve import ServiceHandle

SUBMIT_RETRY_SECONDS = 30.0
"""How long a submission is retried, with its one token, while the store or the service is away."""


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


class Client:
    def __init__(self, runtime: Runtime | None = None, user: str | None = None):
        """``user``: act as this user, which only root or a configured admin may name (default:
        the user this process runs as); else :class:`PermissionDenied`. Without ``runtime``, a
        service that runs multi-user is reached through its socket (see :mod:`crossdock.gateway`)."""
        self.gateway = gateway.connect(runtime, user)
        self.who = self.gateway.who
        self.user = self.who.name
        self._defaults: dict[str, Any] = {}

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

    def _python(self, payload: str, fn: Callable[..., Any], parts: str = "") -> PythonCall:
        return PythonCall(payload=payload, qualname=getattr(fn, "__qualname__", ""), parts=parts,
                          signature=self.gateway.sign(payload) if payload else "")

    def _runner_env(self) -> dict[str, str]:
        """What a Python job's runner needs to reach this store and its owner's key, wherever it
        runs. The Redis URL goes without its password (the spec is readable where the job runs):
        a runner of the service's user finds an embedded Redis' password in its state dir
        (``embedded.with_password``); another installation gives its runners the URL itself, as a
        multi-user service (reached through its socket) does."""
        if self.gateway.remote:
            return {}
        env = {k: v for k, v in self.runtime.child_env().items()
               if k in ("CROSSDOCK_REDIS_URL", "CROSSDOCK_STATE_DIR", "CROSSDOCK_PREFIX", "CROSSDOCK_SIGNING_KEY")}
        if "CROSSDOCK_REDIS_URL" in env:
            env["CROSSDOCK_REDIS_URL"] = embedded.without_password(env["CROSSDOCK_REDIS_URL"])
        return env

    def _python_fields(self, name: str, python: PythonCall) -> dict[str, Any]:
        env = {**exportable(dict(os.environ)), "SLURM_UMASK": submit_umask(), **self._runner_env()}
        # the outcome goes to the store: no slurm-N.out in the caller's directory unless asked (options(stdout=…))
        return dict(name=name, python=python, env=env, stdout="/dev/null")

    def options(self, **resources: Any) -> "Client":
        """A client whose submissions ask for ``resources`` (cpus, mem, gpus, gpu_model, time_limit,
        queue, nodes, …, and name/token): ``client.options(cpus=4, queue="gpu").submit(f, x, b=5)``."""
        _resources(**{k: v for k, v in {**self._defaults, **resources}.items() if k not in ("name", "token")})
        other = copy.copy(self)
        other._defaults = {**self._defaults, **resources}
        return other

    def serve(self, name: str, command: Sequence[str] | str | None = None, *, replicas: int | tuple[int, int] = 1,
              mem: int | str | None = None, **fields: Any) -> "ServiceHandle":
        """Deploy an inference service (or update yours) and return its handle: ``command`` (an
        argv, or a string split as a shell would) and/or ``image``, ``replicas`` (N or (min, max)),
        and ServiceSpec's other fields: ``port``, ``ready_path``, ``target_qps``, ``p95_ms``,
        ``cpus``, ``gpus``, ``gpu_type``, ``queue``, ``pools``, ``env``, ``fallback_after_seconds`` …
        ``client.serve("chat", ["python", "server.py"], replicas=(1, 8), target_qps=20, queue="inference")``."""
        from crossdock import serve as api
        from crossdock.queue.serving import ServiceSpec

        low, high = (replicas, replicas) if isinstance(replicas, int) else replicas
        if command is not None:
            fields["command"] = _argv(command)
        if mem is not None:
            fields["mem_mib"] = _mem_mib(mem)
        try:
            spec = ServiceSpec(name=name, min_replicas=low, max_replicas=high, **fields)
        except ValidationError as exc:
            raise InvalidArgument(validation_message(exc)) from None
        except TypeError as exc:
            raise InvalidArgument(f"replicas: {replicas!r}; give N or (MIN, MAX)") from exc
        api.deploy(self.runtime, spec, self.who, os.environ)  # its replicas find programs on this PATH
        return api.ServiceHandle(self.runtime, name, self.who)

    def service(self, name: str) -> "ServiceHandle":
        """The handle of a service already deployed (NoSuchService if there is none)."""
        from crossdock import serve as api

        api.show(self.runtime, name)
        return api.ServiceHandle(self.runtime, name, self.who)

    def submit_specs(self, specs: Iterable[JobSpec], token: str | None = None, watched: bool = True) -> list[JobHandle]:
        """Submit many specs in one atomic, pipelined step. Every submission has an idempotency
        token (``token``, else a fresh one), so that the retries while the store or the service
        does not answer (up to :data:`SUBMIT_RETRY_SECONDS`) store it once; then the last
        :class:`StoreUnavailable` (or ``ServiceUnavailable``) is raised."""
        specs, token = list(specs), token or new_token()
        retrying = Retrying(retry=retry_if_exception_type((StoreUnavailable, ServiceUnavailable)),
                            wait=wait_exponential(multiplier=0.1, max=2.0),  # 0.1, 0.2, 0.4 … 2 s
                            stop=stop_before_delay(SUBMIT_RETRY_SECONDS), reraise=True)
        return retrying(lambda: [JobHandle(self, j, watched) for j in self.gateway.submit(specs, token=token)])

    def job(self, ref: int | str) -> JobHandle:
        """The handle of a job submitted before, from any process (``client.job(12)``,
        ``client.job("12_3")``): its state, ``result()``, ``logs()``, ``cancel()``. A task of a
        ``map`` in chunks is one job whose result is its inputs' outcomes; re-attach to a whole
        map with its handles instead."""
        ids = self.gateway.resolve(str(ref))
        if len(ids) != 1:
            raise InvalidArgument(f"job: {ref!r} names an array of {len(ids)} tasks; give one task, such as '{ref}_0'")
        return JobHandle(self, self.gateway.job(ids[0]))

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> JobHandle:
        """Run ``fn(*args, **kwargs)`` as a job; its arguments pass through untouched. Resources come
        from :meth:`options` (or ``resources={...}`` when ``fn`` takes no ``resources`` argument)."""
        if not callable(fn):
            raise InvalidArgument(f"fn: {shown(fn, 80)} is not callable; submit_command runs a program")
        opts = {**self._defaults, **_legacy_options(fn, kwargs)}
        name, token = opts.pop("name", None), opts.pop("token", None)
        python = self._python(encode_call(fn, args, kwargs), fn)
        spec = self._spec(lambda: {**self._python_fields(name or getattr(fn, "__name__", "python"), python),
                                   **_resources(**opts)})
        return self.submit_specs([spec], token=token)[0]

    def submit_command(self, argv: Sequence[str], name: str | None = None, token: str | None = None,
                       **resources: Any) -> JobHandle:
        """Run ``argv`` (a list; a string is split with ``shlex`` and run without a shell)."""
        command = _argv(argv)
        resources = {**self._defaults, **resources}
        name, token = name or resources.pop("name", None), token or resources.pop("token", None)
        spec = self._spec(lambda: dict(name=name or os.path.basename(command[0]), command=command,
                                       **_resources(**resources)))
        return self.submit_specs([spec], token=token)[0]

    def submit_script(self, text: str, args: Sequence[str] = (), name: str = "script", token: str | None = None,
                      **resources: Any) -> JobHandle:
        if not isinstance(text, str):
            raise InvalidArgument(f"text: {shown(text, 80)} is not a script; give its text (decode bytes as UTF-8)")
        resources = {**self._defaults, **resources}
        name, token = resources.pop("name", name), token or resources.pop("token", None)
        spec = self._spec(lambda: dict(name=name, script=text, args=_argv(args) if args else [], **_resources(**resources)))
        return self.submit_specs([spec], token=token)[0]

    def map(self, fn: Callable[[Any], Any], inputs: Iterable[Any], max_running: int | None = None,
            chunksize: int | None = None, **resources: Any) -> list[JobHandle]:
        """One array job, one handle per input in input order. Each task takes ``chunksize``
        inputs (as ``concurrent.futures.Executor.map``'s): with many short calls, a task of 50
        inputs costs one interpreter start and one backend task instead of 50; each input still
        has its own value or exception. Without ``chunksize``, :func:`auto_chunksize` chooses it
        as ``multiprocessing.Pool.map`` does (about four tasks per slot); ``chunksize=1`` runs
        each input as its own task."""
        if not callable(fn):
            raise InvalidArgument(f"fn: {shown(fn, 80)} is not callable")
        items = list(inputs)
        if not items:
            return []
        if chunksize is None:
            cpus = _resources(**{k: v for k, v in {**self._defaults, **resources}.items()
                                 if k not in ("name", "token")})["cpus_per_task"]
            chunksize = auto_chunksize(len(items), max_running or self._slots(cpus),
                                       self.gateway.limits()["max_array_size"])
        chunksize = _whole("chunksize", chunksize)
        groups = [tuple(items[i:i + chunksize]) for i in range(0, len(items), chunksize)]
        call = Batch(fn) if chunksize > 1 else fn
        resources = {**self._defaults, **resources}
        name = resources.pop("name", getattr(fn, "__name__", "map"))
        resources.pop("token", None)
        if self.gateway.remote:
            # the multi-user service seals what reaches it through its socket one call at a time:
            # one job per task (no array, so no max_running)
            if max_running is not None:
                raise InvalidArgument("max_running: a map through the multi-user service's socket runs one job"
                                      " per input, without an array's throttle; leave max_running out")
            specs = [self._spec(lambda g=g: {**self._python_fields(name, self._python(encode_call(call, g, {}), fn)),
                                             **_resources(**resources)}) for g in groups]
            return _per_input(self.submit_specs(specs, watched=chunksize == 1), groups, chunksize)
        # the function once per array, each task's arguments apart: a task reads only its own
        from crossdock import service

        rt, ref = self.runtime, uuid.uuid4().hex
        parts = {"fn": service.seal(rt, self.who, fn_context(ref), encode_fn(call))}
        parts.update({str(i): service.seal(rt, self.who, args_context(ref, i), encode_args(g))
                      for i, g in enumerate(groups)})
        spec = self._spec(lambda: {**self._python_fields(name, self._python("", fn, parts=ref)),
                                   "array": ArraySpec(task_ids=list(range(len(groups))), max_running=max_running),
                                   **_resources(**resources)})
        rt.store.put_call_parts(ref, parts)
        return _per_input(self.submit_specs([spec], watched=chunksize == 1)[: len(groups)], groups, chunksize)

    def _slots(self, cpus: int) -> int:
        """How many tasks of ``cpus`` CPUs the nodes the scheduler knows could run at once."""
        return max(1, sum(n.cpu_milli for n in self.gateway.inventory()) // 1000 // cpus)


def auto_chunksize(inputs: int, slots: int, max_tasks: int) -> int:
    """``map``'s chunksize when none is given: ``multiprocessing.Pool.map``'s (``inputs / (4 ×
    slots)``, rounded up), so that each slot runs about four tasks, the last ones balancing the
    load, instead of paying one interpreter start and one backend task per input; never more
    tasks than an array may hold (``max_tasks``)."""
    return max(1, math.ceil(inputs / (4 * max(slots, 1))), math.ceil(inputs / max(max_tasks, 1)))


def _per_input(handles: list[JobHandle], groups: list[tuple], chunksize: int) -> list[JobHandle]:
    """One handle per input: the task's own when it takes one input, else one per input of it."""
    if chunksize == 1:
        return handles
    return [h for task, g in zip(handles, groups) for h in InputHandle.of(task, len(g))]


_OPTION_NAMES = frozenset(inspect.signature(_resources).parameters) - {"hints"} | set(JobSpec.model_fields) | {
    "name", "token", "resources", "kwargs"}


def _legacy_options(fn: Callable[..., Any], kwargs: dict[str, Any]) -> dict[str, Any]:
    """Take out of ``kwargs`` the submit options of the old form (``submit(f, x, cpus=2)``): a
    keyword that names an option and that ``fn`` does not accept (``resources=`` a dict of them).
    A keyword ``fn`` accepts is always its own. Warns: :meth:`Client.options` is the way now."""
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):  # a builtin without a signature: every keyword is the function's
        return {}
    if any(p.kind is p.VAR_KEYWORD for p in params.values()):
        return {}
    taken = {k: kwargs.pop(k) for k in [k for k in kwargs if k in _OPTION_NAMES and k not in params]}
    if not taken:
        return {}
    warnings.warn(f"submit(..., {', '.join(sorted(taken))}=...): pass resources through client.options(...)"
                  " (or resources={...}); submit's keywords now go to the function", DeprecationWarning, stacklevel=3)
    nested = taken.pop("resources", None) or {}
    if not isinstance(nested, dict):
        raise InvalidArgument(f"resources: {shown(nested, 80)} is not a dict of resources; give e.g. {{'cpus': 2}}")
    if "kwargs" in taken:  # the old way to pass the function's keywords
        kwargs.update(taken.pop("kwargs") or {})
    return {**nested, **taken}


def task(_fn: Callable[..., Any] | None = None, *, client: Client | None = None, **resources: Any):
    """``@task(queue="preprocessing", cpus=2, mem="1G")``: calling ``f.submit(*args)`` runs it as a job;
    calling ``f(*args)`` still runs it here."""

    def wrap(fn: Callable[..., Any]):
        @functools.wraps(fn)
        def local(*args: Any, **kwargs: Any) -> Any:
            return fn(*args, **kwargs)

        def submit(*args: Any, **kwargs: Any) -> JobHandle:
            return (client or _default_client()).options(**resources).submit(fn, *args, **kwargs)

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
