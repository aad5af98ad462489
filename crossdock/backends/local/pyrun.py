"""Run one cloudpickled Python call and write its outcome: ``python -m ... PAYLOAD RESULT [CHECKPOINT]``.

PAYLOAD and RESULT are files, or ``fd:N``: descriptors the supervisor opened in its own 0700
workspace and handed down, so that a job run as its owner needs no access to the service's state
directory. The supervisor checked the payload's seals before starting this (the owner's key is
the service's to derive) and seals the outcome when it stores it. The call itself runs as every
backend's runner runs it (:func:`crossdock.pycall.run_call`); the exit status is 0 or 1 so the
job's state tells success without reading the result. Stopped (SIGTERM) while a callable with a
``checkpoint()`` hook runs, it writes the call the hook returned to CHECKPOINT (which the
supervisor seals and stores for the next attempt) and exits 128 + the signal, with no outcome.
"""

from __future__ import annotations

import os
import sys
from typing import IO

from crossdock.pycall import Stopped, result_limit, run_payload


def _open(arg: str, mode: str) -> IO:
    return os.fdopen(int(arg[3:]), mode) if arg.startswith("fd:") else open(arg, mode)


def main(argv: list[str]) -> int:
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr] - its output is followed live
    with _open(argv[1], "r") as f:
        payload = f.read()

    def save(text: str) -> None:
        if len(argv) > 3:
            with _open(argv[3], "w") as f:
                f.write(text)

    try:
        outcome, ok = run_payload(payload, result_limit(), save)
    except Stopped as stop:
        return 128 + stop.signum
    with _open(argv[2], "wb") as result:
        result.write(outcome)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
