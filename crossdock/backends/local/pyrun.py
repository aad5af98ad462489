"""Run one cloudpickled Python call and write its outcome: ``python -m ... PAYLOAD RESULT``.

The result file holds a cloudpickled ``("ok", value)`` or ``("error", exception, traceback)``
(the format is :mod:`crossdock.pycall`'s); the exit status is 0 or 1 so the job's state tells
success without reading it.
"""

from __future__ import annotations

import sys
import traceback
from pathlib import Path

from crossdock.pycall import decode_call, encode_error, encode_value


def main(argv: list[str]) -> int:
    payload, result = Path(argv[1]), Path(argv[2])
    fn, args, kwargs = decode_call(payload.read_text())
    try:
        value = fn(*args, **kwargs)
    except BaseException as exc:  # noqa: BLE001 - everything goes back to the caller
        tb = traceback.format_exc()
        result.write_bytes(encode_error(exc, tb))
        print(tb, file=sys.stderr)
        return 1
    result.write_bytes(encode_value(value))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
