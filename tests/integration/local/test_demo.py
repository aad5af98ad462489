"""The README's first command: ``crossdock demo`` on the embedded default, as a new user runs it."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from crossdock.backends.redis_store import embedded

pytestmark = [pytest.mark.redis, pytest.mark.celery]


def test_the_demo_runs_its_batch_to_the_expected_ends_and_prints_no_secret(tmp_path):
    state = tmp_path / "state"
    env = {k: v for k, v in os.environ.items() if not k.startswith("CROSSDOCK_")}
    env["CROSSDOCK_STATE_DIR"] = str(state)
    try:
        r = subprocess.run([sys.executable, "-m", "crossdock", "demo"], env=env, cwd=tmp_path, capture_output=True,
                           text=True, timeout=240)
        password = embedded.password_path(state).read_text().strip()
    finally:
        embedded.stop(state, timeout=10)  # only if the demo failed half-way: it stops its embedded Redis
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert "demo finished as expected" in r.stdout
    assert "states: CANCELLED 1, COMPLETED 12, FAILED 1" in r.stdout
    assert password and password not in r.stdout + r.stderr  # the embedded Redis' password, masked
