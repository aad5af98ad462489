"""Importing the worker modules starts no process and opens no connection (the app is a factory)."""

from __future__ import annotations

import subprocess
import sys

PROBE = """
import socket, subprocess, os
calls = []
socket.socket.connect = lambda self, *a: calls.append(("connect", a))
subprocess.Popen.__init__ = lambda self, *a, **k: calls.append(("popen", a))
os.fork = lambda: calls.append(("fork",)) or 0
import crossdock.workers.app, crossdock.workers.tasks, crossdock.workers.leader, crossdock.workers.follow
import crossdock.backends.registry, crossdock.runtime
print(calls)
"""


def test_importing_the_workers_does_nothing_but_define(tmp_path):
    env = {"CROSSDOCK_STATE_DIR": str(tmp_path / "state"), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    out = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
    assert not (tmp_path / "state").exists()
