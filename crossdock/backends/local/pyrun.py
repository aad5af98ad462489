"""Run one cloudpickled Python call and write its outcome: ``python -m ... PAYLOAD RESULT``.

The result file holds a cloudpickled ``("ok", value)`` or ``("error", exception, traceback)``;
the exit status is 0 or 1 so the job's state tells success without reading it.
"""

from __future__ import annotations

import base64
import sys
import traceback
from pathlib import Path

import cloudpickle


def encode_call(fn, args: tuple = (), kwargs: dict | None = None) -> str:
    return base64.b64encode(cloudpickle.dumps((fn, tuple(args), dict(kwargs or {})))).decode()


def decode_outcome(data: bytes):
    return cloudpickle.loads(data)


def main(argv: list[str]) -> int:
    payload, result = Path(argv[1]), Path(argv[2])
    fn, args, kwargs = cloudpickle.loads(base64.b64decode(payload.read_text()))
    try:
        value = fn(*args, **kwargs)
    except BaseException as exc:  # noqa: BLE001 - everything goes back to the caller
        tb = traceback.format_exc()
        try:
            data = cloudpickle.dumps(("error", exc, tb))
        except Exception:
            data = cloudpickle.dumps(("error", RuntimeError(repr(exc)), tb))
        result.write_bytes(data)
        print(tb, file=sys.stderr)
        return 1
    result.write_bytes(cloudpickle.dumps(("ok", value, "")))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
