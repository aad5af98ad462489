"""Run one cloudpickled Python call and write its outcome: ``python -m ... PAYLOAD RESULT``.

PAYLOAD and RESULT are files, or ``fd:N``: descriptors the supervisor opened in its own 0700
workspace and handed down, so that a job run as its owner needs no access to the service's state
directory. The supervisor checked the payload's seals before starting this (the owner's key is
the service's to derive) and seals the outcome when it stores it. The call itself runs as every
backend's runner runs it (:func:`crossdock.pycall.run_call`); the exit status is 0 or 1 so the
job's state tells success without reading the result.
"""

from __future__ import annotations

import os
import sys
from typing import IO

from crossdock.pycall import decode_call, result_limit, run_call


def _open(arg: str, mode: str) -> IO:
    return os.fdopen(int(arg[3:]), mode) if arg.startswith("fd:") else open(arg, mode)


def main(argv: list[str]) -> int:
    with _open(argv[1], "r") as f:
        fn, args, kwargs = decode_call(f.read())
    outcome, ok = run_call(fn, args, kwargs, result_limit())
    with _open(argv[2], "wb") as result:
        result.write(outcome)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
