"""A real API server for the tests: uvicorn in a thread on a loopback port or a Unix socket
(``crossdock api`` serves the same app), and tokens made as ``crossdock tokens create`` makes them."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import uvicorn

from crossdock.api import tokens
from crossdock.api.app import create_app
from crossdock.api.serve import config
from tests.integration.local.test_users import free_port


class ApiServer:
    def __init__(self, rt: Any, send: Any = None, uds: Path | None = None):
        self.app = create_app(rt, send)
        self.port = free_port()
        self.url = "http://crossdock" if uds else f"http://127.0.0.1:{self.port}"
        self.server = uvicorn.Server(config(self.app, port=self.port, uds=uds, log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, daemon=True, name="api")
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            assert self.thread.is_alive() and time.monotonic() < deadline, "the API server did not start"
            time.sleep(0.02)

    def close(self) -> None:
        self.server.should_exit = True
        self.thread.join(15)


def make_token(store: Any, user: str, admin: bool = False) -> dict[str, str]:
    """Authorization headers for a new token of ``user``."""
    text, record = tokens.new_token(user, admin, "test")
    assert store.access.put_token(record, actor="test")
    return {"Authorization": f"Bearer {text}"}
