"""Day two for an operator: ``crossdock up`` stops cleanly and quietly, the demo leaves nothing
running, and the metrics every process serves are in Prometheus' file-discovery targets."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from crossdock.backends.local import spawner
from crossdock.backends.redis_store import embedded
from crossdock.queue.states import JobState
from tests.integration.local.test_up import Up, client_runtime, run_job, up_env, wait_until  # noqa: F401

pytestmark = [pytest.mark.daytwo, pytest.mark.redis, pytest.mark.celery]

GUARD_SECONDS = 60.0
"""A deadline that only a hang reaches: the conditions are waited on, not timed."""


def processes_of(state: Path) -> dict[int, str]:
    """Live processes started for this state directory (``crossdock up``, its workers and their pool
    children, the router, the local spawner, the embedded Redis): pid → command line."""
    found = {}
    marker = f"CROSSDOCK_STATE_DIR={state}\0".encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes()
            cmdline = (entry / "cmdline").read_bytes()
            zombie = "State:\tZ" in (entry / "status").read_text()
        except OSError:
            continue
        if not zombie and (marker in environ or str(state).encode() in cmdline):
            found[int(entry.name)] = cmdline.replace(b"\0", b" ").decode(errors="replace")
    return found


def discovered(state: Path, role: str) -> list[str]:
    """The targets of ``role`` in the state directory's Prometheus file-discovery files."""
    return [t for f in (state / "metrics" / "targets").glob(f"{role}-*.json")
            for group in json.loads(f.read_text()) for t in group["targets"]]


def gone(state: Path) -> dict[int, str]:
    """Waits until no process of ``state`` is left (a guard deadline only against a hang); those left."""
    deadline = time.monotonic() + GUARD_SECONDS
    while (left := processes_of(state)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return left


def test_up_lists_its_router_for_prometheus_and_after_sigterm_leaves_no_process_nor_banner(up_env, tmp_path, monkeypatch):
    state, env = up_env
    log = tmp_path / "up.log"
    up = Up(state, env, log)
    rt = client_runtime(state, env, monkeypatch)
    assert run_job(rt, tmp_path) is JobState.COMPLETED  # the worker dispatched it through the spawner
    started = processes_of(state)
    assert any("crossdock.backends.local.spawner" in c for c in started.values()), started
    assert any("crossdock.workers.worker" in c for c in started.values()), started
    assert embedded.pid(state) in started
    router_port = wait_until("the router to report its metrics port",  # Prometheus finds it by file discovery
                             lambda: json.loads((state / "router.json").read_text() or "{}").get("metrics_port")
                             if (state / "router.json").exists() else None, GUARD_SECONDS)
    assert f"127.0.0.1:{router_port}" in discovered(state, "router"), discovered(state, "router")
    with urllib.request.urlopen(f"http://127.0.0.1:{router_port}/metrics", timeout=10) as answer:
        assert answer.status == 200

    up.proc.send_signal(signal.SIGTERM)
    assert up.proc.wait(GUARD_SECONDS) == 0, log.read_text()[-3000:]
    assert not spawner.socket_path(state).exists()  # stopped by up, not left to wait out its idle time
    assert gone(state) == {} and embedded.pid(state) is None
    assert discovered(state, "router") == []  # its target removed with it
    out = log.read_text()
    assert "crossdock up: stopped in" in out and "embedded Redis stopped" in out, out[-3000:]
    for noise in ("SecurityWarning", "-------------- celery@", "[queues]", "superuser privileges"):
        assert noise not in out, f"{noise!r} in up's output:\n{out[-3000:]}"


def test_the_demo_tells_each_step_of_the_story_and_leaves_nothing_running(tmp_path):
    state = tmp_path / "state"
    env = {k: v for k, v in os.environ.items() if not k.startswith("CROSSDOCK_")}
    env["CROSSDOCK_STATE_DIR"] = str(state)
    try:
        r = subprocess.run([sys.executable, "-m", "crossdock", "demo"], env=env, cwd=tmp_path, capture_output=True,
                           text=True, timeout=300)
        left = gone(state)
    finally:
        for pid in processes_of(state):  # only if the demo failed half-way
            os.kill(pid, signal.SIGKILL)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-4000:]
    for line in ("step 1: one queue", "states: CANCELLED 1, COMPLETED 12, FAILED 1",
                 "step 2: preemption", "was preempted 1 time(s)", "ended COMPLETED on attempt 2",
                 "step 3: elastic queue", "etl: 8/8 jobs completed", "went back to 0",
                 "demo finished as expected", "embedded Redis stopped"):
        assert line in out, f"{line!r} not in the demo's output:\n{out[-4000:]}"
    assert left == {} and embedded.pid(state) is None
    for noise in ("killing it", "SecurityWarning", "Traceback"):
        assert noise not in out, f"{noise!r} in the demo's output:\n{out[-4000:]}"
