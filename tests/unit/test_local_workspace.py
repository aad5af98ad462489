"""The traces a local supervisor leaves beside its job, read as the reconciler reads them."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time

import pytest

from crossdock.backends.local import workspace
from crossdock.queue.states import JobState


def test_a_live_process_has_a_start_time_and_a_dead_or_zombie_one_none(tmp_path):
    assert isinstance(workspace.process_start(os.getpid()), int)
    child = subprocess.Popen(["true"])
    deadline = time.monotonic() + 10
    while workspace.process_start(child.pid) is not None:  # a zombie until reaped: dead already
        assert time.monotonic() < deadline, "the exited child still reads as alive"
        time.sleep(0.02)
    child.wait()
    assert workspace.process_start(child.pid) is None


def test_a_command_name_with_blanks_and_parentheses_is_parsed(tmp_path):
    odd = tmp_path / "a) b (c"
    shutil.copy(shutil.which("sleep"), odd)
    proc = subprocess.Popen([str(odd), "30"])
    try:
        deadline = time.monotonic() + 10
        while "a) b (c" not in open(f"/proc/{proc.pid}/stat").read():  # until exec replaced the fork's name
            assert time.monotonic() < deadline
            time.sleep(0.02)
        assert isinstance(workspace.process_start(proc.pid), int)
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.parametrize("tamper, alive", [
    (None, True),
    ("stale-beat", False),
    ("other-start", False),
    ("no-record", False),
], ids=["live", "hung", "pid-reused", "never-started"])
def test_watcher_alive_needs_the_same_live_process_and_a_recent_beat(tmp_path, tamper, alive):
    workspace.record_watcher(tmp_path, job_pid=1234)
    if tamper == "stale-beat":
        old = time.time() - workspace.STALE_SECONDS - 1
        os.utime(tmp_path / workspace.BEAT, (old, old))
    elif tamper == "other-start":
        rec = json.loads((tmp_path / workspace.WATCHER).read_text())
        (tmp_path / workspace.WATCHER).write_text(json.dumps({**rec, "start": rec["start"] - 1}))
    elif tamper == "no-record":
        (tmp_path / workspace.WATCHER).unlink()
    assert workspace.watcher_alive(tmp_path) is alive
    assert workspace.job_pid(tmp_path) == (None if tamper == "no-record" else 1234)


def test_an_outcome_reads_back_as_written_and_leaves_no_temporary_file(tmp_path):
    outcome = workspace.Outcome(JobState.FAILED, "NonZeroExitCode", 3, None, 1.5, 2.5, "local:h:9")
    assert workspace.read_outcome(tmp_path) is None
    workspace.write_outcome(tmp_path, outcome)
    assert workspace.read_outcome(tmp_path) == outcome
    assert sorted(p.name for p in tmp_path.iterdir()) == [workspace.OUTCOME]
