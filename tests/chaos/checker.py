"""A model-based checker of chaos histories (:mod:`tests.chaos.history`) against the job state
machine of :mod:`crossdock.queue.states`.

Why our own, in Python: the property is crossdock's state table, not a register's or a
transaction's. Porcupine (Go) checks the linearizability of a sequential model (registers, keys);
Elle (Clojure, on a JVM) infers cycles of read/write dependencies between transactions. Neither
knows ``TRANSITIONS``, attempts or job runs, and both would add a language to the test suite. The
check here is linear in the history's length, needs no service, and reads the table the store
enforces, so the two cannot drift apart.

What it takes from Jepsen: a history of ``invoke`` / ``ok`` / ``fail`` / ``info`` operations, an
``info`` (timed-out, unknown outcome) submission being allowed to have taken effect or not, but
at most once; writes identified by unique client-chosen values (a key per job), so that a lost,
duplicated or phantom write is told from a retry; observations of the system (the store's
per-job event log, the runs the jobs themselves marked) judged as separate processes; and a
verdict that lists every anomaly, not the first one.

Rules, each anomaly naming the job and the rule:

- ``lost``: an acknowledged submission's key is not in the final read (across the failovers and
  restarts of the run), or is under another id than the one acknowledged.
- ``duplicated``: a key is stored more than once (an ``info`` retry applied twice).
- ``phantom``: a stored job whose key no client submitted, or whose submission certainly failed.
- ``not final``: a stored job not in a terminal state, or whose record and last transition
  disagree (two final states); a job with no transition at all.
- ``illegal transition``: a move ``TRANSITIONS`` forbids, or one that does not start where the
  previous one ended (a transition lost or recorded twice).
- ``run after final``: a run (start marker) of an attempt the store never scheduled, or that
  started after the job's final transition.
- ``overlapping runs``: a run of an attempt starting while another run of the same attempt had
  started and not yet ended (both with end markers: a run that was killed leaves none).
- ``cancel ignored``: an acknowledged cancel, and the job ended otherwise than CANCELLED after the
  cancel completed (ending before it, or while it was in flight, is a cancel that came too late).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from crossdock.queue.states import TRANSITIONS, JobState
from tests.chaos.history import INFO, INVOKE, OK, History, Op

LOST, DUPLICATED, PHANTOM = "lost", "duplicated", "phantom"
NOT_FINAL, ILLEGAL, RUN_AFTER_FINAL = "not final", "illegal transition", "run after final"
OVERLAP, CANCEL_IGNORED, NO_READ = "overlapping runs", "cancel ignored", "no final read"


@dataclass(frozen=True)
class Anomaly:
    job: int | str | None
    """The job's id, or the key of a write that has none."""
    rule: str
    detail: str

    def __str__(self) -> str:
        return f"{self.rule}: job {self.job}: {self.detail}"


@dataclass
class Verdict:
    ops: int
    jobs: int
    anomalies: list[Anomaly] = field(default_factory=list)
    history: History | None = None

    @property
    def ok(self) -> bool:
        return not self.anomalies

    def summary(self) -> str:
        rules = Counter(a.rule for a in self.anomalies)
        found = ", ".join(f"{r} x{n}" for r, n in sorted(rules.items())) or "none"
        return (f"history checker: {'valid' if self.ok else 'INVALID'}: {self.ops} ops checked, {self.jobs} jobs,"
                f" {len(self.anomalies)} anomalies ({found})")

    def report(self, limit: int = 20) -> str:
        """The summary, then each anomaly with the ops of its job."""
        lines = [self.summary()]
        by_job = self.history.by_job() if self.history else {}
        for a in self.anomalies[:limit]:
            lines.append(f"  {a}")
            lines += [f"      {op}" for op in by_job.get(a.job, [])[:30] if isinstance(a.job, int)]
        if len(self.anomalies) > limit:
            lines.append(f"  ... and {len(self.anomalies) - limit} more")
        return "\n".join(lines)


def check(history: History) -> Verdict:
    found: list[Anomaly] = []
    reads = [op for op in history.ops if op.process == "store" and op.f == "read"]
    if not reads:
        return Verdict(len(history.ops), 0, [Anomaly(None, NO_READ, "the store was never read")], history)
    stored = {int(i): v for i, v in reads[-1].value.items()}
    found += _writes(history, stored)
    by_job = history.by_job()
    for job_id, seen in sorted(stored.items()):
        found += _job(job_id, JobState(seen["state"]), by_job.get(job_id, []))
    return Verdict(len(history.ops), len(stored), found, history)


def _writes(history: History, stored: dict[int, dict]) -> list[Anomaly]:
    """Lost, duplicated and phantom submissions: each key against the final read."""
    acked: dict[str, int] = {}
    maybe: set[str] = set()
    failed: set[str] = set()
    for op in history.ops:
        if op.process != "client" or op.f != "submit" or op.type == INVOKE:
            continue
        if op.type == OK:
            acked.update(op.value)
        else:
            (maybe if op.type == INFO else failed).update(op.value)
    ids_of: dict[str, list[int]] = {}
    for job_id, seen in stored.items():
        ids_of.setdefault(seen["key"], []).append(job_id)
    out = []
    for key, job_id in sorted(acked.items()):
        if job_id not in ids_of.get(key, []):
            out.append(Anomaly(job_id, LOST, f"submission {key!r} acknowledged as job {job_id}; the store has "
                                             f"{ids_of.get(key) or 'none'}"))
    for key, ids in sorted(ids_of.items()):
        if len(ids) > 1:
            out.append(Anomaly(ids[0], DUPLICATED, f"submission {key!r} stored {len(ids)} times: {sorted(ids)}"))
        elif key not in acked and key not in maybe:
            why = "certainly failed" if key in failed else "never submitted"
            out.append(Anomaly(ids[0], PHANTOM, f"stored under key {key!r}, {why}"))
    return out


def _job(job_id: int, state: JobState, ops: list[Op]) -> list[Anomaly]:
    out = []
    moves = [op for op in ops if op.process == "store" and op.f == "transition"]
    state_now, attempt, final_at = None, 0, None
    for op in moves:
        old, new = op.value.get("from"), JobState(op.value["to"])
        if old is None:  # submitted
            if state_now is not None or new is not JobState.PENDING:
                out.append(Anomaly(job_id, ILLEGAL, f"submitted as {new.value} after {state_now}: #{op.index}"))
        elif state_now is not None and old != state_now.value:
            out.append(Anomaly(job_id, ILLEGAL, f"{old}->{new.value} follows a move to {state_now.value}: #{op.index}"))
        elif new not in TRANSITIONS[JobState(old)]:
            out.append(Anomaly(job_id, ILLEGAL, f"{old}->{new.value} is not in TRANSITIONS: #{op.index}"))
        if old == JobState.PENDING and new is JobState.SCHEDULED:
            attempt += 1
        state_now = new
        final_at = op.time if new.terminal else None
    if state_now is None:
        return [*out, Anomaly(job_id, NOT_FINAL, f"stored {state.value} with no transition recorded")]
    if not state.terminal:
        out.append(Anomaly(job_id, NOT_FINAL, f"ended the run {state.value}, not in a final state"))
    elif state is not state_now:
        out.append(Anomaly(job_id, NOT_FINAL, f"its record says {state.value}, its last transition {state_now.value}"))
    out += _runs(job_id, [op for op in ops if op.process == "backend"], attempt, final_at if state.terminal else None)
    out += _cancels(job_id, state, [op for op in ops if op.process == "client" and op.f == "cancel"], final_at)
    return out


def _runs(job_id: int, marks: list[Op], attempts: int, final_at: float | None) -> list[Anomaly]:
    out = []
    open_runs: dict[int, list[str]] = {}
    ended = {(op.value["attempt"], op.value["pid"]) for op in marks if op.f == "end"}
    for op in marks:
        attempt, pid = op.value["attempt"], op.value["pid"]
        if op.f == "end":
            if pid in open_runs.get(attempt, []):
                open_runs[attempt].remove(pid)
            continue
        if attempt > attempts:
            out.append(Anomaly(job_id, RUN_AFTER_FINAL, f"a run of attempt {attempt} (pid {pid}); the store "
                                                        f"scheduled {attempts} attempts: #{op.index}"))
        elif final_at is not None and op.time is not None and op.time > final_at:
            late = op.time - final_at
            out.append(Anomaly(job_id, RUN_AFTER_FINAL, f"attempt {attempt} (pid {pid}) started {late:.3f}s after"
                                                        f" its final state: #{op.index}"))
        rivals = [p for p in open_runs.get(attempt, []) if (attempt, p) in ended]
        if rivals and (attempt, pid) in ended:
            out.append(Anomaly(job_id, OVERLAP, f"attempt {attempt} started in pid {pid} while pid {rivals[0]}"
                                                f" ran it: #{op.index}"))
        open_runs.setdefault(attempt, []).append(pid)
    return out


def _cancels(job_id: int, state: JobState, cancels: list[Op], final_at: float | None) -> list[Anomaly]:
    done = [op for op in cancels if op.type == OK]
    if not done or state is JobState.CANCELLED or not state.terminal:
        return []
    first = min(op.time or 0.0 for op in done)
    if final_at is not None and final_at > first:
        return [Anomaly(job_id, CANCEL_IGNORED, f"cancel acknowledged at #{done[0].index}, then ended "
                                                f"{state.value} {final_at - first:.3f}s later")]
    return []


if __name__ == "__main__":  # python -m tests.chaos.checker RUN/history.jsonl: judge a kept history again
    import sys
    from pathlib import Path

    verdict = check(History.load(Path(sys.argv[1])))
    print(verdict.report())
    sys.exit(0 if verdict.ok else 1)
