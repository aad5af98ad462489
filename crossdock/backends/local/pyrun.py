"""Run one cloudpickled Python call and write its outcome: ``python -m ... PAYLOAD RESULT``.

PAYLOAD and RESULT are files, or ``fd:N``: descriptors the supervisor opened in its own 0700
workspace and handed down, so that a job run as its owner needs no access to the service's state
directory. The supervisor checked the payload's seal before starting this (the owner's key is
the service's to derive) and seals the outcome when it stores it.

The result holds a cloudpickled ``("ok", value)`` or ``("error", exception, traceback)``
(the format is :mod:`crossdock.pycall`'s); the exit status is 0 or 1 so the job's state tells
success without reading it.
"""

from __future__ import annotations

import os
import sys
import traceback
from typing import IO

from crossdock.pycall import decode_call, encode_error, encode_value


def _open(arg: str, mode: str) -> IO:
    return os.fdopen(int(arg[3:]), mode) if arg.startswith("fd:") else open(arg, mode)


def main(argv: list[str]) -> int:
    with _open(argv[1], "r") as f:
        fn, args, kwargs = decode_call(f.read())
    with _open(argv[2], "wb") as result:
        try:
            value = fn(*args, **kwargs)
        except BaseException as exc:  # noqa: BLE001 - everything goes back to the caller
            tb = traceback.format_exc()
            result.write(encode_error(exc, tb))
            print(tb, file=sys.stderr)
            return 1
        result.write(encode_value(value))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
