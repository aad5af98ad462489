"""Day-two Slurm habits of the CLI, table by table: squeue's -O names and throttled array ids, PD
for a job in its backend's queue, scontrol's Dependency/Command/UserId, sacct's --units and
numbers in JSON, events without Python's None and with array tasks as users name them, and the
one duration reader and hostlist writer behind them."""

from __future__ import annotations

import json
from datetime import datetime, timezone

import pytest
from typer.testing import CliRunner

from crossdock.cli import slurmfmt
from crossdock.cli.common import jsonable
from crossdock.cli.history import in_units, json_row, parse_time, table
from crossdock.cli.render import describe, typed
from crossdock.cli.views import command, scontrol_lines, user_id
from crossdock.queue import durations
from crossdock.queue.hostlist import compress_hostlist
from crossdock.queue.models import ArraySpec, Dependency, DependencySpec, DependencyType, Job, JobSpec
from crossdock.queue.states import JobState

T0 = datetime(2026, 12, 1, 12, 0, 0, tzinfo=timezone.utc)


def job(job_id=42, state=JobState.PENDING, reason="None", **spec) -> Job:
    spec.setdefault("command", ["true"])
    spec.setdefault("workdir", "/work/x")
    spec.setdefault("user", "alice")
    return Job(id=job_id, spec=JobSpec(**spec), state=state, reason=reason, queue="batch", submit_time=T0)


@pytest.mark.parametrize("names,fmt", [
    pytest.param("jobid,name,state", "%20A%20j%20T", id="default-width"),
    pytest.param("JobArrayID:.10,Name:8,StateCompact:4", "%.10i%8j%4t", id="case-width-right"),
    pytest.param("reasonlist:30 |,timeused", "%30R |%20M", id="suffix"),
    pytest.param("cpus-per-task:5,numcpus:4%", "%5c%4C%%", id="percent-suffix"),
])
def test_squeue_Format_names_are_its_letters(names, fmt):
    assert slurmfmt.format_from_names(names) == fmt
    slurmfmt.parse_format(fmt)  # a valid -o string


def test_squeue_Format_refuses_an_unknown_name():
    with pytest.raises(ValueError, match="--Format: unknown field 'jobname'"):
        slurmfmt.format_from_names("jobid,jobname")


@pytest.mark.parametrize("max_running,label", [(None, "7_[0-2]"), (2, "7_[0-2%2]")], ids=["free", "throttled"])
def test_a_pending_array_shows_its_throttle_in_its_id(max_running, label):
    spec = JobSpec(command=["true"], user="a", array=ArraySpec(task_ids=[0, 1, 2], max_running=max_running))
    tasks = [Job(id=7 + t, spec=spec, array_job_id=7, array_task_id=t, reason="Priority") for t in (0, 1, 2)]
    rows, labels = slurmfmt.collapse_arrays(tasks)
    assert slurmfmt.render(rows, "%i", header=False, ctx=slurmfmt.Context(labels=labels)) == [label]


@pytest.mark.parametrize("state,reason,code,where", [
    pytest.param(JobState.SCHEDULED, "None", "CF", "(None)", id="dispatch-in-flight"),
    pytest.param(JobState.SCHEDULED, "Priority", "PD", "(Priority)", id="in-slurms-queue"),
    pytest.param(JobState.PENDING, "Resources", "PD", "(Resources)", id="in-crossdocks-queue"),
    pytest.param(JobState.RUNNING, "None", "R", "n[1-2]", id="running"),
])
def test_a_job_waiting_in_its_backends_queue_is_PD(state, reason, code, where):
    j = job(state=state, reason=reason).model_copy(update={"nodes": ["n1", "n2"] if state is JobState.RUNNING else []})
    assert slurmfmt.render([j], "%t %R", header=False) == [f"{code} {where}"]


AFTEROK_12 = DependencySpec(deps=[Dependency(type=DependencyType.AFTEROK, job_id=12)])


@pytest.mark.parametrize("state,reason,shown", [
    pytest.param(JobState.PENDING, "Dependency", "afterok:12(unfulfilled)", id="waiting"),
    pytest.param(JobState.PENDING, "DependencyNeverSatisfied", "afterok:12(failed)", id="never"),
    pytest.param(JobState.PENDING, "JobHeldUser", "afterok:12", id="held"),
    pytest.param(JobState.PENDING, "Priority", "(null)", id="met-waits-for-priority"),
    pytest.param(JobState.RUNNING, "None", "(null)", id="met-running"),
])
def test_show_clears_a_dependency_once_met(state, reason, shown):
    j = job(state=state, reason=reason, dependency=AFTEROK_12)
    assert slurmfmt.dependency(j) == shown
    assert f"Dependency={shown}" in "\n".join(scontrol_lines(j))


@pytest.mark.parametrize("spec,shown", [
    pytest.param({"script_path": "train.sh", "command": None, "script": "#!/bin/sh\n"}, "/work/x/train.sh", id="relative"),
    pytest.param({"script_path": "/abs/t.sh", "command": None, "script": "#!/bin/sh\n"}, "/abs/t.sh", id="absolute"),
    pytest.param({"command": ["python", "-m", "x"], "args": ["1"]}, "python -m x 1", id="command"),
])
def test_show_command_is_the_scripts_absolute_path(spec, shown):
    assert command(job(**spec)) == shown


@pytest.mark.parametrize("user,shown", [("root", "root(0)"), ("0", "root(0)"), ("no-such-user-x", "no-such-user-x")])
def test_show_user_id_is_name_and_uid(user, shown):
    assert user_id(user) == shown


@pytest.mark.parametrize("ev,text", [
    pytest.param({"from": "RUNNING", "to": "COMPLETED", "actor": "local", "reason": "None"},
                 "RUNNING -> COMPLETED by local", id="no-None-reason"),
    pytest.param({"from": "PENDING", "to": "CANCELLED", "actor": "alice", "reason": "CancelledByUser"},
                 "PENDING -> CANCELLED by alice  reason: CancelledByUser", id="reason"),
    pytest.param({"event": "preempting", "actor": "scheduler-1", "reason": "for job 12_3", "preemptor": "14"},
                 "preempting by scheduler-1  reason: for job 12_3", id="preemptor"),
    pytest.param({"event": "refused", "action": "cancel", "actor": "mallory"}, "refused cancel by mallory", id="refusal"),
])
def test_events_read_without_python_none(ev, text):
    assert describe(ev) == text


def test_events_json_has_numbers_iso_times_and_task_ids():
    ev = {"id": "1764590400000-0", "job": "43", "from": "PENDING", "to": "SCHEDULED", "actor": "s",
          "reason": "None", "time": "1764590400.5", "attempt": "2"}
    assert typed(ev, {43: "42_1"}) == {"id": "1764590400000-0", "job": 43, "job_id": "42_1", "from": "PENDING",
                                       "to": "SCHEDULED", "actor": "s", "reason": "None", "time": 1764590400.5,
                                       "attempt": 2, "at": "2025-12-01T12:00:00.500000+00:00"}


def test_json_times_have_a_T():
    assert json.dumps({"t": T0, "s": JobState.RUNNING}, default=jsonable) == \
        '{"t": "2026-12-01T12:00:00+00:00", "s": "RUNNING"}'


@pytest.mark.parametrize("kib,unit,shown", [(31372, "M", "30.64M"), (1048576, "G", "1.00G"), (512, "K", "512.00K"),
                                            (None, "M", "")])
def test_history_units(kib, unit, shown):
    assert in_units(kib, unit) == shown


def test_history_table_in_units_and_json_numbers():
    j = job(state=JobState.COMPLETED, mem_per_node_mib=100).model_copy(update={"max_rss_kib": 31372})
    assert table([j], [("MaxRSS", 10), ("ReqMem", 10)], header=False, units="M") == ["    30.64M    100.00M"]
    row = json_row(j)
    assert (row["JobIDRaw"], row["NNodes"], row["ElapsedRaw"], row["Restarts"], row["max_rss_kib"]) == (42, 1, 0, 0, 31372)


@pytest.mark.parametrize("text,seconds", [
    ("90", 90), ("90s", 90), ("15m", 900), ("15min", 900), ("2h", 7200), ("2hours", 7200), ("1d", 86400),
    ("1w", 604800), ("1.5h", 5400), ("2026-12-01", None), ("today", None)])
def test_one_duration_reader(text, seconds):
    assert durations.parse_duration(text) == seconds


def test_the_duration_reader_names_an_unknown_unit_everywhere():
    with pytest.raises(ValueError, match="unknown unit 'fortnights'"):
        durations.parse_duration("3fortnights")
    with pytest.raises(ValueError, match="-S: unknown unit 'fortnights'"):
        parse_time("now-3fortnights", "-S", T0)


@pytest.mark.parametrize("hosts,text", [
    pytest.param(["n01", "n02", "n10"], "n[01-02,10]", id="padded-width-joins"),
    pytest.param(["cpu1", "cpu2", "cpu3", "gpu7"], "cpu[1-3],gpu7", id="two-prefixes"),
    pytest.param(["login"], "login", id="no-number"),
])
def test_one_hostlist_writer(hosts, text):
    j = job(state=JobState.RUNNING).model_copy(update={"nodes": hosts})
    assert slurmfmt.nodelist(j) == compress_hostlist(hosts) == text


@pytest.mark.parametrize("argv,code,needle", [
    pytest.param(["--version"], 0, "crossdock 0.1.0", id="version"),
    pytest.param(["-V"], 0, "crossdock 0.1.0", id="V"),
    pytest.param(["-h"], 0, "Usage:", id="h-is-help"),
    pytest.param(["show", "-h"], 0, "scontrol show job", id="command-h"),
    pytest.param(["queue", "--help"], 0, "--noheader", id="queue-help"),
])
def test_version_and_help(argv, code, needle):
    from crossdock.cli.app import app

    r = CliRunner().invoke(app, argv)
    assert r.exit_code == code and needle in r.output, r.output


@pytest.mark.parametrize("words,refs,changes", [
    pytest.param(["12", "TimeLimit=30"], ["12"], {"time_limit_seconds": 1800}, id="minutes"),
    pytest.param(["JobId=12_3", "timelimit=1-00:00:00", "NICE=10"], ["12_3"],
                 {"time_limit_seconds": 86400, "nice": 10}, id="any-case"),
    pytest.param(["12", "TimeLimit=UNLIMITED"], ["12"], {"time_limit_seconds": None}, id="unlimited"),
])
def test_update_reads_scontrols_words(words, refs, changes):
    from crossdock.cli.jobs import parse_updates

    assert parse_updates(words) == (refs, changes)


@pytest.mark.parametrize("words,problems", [
    pytest.param(["TimeLimit=30"], ["give a job"], id="no-job"),
    pytest.param(["12"], ["nothing to change"], id="no-change"),
    pytest.param(["12", "Partition=gpu", "Nice=x", "Color=red"],
                 ["Partition: not changed in place", "Nice", "Color: unknown field"], id="all-at-once"),
])
def test_update_names_every_bad_word(words, problems):
    from crossdock.cli.jobs import parse_updates

    with pytest.raises(ValueError) as err:
        parse_updates(words)
    lines = str(err.value).splitlines()
    assert len(lines) == len(problems) and all(p in line for p, line in zip(problems, lines)), lines
