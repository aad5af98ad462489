"""Local supervisors forked by the spawner: the same supervisor, without a fresh interpreter each."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from crossdock.backends.local import spawner, workspace
from crossdock.backends.local.supervisor import job_dir
from crossdock.queue.states import JobState
from tests.integration.local.test_e2e_local import submit
from tests.waiting import eventually

pytestmark = [pytest.mark.redis, pytest.mark.celery]


def spawner_pid(state_dir: Path) -> int | None:
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and b"crossdock.backends.local.spawner\0" + str(state_dir).encode() + b"\0" \
                    in (entry / "cmdline").read_bytes():
                return int(entry.name)
        except OSError:
            continue
    return None


def test_jobs_after_the_first_are_supervised_by_forks_of_the_spawner(cluster, tmp_path):
    rt = cluster.rt
    state = rt.settings.state_dir
    first, = submit(rt, command=["true"], workdir=str(tmp_path))
    assert cluster.wait(first.id).state is JobState.COMPLETED  # the command line's supervisor; it starts the spawner
    server = eventually("the spawner", lambda: spawner.socket_path(state).is_socket() and spawner_pid(state))
    jobs = submit(rt, command=["sh", "-c", "echo $CROSSDOCK_JOB_ID > out.$CROSSDOCK_JOB_ID; sleep 2"],
                  workdir=str(tmp_path)) + submit(rt, command=["sh", "-c", "exit 3"], workdir=str(tmp_path))
    running = cluster.wait(jobs[0].id, {JobState.RUNNING})
    sup = workspace.watcher_pid(job_dir(state, running.id, 1))
    status = Path(f"/proc/{sup}/status").read_text()
    # forked (the spawner's command line), detached (its own session, not the spawner's child), and named
    assert b"crossdock.backends.local.spawner" in Path(f"/proc/{sup}/cmdline").read_bytes()
    assert f"PPid:\t{server}\n" not in status and os.getsid(sup) != os.getsid(server)
    assert Path(f"/proc/{sup}/comm").read_text().strip() == f"cdsup-{running.id}"
    assert cluster.wait(jobs[0].id).state is JobState.COMPLETED
    failed = cluster.wait(jobs[1].id)
    assert (failed.state, failed.exit_code) == (JobState.FAILED, 3)
    assert (tmp_path / f"out.{jobs[0].id}").read_text() == f"{jobs[0].id}\n"  # the job's own environment


def test_a_spawner_refuses_other_code_and_leaves_when_its_directory_goes(tmp_path):
    state = tmp_path / "state"
    env = {**os.environ}
    spawner.start(state, env)
    pid = eventually("the spawner", lambda: spawner.socket_path(state).is_socket() and spawner_pid(state))
    # a request from code of another version is refused and the spawner exits (the caller starts a new one)
    import json
    import socket

    with socket.socket(socket.AF_UNIX) as s:
        s.connect(str(spawner.socket_path(state)))
        s.sendall(json.dumps({"args": [], "env": {}, "log": "/dev/null", "stamp": "old"}).encode() + b"\n")
        assert json.loads(s.makefile().readline()) == {"ok": False, "why": "another version"}
    eventually("the spawner to exit", lambda: spawner_pid(state) is None, timeout=10)
    # a new one leaves by itself once its socket is gone
    spawner._started.clear()
    spawner.start(state, env)
    pid = eventually("a new spawner", lambda: spawner.socket_path(state).is_socket() and spawner_pid(state))
    spawner.socket_path(state).unlink()
    eventually("the spawner to notice", lambda: not Path(f"/proc/{pid}").exists() or
             "State:\tZ" in Path(f"/proc/{pid}/status").read_text(), timeout=10)
