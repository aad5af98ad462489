"""``crossdock history -D``: a row per attempt of a requeued job, sacct's ``--duplicates``.

Each attempt a requeue ended is kept in the job (``past_attempts``, written by the requeue's Lua
from the job hash's strings); the job's own fields are its last attempt."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pytest

from crossdock.backends.redis_store.codec import attempts_to_json, hash_to_job, history_record, job_to_hash
from crossdock.cli.history import json_row, parse_fields, record_job, rows, table
from crossdock.queue.models import Attempt, Job, JobSpec
from crossdock.queue.states import JobState

T0 = datetime(2026, 12, 1, 12, 0, 0, tzinfo=timezone.utc)


def at(minutes: float) -> datetime:
    return T0 + timedelta(minutes=minutes)


def job(past: list[Attempt], **kw) -> Job:
    spec = JobSpec(name="train", user="alice", command=["true"], workdir="/work/x")
    defaults = dict(id=42, queue="training", submit_time=T0, state=JobState.COMPLETED, exit_code=0,
                    backend="local", pool="local", nodes=["n2"], start_time=at(10), end_time=at(12))
    return Job(spec=spec, past_attempts=past, **{**defaults, **kw})


PREEMPTED = Attempt(attempt=1, state=JobState.PREEMPTED, reason="Preempted", backend="local", pool="local",
                    nodes=["n1"], exit_code=143, signal=15, start_time=at(1), end_time=at(4), max_rss_kib=2048)
LOST = Attempt(attempt=2, state=JobState.NODE_FAIL, reason="NodeLost", backend="kubernetes", pool="gpu",
               backend_ref="cd-42-2", nodes=["k1", "k2"], start_time=at(5), end_time=at(5.5))
NEVER_STARTED = Attempt(attempt=1, state=JobState.CANCELLED, reason="Requeued", end_time=at(1))

FIELDS = "JobID,State,Reason,ExitCode,Start,End,Elapsed,NodeList,Restarts"


@pytest.mark.parametrize("past,attempts,duplicates,want", [
    ([], 1, False, ["42|COMPLETED|None|0:0|2026-12-01T12:10:00|2026-12-01T12:12:00|00:02:00|n2|0"]),
    ([], 1, True, ["42|COMPLETED|None|0:0|2026-12-01T12:10:00|2026-12-01T12:12:00|00:02:00|n2|0"]),
    ([PREEMPTED], 2, False, ["42|COMPLETED|None|0:0|2026-12-01T12:10:00|2026-12-01T12:12:00|00:02:00|n2|1"]),
    ([PREEMPTED], 2, True, ["42|PREEMPTED|Preempted|143:15|2026-12-01T12:01:00|2026-12-01T12:04:00|00:03:00|n1|1",
                            "42|COMPLETED|None|0:0|2026-12-01T12:10:00|2026-12-01T12:12:00|00:02:00|n2|1"]),
    ([PREEMPTED, LOST], 3, True, [
        "42|PREEMPTED|Preempted|143:15|2026-12-01T12:01:00|2026-12-01T12:04:00|00:03:00|n1|2",
        "42|NODE_FAIL|NodeLost|0:0|2026-12-01T12:05:00|2026-12-01T12:05:30|00:00:30|k[1-2]|2",
        "42|COMPLETED|None|0:0|2026-12-01T12:10:00|2026-12-01T12:12:00|00:02:00|n2|2"]),
    ([NEVER_STARTED], 2, True, ["42|CANCELLED|Requeued|0:0|Unknown|2026-12-01T12:01:00|00:00:00|None assigned|1",
                                "42|COMPLETED|None|0:0|2026-12-01T12:10:00|2026-12-01T12:12:00|00:02:00|n2|1"]),
])
def test_rows_per_attempt_with_duplicates_one_per_job_without(past, attempts, duplicates, want):
    j = job(past, attempts=attempts)
    got = table((r for _, r in rows([j], duplicates)), parse_fields(FIELDS), header=False, parsable="|")
    assert got == want


def test_a_running_last_attempt_follows_its_ended_ones():
    j = job([PREEMPTED], attempts=2, state=JobState.RUNNING, exit_code=None, end_time=None)
    assert [(n, r.state, r.end_time) for n, r in rows([j], True)] == [(1, JobState.PREEMPTED, at(4)),
                                                                      (2, JobState.RUNNING, None)]


def test_rows_of_several_jobs_keep_job_order_and_attempt_order():
    a, b = job([PREEMPTED], id=5, attempts=2), job([], id=6, attempts=1)
    assert [(r.id, n) for n, r in rows([a, b], True)] == [(5, 1), (5, 2), (6, 1)]
    assert [(r.id, n) for n, r in rows([a, b], False)] == [(5, 2), (6, 1)]


def test_json_rows_name_their_attempt_and_keep_the_jobs_id_and_count():
    got = [json_row(r, n) for n, r in rows([job([PREEMPTED, LOST], attempts=3)], True)]
    assert [(g["JobID"], g["id"], g["attempt"], g["State"], g["NodeList"], g["exit_status"], g["backend"],
             g["Restarts"]) for g in got] == [
        ("42", 42, 1, "PREEMPTED", "n1", 143, "local", 2),
        ("42", 42, 2, "NODE_FAIL", "k[1-2]", None, "kubernetes", 2),
        ("42", 42, 3, "COMPLETED", "n2", 0, "local", 2)]
    assert json_row(job([], attempts=1))["attempt"] == 1


def test_units_and_long_fields_read_each_attempt():
    j = job([PREEMPTED], attempts=2, max_rss_kib=4096)
    got = table((r for _, r in rows([j], True)), parse_fields("JobID,MaxRSS,Restarts"), header=False,
                parsable="|", units="M")
    assert got == ["42|2.00M|1", "42|4.00M|1"]


def test_stored_attempts_read_back_from_the_hash_and_the_history_record():
    j = job([PREEMPTED, LOST], attempts=3)
    assert hash_to_job(42, job_to_hash(j)).past_attempts == [PREEMPTED, LOST]
    assert record_job(json.loads(json.dumps(history_record(j)))).past_attempts == [PREEMPTED, LOST]
    assert "past_attempts" not in job_to_hash(job([])) and "past_attempts" not in history_record(job([]))


def test_the_hash_form_is_what_the_requeue_script_writes():
    # the Lua copies the hash's strings as they are: numbers and times as text, nodes as JSON text
    stored = [{"attempt": "1", "state": "PREEMPTED", "reason": "Preempted", "backend": "local", "pool": "local",
               "nodes": '["n1"]', "exit_code": "143", "signal": "15", "max_rss_kib": "2048",
               "start_time": at(1).isoformat(), "end_time": at(4).isoformat()}]
    assert json.loads(attempts_to_json([PREEMPTED])) == stored
    h = job_to_hash(job([]))
    assert hash_to_job(42, {**h, "past_attempts": json.dumps(stored)}).past_attempts == [PREEMPTED]
