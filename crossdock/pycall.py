"""The wire format of a Python call and its outcome, shared by the client and the runner.

A call is a base64 text of a cloudpickled ``(fn, args, kwargs)`` (it travels in the job spec,
``PythonCall.payload``); its outcome is the cloudpickled ``("ok", value, "")`` or
``("error", exception, traceback)`` the runner (``crossdock.backends.local.pyrun``) writes to the
job's result file. Neither the client nor a backend imports the other for it.
"""

from __future__ import annotations

import base64
from typing import Any, Callable

import cloudpickle

__all__ = ["decode_call", "decode_outcome", "encode_call", "encode_error", "encode_value"]


def encode_call(fn: Callable[..., Any], args: tuple = (), kwargs: dict | None = None) -> str:
    return base64.b64encode(cloudpickle.dumps((fn, tuple(args), dict(kwargs or {})))).decode()


def decode_call(payload: str) -> tuple[Callable[..., Any], tuple, dict]:
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
