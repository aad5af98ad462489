"""The chaos history checker: each anomaly caught in a hand-written history, a clean one valid,
and every random legal walk over ``TRANSITIONS`` valid while one illegal step in it is caught."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crossdock.queue.states import TRANSITIONS, JobState
from tests.chaos import checker as c
from tests.chaos.history import FAIL, INFO, INVOKE, OK, History, parse_marks

P, S, R, D, X = "PENDING", "SCHEDULED", "RUNNING", "COMPLETED", "CANCELLED"


class Builder:
    """A history at a fake clock: one second per op unless told."""

    def __init__(self):
        self.h, self.t = History(), 100.0

    def at(self, when=None):
        self.t = self.t + 1 if when is None else when
        return self.t

    def submit(self, keys, outcome=OK, ids=None):
        self.h.add("client", INVOKE, "submit", list(keys), at=self.at())
        value = dict(zip(keys, ids)) if outcome == OK else list(keys)
        self.h.add("client", outcome, "submit", value, at=self.at())
        return self

    def run(self, job, attempt, pid="10", end=True, at=None):
        self.h.add("backend", OK, "start", {"attempt": attempt, "pid": pid}, job=job, at=self.at(at))
        if end:
            self.h.add("backend", OK, "end", {"attempt": attempt, "pid": pid}, job=job, at=self.at())
        return self

    def cancel(self, job, outcome=OK, at=None):
        self.h.add("client", INVOKE, "cancel", None, job=job, at=self.at(at))
        self.h.add("client", outcome, "cancel", None, job=job, at=self.at())
        return self

    def read(self, **jobs):
        """``k1=(1, "COMPLETED")``: key k1 stored as job 1."""
        self.h.add("store", OK, "read", {str(i): {"key": k, "state": s} for k, (i, s) in jobs.items()}, at=self.at())
        return self.h


def chain(b, job, *states):
    """``job`` submitted, then moved through ``states`` (the first one its state when submitted)."""
    chain_from(b, job, None, *states)
    return b


def chain_from(b, job, old, *states):
    for s in states:
        b.h.add("store", OK, "transition", {"from": old, "to": s}, job=job, at=b.at())
        old = s
    return b


def clean():
    """Two jobs: one ran once; one retried (info) then acknowledged, lost with its node, run again."""
    b = Builder().submit(["a"], ids=[1]).submit(["b"], INFO).submit(["b"], ids=[2])
    chain(b, 1, P, S, R).run(1, 1)
    chain_from(b, 1, R, D)
    chain(b, 2, P, S, R).run(2, 1, pid="11", end=False)
    chain_from(b, 2, R, "NODE_FAIL", P, S, R).run(2, 2, pid="12")
    chain_from(b, 2, R, D)
    return b.read(a=(1, D), b=(2, D))


def test_a_clean_history_is_valid():
    verdict = c.check(clean())
    assert verdict.ok, verdict.report()
    assert (verdict.jobs, verdict.ops) == (2, len(clean().ops))
    assert "valid: " in verdict.summary() and "0 anomalies" in verdict.summary()


def one_job(*states, stored=D, runs=(), outcome=OK):
    b = Builder().submit(["a"], outcome, ids=[1])
    chain(b, 1, *states)
    for attempt, pid, when, end in runs:
        b.run(1, attempt, pid, end, at=when)
    return b.read(a=(1, stored))


CASES = {
    "lost: acknowledged, not stored": (lambda: Builder().submit(["a"], ids=[1]).read(), c.LOST),
    "lost: stored under another id": (lambda: chain(Builder().submit(["a"], ids=[1]), 7, P, S, D).read(a=(7, D)),
                                      c.LOST),
    "duplicated: an info retry applied twice": (lambda: _twice(), c.DUPLICATED),
    "phantom: never submitted": (lambda: chain(Builder(), 1, P, S, D).read(a=(1, D)), c.PHANTOM),
    "phantom: the submission failed": (lambda: one_job(P, S, D, outcome=FAIL), c.PHANTOM),
    "not final: still running": (lambda: one_job(P, S, R, stored=R), c.NOT_FINAL),
    "not final: record and events disagree": (lambda: one_job(P, S, R, D, stored="FAILED"), c.NOT_FINAL),
    "not final: no transition": (lambda: Builder().submit(["a"], ids=[1]).read(a=(1, P)), c.NOT_FINAL),
    "illegal: PENDING->RUNNING": (lambda: one_job(P, R, D), c.ILLEGAL),
    "illegal: COMPLETED->RUNNING": (lambda: one_job(P, S, D, R, D), c.ILLEGAL),
    "illegal: submitted twice": (lambda: chain(chain(Builder().submit(["a"], ids=[1]), 1, P, S), 1, P, S, D)
                                 .read(a=(1, D)), c.ILLEGAL),
    "run after final: an attempt never scheduled": (lambda: one_job(P, S, D, runs=[(2, "9", None, True)]),
                                                    c.RUN_AFTER_FINAL),
    "run after final: started after the end": (lambda: one_job(P, S, D, runs=[(1, "9", 500.0, True)]),
                                               c.RUN_AFTER_FINAL),
    "overlapping runs of one attempt": (lambda: _overlap(), c.OVERLAP),
    "cancel ignored": (lambda: _cancel_ignored(), c.CANCEL_IGNORED),
    "no final read": (lambda: Builder().submit(["a"], ids=[1]).h, c.NO_READ),
}


def _twice():
    b = Builder().submit(["a"], INFO).submit(["a"], ids=[2])
    chain(chain(b, 1, P, S, D), 2, P, S, D)
    b.h.add("store", OK, "read", {"1": {"key": "a", "state": D}, "2": {"key": "a", "state": D}}, at=b.at())
    return b.h


def _overlap():
    b = Builder().submit(["a"], ids=[1])
    chain(b, 1, P, S, R)
    b.h.add("backend", OK, "start", {"attempt": 1, "pid": "20"}, job=1, at=b.at())
    b.h.add("backend", OK, "start", {"attempt": 1, "pid": "21"}, job=1, at=b.at())
    b.h.add("backend", OK, "end", {"attempt": 1, "pid": "20"}, job=1, at=b.at())
    b.h.add("backend", OK, "end", {"attempt": 1, "pid": "21"}, job=1, at=b.at())
    chain_from(b, 1, R, D)
    return b.read(a=(1, D))


def _cancel_ignored():
    b = Builder().submit(["a"], ids=[1])
    chain(b, 1, P, S, R)
    b.cancel(1)
    chain_from(b, 1, R, D)
    return b.read(a=(1, D))


@pytest.mark.parametrize("name", CASES)
def test_each_anomaly_is_caught(name):
    make, rule = CASES[name]
    verdict = c.check(make())
    assert not verdict.ok
    assert rule in {a.rule for a in verdict.anomalies}, verdict.report()
    assert rule in verdict.summary()


def test_a_run_killed_then_run_again_in_the_same_attempt_is_not_an_overlap():
    # Slurm requeued it itself (RUNNING -> SCHEDULED keeps the attempt): the first run left no end.
    b = Builder().submit(["a"], ids=[1])
    chain(b, 1, P, S, R)
    b.run(1, 1, "30", end=False)
    chain_from(b, 1, R, S, R)
    b.run(1, 1, "31")
    chain_from(b, 1, R, D)
    verdict = c.check(b.read(a=(1, D)))
    assert verdict.ok, verdict.report()


def test_a_cancel_racing_the_end_is_valid():
    b = Builder().submit(["a"], ids=[1])
    chain(b, 1, P, S, R)
    b.h.add("client", INVOKE, "cancel", None, job=1, at=b.at())
    chain_from(b, 1, R, D)
    b.h.add("client", OK, "cancel", None, job=1, at=b.at())
    assert c.check(b.read(a=(1, D))).ok


def test_an_unacknowledged_submission_may_be_missing():
    assert c.check(Builder().submit(["a"], INFO).read()).ok


def test_the_report_names_the_job_and_its_ops():
    text = c.check(one_job(P, R, D)).report()
    assert "illegal transition: job 1: PENDING->RUNNING is not in TRANSITIONS" in text
    assert "store ok transition job 1" in text


def test_a_history_dumped_and_loaded_is_judged_the_same(tmp_path):
    h = one_job(P, R, D)
    h.dump(tmp_path / "history.jsonl")
    again = History.load(tmp_path / "history.jsonl")
    assert again.ops == h.ops
    assert c.check(again).anomalies == c.check(h).anomalies


def test_marks_files_parse_old_and_new_lines():
    assert parse_marks("start 1\nstart 2 77 12.5\nend 2 77 13.0\n\n") == [
        ("start", 1, "", None), ("start", 2, "77", 12.5), ("end", 2, "77", 13.0)]


# --- random walks ---------------------------------------------------------------------------------
def walk(choices: list[int]) -> list[JobState]:
    """PENDING, then a successor picked by each choice, then the first final state reachable."""
    return walk_from(JobState.PENDING, choices)


def walk_from(first: JobState, choices: list[int]) -> list[JobState]:
    states = [first]
    for ch in choices:
        nxt = sorted(TRANSITIONS[states[-1]])
        states.append(nxt[ch % len(nxt)])
    if not states[-1].terminal:
        states.append(sorted(s for s in TRANSITIONS[states[-1]] if s.terminal)[0])
    return states


def history_of(states: list[JobState]) -> History:
    """One acknowledged job walking ``states``, each attempt run once while it was scheduled."""
    b = Builder().submit(["a"], ids=[1])
    attempt, prev = 0, None
    for s in states:
        b.h.add("store", OK, "transition", {"from": prev and prev.value, "to": s.value}, job=1, at=b.at())
        if prev is JobState.PENDING and s is JobState.SCHEDULED:
            attempt += 1
            b.run(1, attempt, pid=str(attempt))
        prev = s
    return b.read(a=(1, states[-1].value))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, 20), max_size=25))
def test_random_legal_walks_are_valid(choices):
    verdict = c.check(history_of(walk(choices)))
    assert verdict.ok, verdict.report()


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, 20), max_size=25), st.integers(0, 100), st.integers(0, 100),
       st.lists(st.integers(0, 20), max_size=5))
def test_one_illegal_step_is_always_caught(choices, where, pick, after):
    states = walk(choices)
    i = where % (len(states) - 1) + 1  # the step into states[i]; a walk has two states at least
    forbidden = sorted(set(JobState) - TRANSITIONS[states[i - 1]])
    bad = forbidden[pick % len(forbidden)]
    # The walk goes on legally from the illegal state, and ends final.
    states = states[:i] + [bad] + walk_from(bad, after)[1:]
    verdict = c.check(history_of(states))
    assert c.ILLEGAL in {a.rule for a in verdict.anomalies}, (states, verdict.report())

