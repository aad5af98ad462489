"""Slurm's command habits through the real CLI and a real Redis: squeue's -t/-o/-l/--me/--start,
sacct's window and fields over hot jobs and history records, scontrol show job, scancel's filters
and sprio's factors."""

from __future__ import annotations

import json
import re
import sys
import time
from datetime import datetime, timedelta

import pytest

from crossdock import service
from crossdock.queue.models import JobSpec
from crossdock.queue.states import JobState
from crossdock.settings import current_user
from tests.integration.local.test_cli import cli

pytestmark = pytest.mark.redis


def submit(env, *args, cwd=None) -> int:
    r = cli(env, "submit", "--parsable", *args, cwd=cwd)
    assert r.returncode == 0, r.stderr
    return int(r.stdout)


def lines(r) -> list[str]:
    assert r.returncode == 0, r.stderr
    return r.stdout.splitlines()


def test_queue_short_states_format_and_state_lists(crossdock_env, store, tmp_path):
    a = submit(crossdock_env, "-H", "-J", "alpha", "-p", "training", "-t", "10", "--wrap", "true", cwd=tmp_path)
    b = submit(crossdock_env, "-H", "-J", "beta", "-p", "inference", "--wrap", "true", cwd=tmp_path)
    out = lines(cli(crossdock_env, "queue"))
    assert out[0] == "             JOBID PARTITION     NAME     USER ST       TIME  NODES NODELIST(REASON)"
    assert re.fullmatch(rf" +{a} +training +alpha +\S+ PD +0:00 +1 \(JobHeldUser\)", out[1]), out
    assert lines(cli(crossdock_env, "queue", "-h", "-o", "%i|%t|%T|%.6l|%-6j|%P")) == [
        f"{a}|PD|PENDING| 10:00|alpha |training", f"{b}|PD|PENDING|UNLIMI|beta  |inference"]
    assert cli(crossdock_env, "cancel", str(b)).returncode == 0
    assert lines(cli(crossdock_env, "queue", "-h", "-o", "%i")) == [str(a)]  # default: pending and running
    assert lines(cli(crossdock_env, "queue", "-h", "-t", "CA", "-o", "%i %t")) == [f"{b} CA"]
    assert lines(cli(crossdock_env, "queue", "-h", "-t", "pd,cancelled", "-o", "%i")) == [str(a), str(b)]
    assert lines(cli(crossdock_env, "queue", "-h", "-t", "all", "-o", "%i")) == [str(a), str(b)]
    assert lines(cli(crossdock_env, "queue", "-h", "--me", "-o", "%u")) == [current_user()]
    assert lines(cli(crossdock_env, "queue", "-h", "-u", "nobody-else")) == []
    long = lines(cli(crossdock_env, "queue", "-l"))
    assert "STATE" in long[1] and "TIME_LIMI" in long[1] and "PENDING" in long[2]
    start = lines(cli(crossdock_env, "queue", "--start"))
    assert start[0].split() == ["JOBID", "PARTITION", "NAME", "USER", "ST", "START_TIME", "NODES", "SCHEDNODES",
                                "NODELIST(REASON)"] and "N/A" in start[1]
    for args, needle in ((["-t", "PD,XX"], "--states: unknown state 'XX'"), (["-o", "%i %z"], "unknown field %z")):
        r = cli(crossdock_env, "queue", *args)
        assert r.returncode == 2 and needle in r.stderr and len(r.stderr.splitlines()) == 1, r.stderr


def test_queue_all_pages_past_ten_thousand_jobs(crossdock_env, runtime):
    [job] = service.check(runtime, [JobSpec(command=["true"], hold=True)])
    runtime.store.submit([job] * 10_050)
    out = lines(cli(crossdock_env, "queue", "-t", "all", "-h", "-o", "%i"))
    assert len(out) == 10_050 and len(set(out)) == 10_050


def test_show_is_scontrol_key_value(crossdock_env, store, tmp_path):
    a = submit(crossdock_env, "-H", "-J", "shown", "-t", "1:30:00", "-c", "2", "--wrap", "true", cwd=tmp_path)
    out = lines(cli(crossdock_env, "show", str(a)))
    text = "\n".join(out)
    assert out[0] == f"JobId={a} JobName=shown"
    assert [w for w in text.split() if re.fullmatch(r"\w*(Id|ID|id)=\d+", w)] == [f"JobId={a}"]  # the id once
    for needle in ("JobState=PENDING Reason=JobHeldUser", "TimeLimit=01:30:00", "NumCPUs=2", "TRES=cpu=2,",
                   f"WorkDir={tmp_path}", f"StdOut={tmp_path}/slurm-{a}.out", "EndTime=Unknown"):
        assert needle in text, (needle, text)
    assert "reason=None" not in text and re.search(r"SubmitTime=\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d ", text)


def test_cancel_filters_act_on_matching_jobs_only(crossdock_env, store, tmp_path):
    a = submit(crossdock_env, "-H", "-J", "keep", "--wrap", "true", cwd=tmp_path)
    b = submit(crossdock_env, "-H", "-J", "drop", "--wrap", "true", cwd=tmp_path)
    c = submit(crossdock_env, "-H", "-J", "drop", "-p", "inference", "--wrap", "true", cwd=tmp_path)
    assert lines(cli(crossdock_env, "cancel", "-v", "-n", "drop", "-p", "inference")) == [f"{c}: CANCELLED"]
    assert store.get(b).state is JobState.PENDING
    assert lines(cli(crossdock_env, "cancel", "-n", "drop")) == []  # quiet, as scancel
    assert store.get(b).state is JobState.CANCELLED
    assert lines(cli(crossdock_env, "cancel", "-v", "-t", "R")) == ["no matching jobs"]
    assert store.get(a).state is JobState.PENDING
    assert lines(cli(crossdock_env, "cancel", "-v", "--me", "-t", "PD")) == [f"{a}: CANCELLED"]
    again = cli(crossdock_env, "cancel", str(a))
    assert (again.returncode, again.stdout, again.stderr) == (0, "", f"crossdock: cancel: job {a} already CANCELLED\n")
    r = cli(crossdock_env, "cancel")
    assert r.returncode == 2 and "give job ids, or filters" in r.stderr


def test_history_reads_hot_jobs_and_history_records(cluster, crossdock_env, store, tmp_path):
    ok = submit(crossdock_env, "-J", "fine", "--wrap", "sleep 1", cwd=tmp_path)
    bad = submit(crossdock_env, "-J", "broken", "--wrap", "exit 3", cwd=tmp_path)
    cluster.wait_all([ok, bad])
    fields = ["history", "-X", "-P", "-n", "-o", "JobID,JobName,State,ExitCode,Elapsed,NodeList"]
    hot = lines(cli(crossdock_env, *fields))
    assert [r.split("|")[:4] for r in hot] == [[str(ok), "fine", "COMPLETED", "0:0"],
                                                [str(bad), "broken", "FAILED", "3:0"]]
    assert re.fullmatch(r"00:00:0[1-9]", hot[0].split("|")[4]) and hot[0].split("|")[5] == "localhost"
    assert store.expire_finished(0, 86400) == 2 and store.get_many([ok, bad]) == []
    assert lines(cli(crossdock_env, *fields)) == hot  # the same rows from the history records
    assert lines(cli(crossdock_env, "history", "-P", "-n", "-s", "F", "-o", "JobID")) == [str(bad)]
    assert lines(cli(crossdock_env, "history", "-P", "-n", "-j", str(ok), "-o", "JobID,State")) == \
        [f"{ok}|COMPLETED"]
    assert lines(cli(crossdock_env, "history", "-n", "-S", "now+1hour")) == []  # ended before the window
    assert lines(cli(crossdock_env, "history", "-n", "-E", "2000-01-01")) == []  # submitted after it
    rows = json.loads(cli(crossdock_env, "history", "--json").stdout)
    assert [(r["JobID"], r["ExitCode"], r["exit_status"]) for r in rows] == [(str(ok), "0:0", 0), (str(bad), "3:0", 3)]
    default = lines(cli(crossdock_env, "history"))
    assert default[0].split() == ["JobID", "JobName", "Partition", "Account", "AllocCPUS", "State", "ExitCode"]
    r = cli(crossdock_env, "history", "-S", "yesterday")
    assert r.returncode == 2 and "--starttime: invalid time 'yesterday'" in r.stderr


def test_priority_breakdown_orders_as_the_scheduler(crossdock_env, store, tmp_path):
    low = submit(crossdock_env, "-H", "-p", "training", "--wrap", "true", cwd=tmp_path)
    high = submit(crossdock_env, "-H", "-p", "inference", "--wrap", "true", cwd=tmp_path)
    nice = submit(crossdock_env, "-H", "-p", "inference", "--nice=10", "--wrap", "true", cwd=tmp_path)
    rows = json.loads(cli(crossdock_env, "priority", "--json").stdout)
    assert [(r["id"], r["class_value"], r["nice"]) for r in rows] == [(high, 1000, 0), (nice, 1000, 10), (low, 100, 0)]
    table = lines(cli(crossdock_env, "queue", "--priority"))
    assert table[0].split() == ["JOBID", "PARTITION", "USER", "CLASS", "CLASSVAL", "NICE", "FAIRSHARE", "AGE"]
    assert [int(t.split()[0]) for t in table[1:]] == [high, nice, low]


def test_start_shows_the_backfill_reservation(cluster, crossdock_env, store, tmp_path):
    running = submit(crossdock_env, "-c", "4", "-t", "10", "--wrap", "sleep 120", cwd=tmp_path)
    cluster.wait(running, {JobState.RUNNING})
    blocked = submit(crossdock_env, "-c", "4", "-t", "5", "--wrap", "true", cwd=tmp_path)
    deadline = time.monotonic() + 30
    while True:
        out = lines(cli(crossdock_env, "queue", "--start", "-h", "-o", "%i|%t|%S|%Y"))
        if out and out[0].split("|")[2] != "N/A" or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    ident, st, when, nodes = out[0].split("|")
    expected = store.get(running).start_time + timedelta(minutes=10)
    assert (int(ident), st, nodes) == (blocked, "PD", "localhost"), out
    assert abs(datetime.fromisoformat(when).astimezone() - expected) < timedelta(seconds=5), (when, expected)
    assert cli(crossdock_env, "cancel", str(running), str(blocked)).returncode == 0


def test_pending_array_is_one_row_unless_asked(crossdock_env, tmp_path):
    arr = submit(crossdock_env, "-H", "-a", "1-4,9", "--wrap", "true", cwd=tmp_path)
    assert lines(cli(crossdock_env, "queue", "-h", "-o", "%i %t")) == [f"{arr}_[1-4,9] PD"]
    assert lines(cli(crossdock_env, "queue", "-h", "-r", "-o", "%i")) == [f"{arr}_{t}" for t in (1, 2, 3, 4, 9)]


def test_max_rss_is_the_local_jobs_peak(cluster, crossdock_env, store, tmp_path):
    grow = "import sys, time; b = bytearray(80 * 2**20); b[::4096] = b'x' * len(b[::4096]); time.sleep(0.2)"
    job = submit(crossdock_env, "--mem", "500M", "--wrap", f"{sys.executable} -c \"{grow}\"", cwd=tmp_path)
    cluster.wait_all([job])
    assert store.get(job).state is JobState.COMPLETED
    peak = lines(cli(crossdock_env, "history", "-P", "-n", "-j", str(job), "-o", "MaxRSS"))
    assert re.fullmatch(r"\d+K", peak[0]) and 80 * 1024 <= int(peak[0][:-1]) < 400 * 1024, peak
    assert store.expire_finished(0, 86400) == 1
    assert lines(cli(crossdock_env, "history", "-P", "-n", "-j", str(job), "-o", "MaxRSS")) == peak


def test_update_changes_a_pending_jobs_time_limit_and_nice_as_scontrol_update(crossdock_env, runtime, tmp_path):
    from crossdock.queue.errors import PermissionDenied
    from crossdock.service import Caller, update

    job = submit(crossdock_env, "-H", "-t", "30", "--wrap", "true", cwd=tmp_path)
    r = cli(crossdock_env, "update", f"JobId={job}", "TimeLimit=10", "Nice=5")
    assert (r.returncode, r.stdout, r.stderr) == (0, "", "")  # quiet, as scontrol
    assert lines(cli(crossdock_env, "queue", "-h", "-j", str(job), "-o", "%l %y")) == ["10:00 5"]
    events = lines(cli(crossdock_env, "show", "job", str(job)))
    assert any(line.endswith("updated TimeLimit=10:00 Nice=5 by root") for line in events), events
    bad = cli(crossdock_env, "update", str(job), "TimeLimit=1:99:99:99", "Partition=gpu", "Color=red")
    assert bad.returncode == 2 and len(bad.stderr.splitlines()) == 3, bad.stderr
    owner = Caller(name=runtime.store.get(job).spec.user, admin=False)
    with pytest.raises(PermissionDenied, match="only an admin raises"):
        update(runtime, [str(job)], {"time_limit_seconds": 3600}, who=owner)
    with pytest.raises(PermissionDenied, match="negative nice"):
        update(runtime, [str(job)], {"nice": -1}, who=owner)
    assert update(runtime, [str(job)], {"time_limit_seconds": 300, "nice": 9}, who=owner)[0][1] is True
    spec = runtime.store.get(job).spec
    assert (spec.time_limit_seconds, spec.nice) == (300, 9)
    assert cli(crossdock_env, "cancel", str(job)).returncode == 0
    done = cli(crossdock_env, "update", str(job), "Nice=1")
    assert done.returncode == 1 and f"{job}: not updated (state CANCELLED)" in done.stderr
