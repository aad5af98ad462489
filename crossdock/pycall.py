"""The wire format of a Python call and its outcome, shared by the client and the runners.

A call is a base64 text of a cloudpickled ``(fn, args, kwargs)`` (it travels in the job spec,
``PythonCall.payload``). A ``map`` stores its function once and each task's ``(args, kwargs)``
apart (:func:`encode_fn`, :func:`encode_args`); the runner gets them joined as one payload text
(:func:`join_parts`), which :func:`decode_call` reads as well. The outcome is the cloudpickled
``("ok", value, "")`` or ``("error", exception, traceback)`` that :func:`run_call` makes. A
``map`` task of several inputs (``chunksize``) runs a :class:`Batch`: its value is the list of
its inputs' own outcomes.
Neither the client nor a backend imports the other for it.
"""

from __future__ import annotations

import base64
import os
import signal
import sys
import traceback
from typing import Any, Callable

import cloudpickle

__all__ = ["Batch", "ResultTooLarge", "Stopped", "UnpicklableResult", "decode_call", "decode_outcome", "encode_args",
           "encode_call", "encode_error", "encode_fn", "encode_value", "join_parts", "result_limit", "run_call", "run_payload"]

PARTS = "parts:"
"""Prefix of a payload text joined from a stored function and one task's arguments."""
LIMIT_ENV = "CROSSDOCK_RESULT_MAX_BYTES"
DEFAULT_LIMIT = 64 * 1024 * 1024


class ResultTooLarge(Exception):
    """A return value whose pickle is over the store's limit for one result."""


class UnpicklableResult(TypeError):
    """A return value cloudpickle cannot serialize."""


def encode_call(fn: Callable[..., Any], args: tuple = (), kwargs: dict | None = None) -> str:
    return base64.b64encode(cloudpickle.dumps((fn, tuple(args), dict(kwargs or {})))).decode()


def encode_fn(fn: Callable[..., Any]) -> bytes:
    return cloudpickle.dumps(fn)


def encode_args(args: tuple = (), kwargs: dict | None = None) -> bytes:
    return cloudpickle.dumps((tuple(args), dict(kwargs or {})))


def join_parts(fn: bytes, args: bytes) -> str:
    """One payload text from a stored function and one task's stored arguments (both checked)."""
    return f"{PARTS}{base64.b64encode(fn).decode()}:{base64.b64encode(args).decode()}"


def decode_call(payload: str) -> tuple[Callable[..., Any], tuple, dict]:
    if payload.startswith(PARTS):
        fn, _, args = payload[len(PARTS):].partition(":")
        a, k = cloudpickle.loads(base64.b64decode(args))
        return cloudpickle.loads(base64.b64decode(fn)), a, k
    return cloudpickle.loads(base64.b64decode(payload))


def encode_value(value: Any) -> bytes:
    return cloudpickle.dumps(("ok", value, ""))


def encode_error(exc: BaseException, tb: str) -> bytes:
    """The exception itself, or a ``RuntimeError`` with its repr when it does not pickle."""
    try:
        return cloudpickle.dumps(("error", exc, tb))
    except Exception:
        return cloudpickle.dumps(("error", RuntimeError(repr(exc)), tb))


def decode_outcome(data: bytes) -> tuple[str, Any, str]:
    return cloudpickle.loads(data)


def result_limit(environ: dict[str, str] | None = None) -> int:
    """The largest outcome a runner stores, in bytes (``CROSSDOCK_RESULT_MAX_BYTES``, default 64 MiB)."""
    text = (environ if environ is not None else os.environ).get(LIMIT_ENV, "")
    return int(text) if text.strip().isdigit() else DEFAULT_LIMIT


def run_call(fn: Callable[..., Any], args: tuple, kwargs: dict, limit: int, name: str = "") -> tuple[bytes, bool]:
    """Call ``fn`` and give (outcome, succeeded). A return value that does not pickle, or whose
    pickle is over ``limit`` bytes, is an error outcome that says so (and prints the traceback)."""
    name = name or getattr(fn, "__qualname__", repr(fn))
    try:
        value = fn(*args, **kwargs)
    except Stopped:
        raise
    except BaseException as exc:  # noqa: BLE001 - everything goes back to the caller
        return _failed(exc, traceback.format_exc())
    try:
        data = encode_value(value)
    except Exception as exc:  # noqa: BLE001 - cloudpickle raises many kinds
        err = UnpicklableResult(f"the return value of {name} ({type(value).__name__}) cannot be pickled: {exc};"
                                " return plain data (or write it to a file and return its path)")
        return _failed(err, "".join(traceback.format_exception(exc)))
    if len(data) > limit:
        err = ResultTooLarge(f"the return value of {name} is {len(data)} bytes pickled, over the store's limit of"
                             f" {limit} ({LIMIT_ENV}); write it to a shared directory and return its path")
        return _failed(err, "")
    return data, True


def _failed(exc: BaseException, tb: str) -> tuple[bytes, bool]:
    if tb:
        print(tb, file=sys.stderr)
    else:
        print(f"{type(exc).__name__}: {exc}", file=sys.stderr)
    return encode_error(exc, tb), False


class Batch:
    """The function of a ``map`` task that takes several inputs: ``fn`` on each in turn, each
    input's outcome made as :func:`run_call` makes it (its exception, or a value that does not
    pickle, is its own; the other inputs' values still come back). One interpreter start and one
    store round trip serve ``len(items)`` calls."""

    def __init__(self, fn: Callable[..., Any]):
        self.fn = fn

    def __call__(self, *items: Any) -> list[bytes]:
        limit = result_limit()
        return [run_call(self.fn, (item,), {}, limit)[0] for item in items]


STOP_SIGNALS = (signal.SIGTERM, signal.SIGUSR2)
"""What tells a runner its job is being stopped: SIGTERM (preemption, the time limit, a cancel)
and SIGUSR2 (``--signal=USR2@SECONDS``, submitit's warning before the time limit)."""


class Stopped(BaseException):
    """The call was interrupted by one of :data:`STOP_SIGNALS`: the attempt ends without an outcome."""

    def __init__(self, signum: int):
        super().__init__(f"stopped by signal {signum}")
        self.signum = signum


def _next_call(returned: Any) -> tuple[Callable[..., Any], tuple, dict] | None:
    """A checkpoint hook's answer: ``(fn, args, kwargs)``, submitit's ``DelayedSubmission``
    (``.function``, ``.args``, ``.kwargs``), or None (start afresh)."""
    if returned is None:
        return None
    if hasattr(returned, "function"):
        return returned.function, tuple(returned.args), dict(returned.kwargs)
    fn, args, kwargs = returned
    return fn, tuple(args), dict(kwargs)


def run_payload(payload: str, limit: int, save_checkpoint: Callable[[str], None], name: str = "") -> tuple[bytes, bool]:
    """Decode and run a payload as :func:`run_call` does (a payload that does not unpickle is
    the call's error). When the callable has a ``checkpoint`` method (submitit's habit), a stop
    signal calls ``fn.checkpoint(*args, **kwargs)`` and hands the call it returns, encoded, to
    ``save_checkpoint``: the job's next attempt runs that instead. Raises :class:`Stopped` then."""
    try:
        fn, args, kwargs = decode_call(payload)
    except BaseException as exc:  # noqa: BLE001 - a module missing where the job runs is the job's error
        return _failed(exc, traceback.format_exc())
    hook = getattr(fn, "checkpoint", None)
    if not callable(hook):
        return run_call(fn, args, kwargs, limit, name)

    def stop(signum: int, _frame: Any) -> None:
        raise Stopped(signum)

    previous = {s: signal.signal(s, stop) for s in STOP_SIGNALS}
    try:
        return run_call(fn, args, kwargs, limit, name)
    except Stopped:
        for s in STOP_SIGNALS:  # one stop is enough: the hook runs once
            signal.signal(s, signal.SIG_IGN)
        try:
            following = _next_call(hook(*args, **kwargs))
        except Exception:  # noqa: BLE001 - a broken hook: the next attempt starts afresh
            traceback.print_exc()
            following = None
        if following is not None:
            save_checkpoint(encode_call(*following))
        raise
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
