"""squeue's, sacct's and scontrol's ways of writing jobs, checked field by field against what
the real commands print (values taken from the local Slurm cluster's squeue/scontrol)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from crossdock.cli import slurmfmt
from crossdock.cli.history import parse_fields, parse_time, record_job, table
from crossdock.cli.views import scontrol_lines
from crossdock.queue.models import GpuRequest, Job, JobSpec
from crossdock.queue.states import JobState

T0 = datetime(2026, 12, 1, 12, 0, 0, tzinfo=timezone.utc)


def job(**kw) -> Job:
    spec = JobSpec(name=kw.pop("name", "train"), user="alice", command=["true"], workdir="/work/x",
                   time_limit_seconds=kw.pop("limit", 600), mem_per_node_mib=kw.pop("mem", None),
                   gpus=kw.pop("gpus", None))
    return Job(id=kw.pop("id", 42), spec=spec, queue="training", submit_time=T0, **kw)


@pytest.mark.parametrize("state,code", [
    (JobState.PENDING, "PD"), (JobState.RUNNING, "R"), (JobState.COMPLETED, "CD"), (JobState.FAILED, "F"),
    (JobState.CANCELLED, "CA"), (JobState.TIMEOUT, "TO"), (JobState.PREEMPTED, "PR"), (JobState.NODE_FAIL, "NF"),
    (JobState.OUT_OF_MEMORY, "OOM"), (JobState.SCHEDULED, "CF")])
def test_short_states_are_squeues(state, code):
    assert slurmfmt.short_state(state) == code
    assert slurmfmt.parse_states(code) == {state} == slurmfmt.parse_states(state.value.lower())


@pytest.mark.parametrize("text,want", [
    ("PD,R", {JobState.PENDING, JobState.RUNNING}),
    ("pending, running", {JobState.PENDING, JobState.RUNNING}),
    ("all", None), ("PD,all", None),
    ("S,CG", set()),  # Slurm states crossdock never reaches: accepted, match nothing
    ("CONFIGURING", {JobState.SCHEDULED}),
])
def test_state_lists(text, want):
    assert slurmfmt.parse_states(text) == want


def test_unknown_state_names_it_and_the_accepted_ones():
    with pytest.raises(ValueError, match=r"--states: unknown state 'XX'; accepted: PENDING \(PD\)"):
        slurmfmt.parse_states("PD,XX")


@pytest.mark.parametrize("secs,short,clock", [
    (0, "0:00", "00:00:00"), (59, "0:59", "00:00:59"), (600, "10:00", "00:10:00"), (3600, "1:00:00", "01:00:00"),
    (86400 + 3661, "1-01:01:01", "1-01:01:01"), (None, "UNLIMITED", None)])
def test_durations(secs, short, clock):
    assert slurmfmt.duration(secs) == short
    if secs is not None:
        assert slurmfmt.clock(secs) == clock


@pytest.mark.parametrize("fmt,want", [
    ("%i", ["JOBID", "42"]),
    ("%.5i|%-8j|%3j|", ["JOBID|NAME    |NAM|", "   42|train   |tra|"]),
    ("%t %T %l %D %C %m", ["ST STATE TIME_LIMIT NODES CPUS MIN_MEMORY", "PD PENDING 10:00 1 1 2G"]),
    ("%R %P %u %Q", ["NODELIST(REASON) PARTITION USER PRIORITY", "(Priority) training alice 0"]),
    ("%V %S", ["SUBMIT_TIME START_TIME", f"{slurmfmt.iso(T0)} N/A"]),
    ("%b 100%%", ["TRES_PER_NODE 100%", "gres/gpu:2 100%"]),
])
def test_format_specifiers(fmt, want):
    j = job(reason="Priority", mem=2048, gpus=GpuRequest(count=2))
    assert slurmfmt.render([j], fmt, ctx=slurmfmt.Context(now=T0)) == want


def test_default_format_matches_squeue_header():
    # squeue's own header, from the local cluster: JOBID right in 18, PARTITION in 9, ...
    assert slurmfmt.render([], slurmfmt.DEFAULT)[0] == \
        "             JOBID PARTITION     NAME     USER ST       TIME  NODES NODELIST(REASON)"
    assert slurmfmt.render([], slurmfmt.LONG)[0] == \
        "             JOBID PARTITION     NAME     USER    STATE       TIME TIME_LIMI  NODES NODELIST(REASON)"


def test_running_job_row_and_nodelist():
    j = job(state=JobState.RUNNING, nodes=["n01", "n02", "n03", "gpu7"], start_time=T0)
    assert slurmfmt.render([j], slurmfmt.DEFAULT, header=False, ctx=slurmfmt.Context(now=T0 + timedelta(seconds=75))) \
        == ["                42  training    train    alice  R       1:15      4 n[01-03],gpu7"]


@pytest.mark.parametrize("fmt,problem", [("%z", "unknown field %z"), ("%i %", "lone '%'")])
def test_bad_format(fmt, problem):
    with pytest.raises(ValueError, match=problem):
        slurmfmt.parse_format(fmt)


NOW = datetime(2026, 12, 1, 12, 30, 0, tzinfo=timezone.utc)


@pytest.mark.parametrize("text,delta", [
    ("now", timedelta()), ("now-1hour", timedelta(hours=-1)), ("now-90", timedelta(seconds=-90)),
    ("now+2days", timedelta(days=2)), ("now-1weeks", timedelta(weeks=-1))])
def test_relative_times(text, delta):
    assert parse_time(text, "-S", NOW) == NOW + delta


@pytest.mark.parametrize("text,want", [
    ("2026-11-30", (2026, 11, 30, 0, 0, 0)), ("2026-11-30T08:15", (2026, 11, 30, 8, 15, 0)),
    ("2026-11-30T08:15:09", (2026, 11, 30, 8, 15, 9)), ("1130", (2026, 11, 30, 0, 0, 0)),
    ("113025-10:00", (2025, 11, 30, 10, 0, 0)), ("11/30", (2026, 11, 30, 0, 0, 0)),
    ("11/30/25-01:02:03", (2025, 11, 30, 1, 2, 3)), ("11.30.2024", (2024, 11, 30, 0, 0, 0)),
    ("08:15", (2026, 12, 1, 8, 15, 0)), ("8:15pm", (2026, 12, 1, 20, 15, 0)), ("midnight", (2026, 12, 1, 0, 0, 0)),
    ("noon", (2026, 12, 1, 12, 0, 0)), ("teatime", (2026, 12, 1, 16, 0, 0))])
def test_absolute_times_are_local(text, want):
    t = parse_time(text, "-S", NOW).astimezone()
    assert (t.year, t.month, t.day, t.hour, t.minute, t.second) == want


@pytest.mark.parametrize("text,problem", [("yesterday", "invalid time 'yesterday'"),
                                          ("now-3fortnights", "unknown unit"), ("2026-13-01", "invalid time")])
def test_bad_times(text, problem):
    with pytest.raises(ValueError, match=problem):
        parse_time(text, "--starttime", NOW)


def test_sacct_table_and_parsable():
    j = job(id=7, state=JobState.FAILED, exit_code=3, signal=0, start_time=T0, end_time=T0 + timedelta(seconds=65),
            nodes=["cpu1"], name="a-very-long-job-name")
    fields = parse_fields("JobID,jobname,State,ExitCode,Elapsed,NodeList%-6,MaxRSS")
    assert table([j], fields) == [
        "JobID           JobName      State ExitCode    Elapsed NodeLi     MaxRSS",
        "------------ ---------- ---------- -------- ---------- ------ ----------",
        "7            a-very-lo+     FAILED      3:0   00:01:05 cpu1             "]
    assert table([j], parse_fields("JobID,State,ExitCode"), parsable="|+") == ["JobID|State|ExitCode|", "7|FAILED|3:0|"]
    assert table([j], parse_fields("JobID,State"), header=False, parsable="|") == ["7|FAILED"]
    with pytest.raises(ValueError, match="unknown field 'Bogus'"):
        parse_fields("JobID,Bogus")


def test_history_record_reads_back_as_a_job():
    from crossdock.backends.redis_store.codec import history_record

    j = job(id=9, state=JobState.TIMEOUT, exit_code=0, signal=15, start_time=T0, end_time=T0 + timedelta(minutes=10),
            nodes=["cpu1"], array_job_id=8, array_task_id=1)
    back = record_job(history_record(j))
    assert (back.display_id, back.state, slurmfmt.exit_code(back), slurmfmt.run_seconds(back), back.spec.user) == \
        ("8_1", JobState.TIMEOUT, "0:15", 600, "alice")


def test_scontrol_lines():
    j = job(state=JobState.RUNNING, nodes=["cpu1"], start_time=T0, reason="None", gpus=GpuRequest(count=1),
            mem=100, attempts=1)
    lines = scontrol_lines(j, now=T0 + timedelta(seconds=5))
    text = "\n".join(lines)
    assert lines[0] == "JobId=42 JobName=train"
    assert [w for w in text.split() if w.endswith("=42")] == ["JobId=42"]  # the id once
    for needle in ("JobState=RUNNING Reason=None", "RunTime=00:00:05 TimeLimit=00:10:00",
                   f"StartTime={slurmfmt.iso(T0)} EndTime=Unknown", "NumNodes=1 NumCPUs=1",
                   "TRES=cpu=1,mem=100M,node=1,gres/gpu=1", "WorkDir=/work/x", "StdOut=/work/x/slurm-42.out",
                   "StdErr=/work/x/slurm-42.out", "ExitCode=0:0"):
        assert needle in text, (needle, text)
    assert "None" not in text.replace("Reason=None", "")
    assert all("=" in line for line in lines)


def test_pending_array_tasks_collapse_as_squeue_shows_them():
    tasks = [job(id=10 + t, array_job_id=10, array_task_id=t, reason="JobHeldUser") for t in (1, 2, 3, 5)]
    running = job(id=20, array_job_id=10, array_task_id=7, state=JobState.RUNNING, nodes=["n1"], start_time=T0)
    other = job(id=30, array_job_id=10, array_task_id=8, reason="Priority")
    rows, labels = slurmfmt.collapse_arrays([*tasks, running, other])
    assert slurmfmt.render(rows, "%i %t", header=False, ctx=slurmfmt.Context(labels=labels)) == \
        ["10_[1-3,5] PD", "10_7 R", "10_8 PD"]
