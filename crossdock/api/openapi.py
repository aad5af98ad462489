"""The API's OpenAPI schema as published in ``docs/openapi.json`` (a test checks it is current).

    python -m crossdock.api.openapi > docs/openapi.json
"""

from __future__ import annotations

import json
from typing import Any


def schema() -> dict[str, Any]:
    from crossdock.api.app import create_app

    return create_app(None).openapi()


def text() -> str:
    return json.dumps(schema(), indent=2, sort_keys=True) + "\n"


if __name__ == "__main__":
    import sys

    sys.stdout.write(text())
