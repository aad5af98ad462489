"""The chaos oracle's verdicts and the table it prints: jobs, kills by kind, lost, duplicated,
wrong state, time to recover, then the timeline and every failing job with its event stream."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING

import redis

from crossdock.queue.errors import StoreUnavailable
from crossdock.queue.models import Job
from crossdock.queue.states import JobState

if TYPE_CHECKING:
    from tests.chaos.harness import ChaosRun, Plan

STORE_DOWN = (redis.RedisError, OSError, StoreUnavailable)
"""What a store call raises while Redis is down."""
EXPECTED = {0: JobState.COMPLETED, 3: JobState.FAILED}
"""The state a job must end in, by the exit code its command ends with."""


@dataclass
class Verdict:
    job: Job | None
    plan: Plan
    starts: list[int]
    ends: list[int]
    problem: str = ""


def judge(run: ChaosRun) -> list[Verdict]:
    """Each job's verdict: lost (not ended, or not stored), duplicated (ran to its end more than
    once), wrong (its recorded end is not what it did), or none."""
    stored = {j.id: j for j in run.rt.store.get_many(run.jobs)}
    out = []
    for job_id, plan in sorted(run.jobs.items()):
        job = stored.get(job_id)
        if job is None:
            out.append(Verdict(None, plan, [], [], "lost"))
            continue
        starts, ends = run.marks_of(job, plan)
        v = Verdict(job, plan, starts, ends)
        if not job.state.terminal:
            v.problem = "lost"
        elif len(ends) > 1:
            v.problem = "duplicated"
        elif job.state is not EXPECTED[plan.exit_code] or job.exit_code != plan.exit_code or not ends:
            v.problem = "wrong"
        out.append(v)
    return out


def report(run: ChaosRun, verdicts: list[Verdict], recover: float) -> str:
    problems = Counter(v.problem for v in verdicts if v.problem)
    same_attempt = sum(1 for v in verdicts if len(v.starts) != len(set(v.starts)))
    runs = Counter(len(v.ends) for v in verdicts)
    attempts = Counter(v.job.attempts if v.job else 0 for v in verdicts)
    mains = run.census
    rows = [("seed", run.seed), ("jobs", len(verdicts)),
            ("kills", ", ".join(f"{k} x{c}" for k, c in sorted(run.kills.items())) or "none"),
            ("up exits", f"{len(run.up_exits)} ({', '.join(run.up_exits) or '-'})"),
            ("Celery main processes at end", f"{len(mains)} (1 expected)"),
            ("scheduler threads died", thread_deaths(run)),
            ("lost", f"{problems['lost']} " + str(dict(Counter(v.job.state.value if v.job else 'not stored'
                                                            for v in verdicts if v.problem == 'lost')))),
            ("duplicated", problems["duplicated"]),
            ("wrong state", problems["wrong"]), ("an attempt started twice", same_attempt),
            ("jobs by runs to the end", ", ".join(f"{k}: {c}" for k, c in sorted(runs.items()))),
            ("jobs by attempts", ", ".join(f"{k}: {c}" for k, c in sorted(attempts.items()))),
            ("time to recover", f"{recover:.1f} s" + (" (deadline hit)" if problems["lost"] else "")),
            ("at the end of the wait", progress(run))]
    width = max(len(k) for k, _ in rows)
    lines = ["", "chaos run " + str(run.root), *(f"  {k:<{width}}  {v}" for k, v in rows), "  timeline:"]
    lines += [f"    {e}" for e in run.log]
    bad = [v for v in verdicts if v.problem]
    for v in bad[:12]:
        lines.append(describe(run, v))
    if len(bad) > 12:
        lines.append(f"  ... and {len(bad) - 12} more: {[v.job.id if v.job else v.plan.key for v in bad[12:]]}")
    text = "\n".join(lines)
    (run.root / "report.txt").write_text(text)
    return text


def describe(run: ChaosRun, v: Verdict) -> str:
    if v.job is None:
        return f"  {v.problem}: {v.plan} is not in the store"
    j = v.job
    head = (f"  {v.problem}: job {j.id} {v.plan.kind} (exit {v.plan.exit_code} wanted) -> {j.state.value} "
            f"exit={j.exit_code} reason={j.reason!r} attempts={j.attempts} starts={v.starts} ends={v.ends}")
    try:
        events = run.rt.store.events(j.id)
    except STORE_DOWN as exc:
        return f"{head}\n      events: {exc}"
    t0 = float(events[0]["time"]) if events else 0.0
    evs = [f"+{float(e.get('time', t0)) - t0:.1f}s {e.get('event', '')}{e.get('from', '')}->{e.get('to', '')}"
           f" {e.get('actor', '')} {e.get('reason', '')}".rstrip() for e in events]
    return head + "\n      events: " + " | ".join(evs)


def progress(run: ChaosRun, window: float = 30.0) -> str:
    if not run.ended:
        return "-"
    t, n = run.ended[-1]
    before = next((m for u, m in reversed(run.ended) if u <= t - window), run.ended[0][1])
    return f"{n} ended, {n - before} of them in the last {window:.0f}s of the wait"


def thread_deaths(run: ChaosRun) -> int:
    """Loops of ``up`` that died while ``up`` itself went on ("Exception in thread ...")."""
    try:
        return (run.root / "up.log").read_text(errors="replace").count("Exception in thread scheduler")
    except FileNotFoundError:
        return 0
