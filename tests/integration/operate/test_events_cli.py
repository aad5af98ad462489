"""``crossdock events`` over a real store: the global and per-job streams, --since, --job for an
array, --json, a follow (-f) that prints an event written after it started, and bad input."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from crossdock import service
from crossdock.queue.models import JobSpec
from crossdock.queue.states import JobState

pytestmark = [pytest.mark.operate, pytest.mark.redis]


def cli(env, *args, timeout=60):
    return subprocess.run([sys.executable, "-m", "crossdock.cli.main", *args], env={**os.environ, **env,
                          "CROSSDOCK_SOCKET": "none"}, capture_output=True, text=True, timeout=timeout)


def submit(rt, n=1, array=None):
    spec = JobSpec(command=["true"], name="ev", **({"array": array} if array else {}))
    return service.submit(rt, [spec] * n)


def test_the_service_reads_global_and_job_streams_with_a_cursor(runtime):
    a, b = submit(runtime, 2)
    assert runtime.store.transition(a.id, JobState.SCHEDULED, actor="scheduler-x", reason="", bump_attempt=True)
    runtime.store.record_refusal(b.id, "mallory", "cancel")
    page = service.events(runtime)
    kinds = [(e.get("job"), e.get("event") or f"{e['from']}->{e['to']}") for e in page["events"]]
    assert kinds == [(str(a.id), "submitted"), (str(b.id), "submitted"), (str(a.id), "PENDING->SCHEDULED"),
                     (str(b.id), "refused")]
    assert page["last"] == page["events"][-1]["id"]
    mine = service.events(runtime, [a.id])["events"]
    assert [e.get("to") for e in mine] == ["PENDING", "SCHEDULED"] and {e["job"] for e in mine} == {str(a.id)}
    assert mine[1]["actor"] == "scheduler-x"
    # the cursor reads on from where it was: nothing new, then exactly the new event
    assert service.events(runtime, after=page["last"])["events"] == []
    runtime.store.transition(a.id, JobState.RUNNING, actor="local")
    new = service.events(runtime, after=page["last"], block_ms=500)["events"]
    assert [(e["job"], e["to"]) for e in new] == [(str(a.id), "RUNNING")]
    # since: a time after everything so far gives nothing; before, everything
    assert service.events(runtime, since=time.time() + 5)["events"] == []
    assert len(service.events(runtime, since=0)["events"]) == 5


def test_events_command_since_job_json_and_array(crossdock_env, runtime):
    job, = submit(runtime)
    tasks = submit(runtime, array={"task_ids": [0, 1, 2]})
    r = cli(crossdock_env, "events", "--since", "5m")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.strip().splitlines()
    assert len(lines) == 4 and all("submitted" in line and "by " in line for line in lines), r.stdout
    assert f"job {job.id}" in lines[0]
    r = cli(crossdock_env, "events", "--job", str(tasks[0].array_job_id), "--json")
    assert r.returncode == 0, r.stderr
    rows = [json.loads(line) for line in r.stdout.splitlines()]
    assert sorted(int(e["job"]) for e in rows) == sorted(t.id for t in tasks)
    assert cli(crossdock_env, "events", "--since", "2050-01-01").stdout == ""


@pytest.mark.parametrize("args,needle", [
    (["--since", "yesterdayish"], "--since: invalid time 'yesterdayish'"),
    (["--job", "999999"], "--job '999999': no such job"),
    (["--count", "0"], "--count"),
], ids=["bad-since", "unknown-job", "bad-count"])
def test_events_bad_input_is_one_line(crossdock_env, runtime, args, needle):
    r = cli(crossdock_env, "events", *args)
    assert r.returncode == 2, r
    assert len(r.stderr.strip().splitlines()) == 1 and needle in r.stderr, r.stderr


def test_follow_prints_an_event_written_after_it_started(crossdock_env, runtime):
    job, = submit(runtime)
    proc = subprocess.Popen([sys.executable, "-m", "crossdock.cli.main", "events", "-f", "--job", str(job.id)],
                            env={**os.environ, **crossdock_env, "CROSSDOCK_SOCKET": "none"},
                            stdout=subprocess.PIPE, text=True)
    try:
        assert "submitted" in proc.stdout.readline()
        runtime.store.cancel(job.id, actor="alice")
        line = proc.stdout.readline()  # blocks until the follow prints it (the test's timeout bounds it)
        assert f"job {job.id}" in line and "PENDING -> CANCELLED" in line and "by alice" in line, line
    finally:
        proc.terminate()
        proc.wait(10)
