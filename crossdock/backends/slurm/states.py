"""Slurm job states → crossdock job states, exit-status decoding, array index strings, node lists.

The table is the whole translation; everything else in this module only decodes numbers
and strings. A Slurm state missing from the table is reported as-is in ``reason`` and
mapped to NODE_FAIL only by :func:`translate` callers that must decide (see there).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from crossdock.queue.hostlist import expand_hostlist
from crossdock.queue.states import JobState, Reason

# Slurm base state (as squeue --json / slurmrestd v0.0.38 / sacct print it) → crossdock state,
# and the reason crossdock records when Slurm gives none of its own.
SLURM_STATES: dict[str, tuple[JobState, str | None]] = {
    # Waiting.
    "PENDING": (JobState.PENDING, None),
    "REQUEUED": (JobState.PENDING, "Requeued"),  # transient, on its way back to PENDING
    "REQUEUE_FED": (JobState.PENDING, "Requeued"),
    "REQUEUE_HOLD": (JobState.PENDING, Reason.JOB_HELD_ADMIN),
    "SPECIAL_EXIT": (JobState.PENDING, Reason.JOB_HELD_ADMIN),  # requeued held on a special exit code
    "RESV_DEL_HOLD": (JobState.PENDING, Reason.JOB_HELD_ADMIN),
    # Holding resources.
    "CONFIGURING": (JobState.SCHEDULED, "Configuring"),  # allocated, nodes being readied
    "POWER_UP_NODE": (JobState.SCHEDULED, "PowerUpNode"),
    "RUNNING": (JobState.RUNNING, None),
    "RESIZING": (JobState.RUNNING, "Resizing"),
    "SUSPENDED": (JobState.RUNNING, "Suspended"),  # stopped but keeps its memory and node
    "STOPPED": (JobState.RUNNING, "Stopped"),
    "SIGNALING": (JobState.RUNNING, "Signaling"),
    "STAGE_OUT": (JobState.RUNNING, "StageOut"),
    "UPDATE_DB": (JobState.RUNNING, None),
    # Finished processes but the epilog still runs: not final yet (a cancel may still land).
    "COMPLETING": (JobState.RUNNING, "Completing"),
    # Final.
    "COMPLETED": (JobState.COMPLETED, None),
    "FAILED": (JobState.FAILED, Reason.NON_ZERO_EXIT),
    "LAUNCH_FAILED": (JobState.FAILED, "LaunchFailed"),
    "RECONFIG_FAIL": (JobState.FAILED, "ReconfigFail"),
    "CANCELLED": (JobState.CANCELLED, Reason.CANCELLED_BY_USER),
    "REVOKED": (JobState.CANCELLED, "Revoked"),  # a federation sibling started it elsewhere
    "TIMEOUT": (JobState.TIMEOUT, Reason.TIME_LIMIT),
    "DEADLINE": (JobState.TIMEOUT, "Deadline"),
    "NODE_FAIL": (JobState.NODE_FAIL, Reason.NODE_LOST),
    "BOOT_FAIL": (JobState.NODE_FAIL, "BootFail"),
    "OUT_OF_MEMORY": (JobState.OUT_OF_MEMORY, "OutOfMemory"),
    "PREEMPTED": (JobState.PREEMPTED, Reason.PREEMPTED),  # PreemptMode=CANCEL; REQUEUE shows PENDING
}

# Slurm pending reasons crossdock has a name of its own for; others pass through verbatim.
SLURM_REASONS: dict[str, str] = {
    "None": Reason.NONE,
    "Priority": Reason.PRIORITY,
    "Resources": Reason.RESOURCES,
    "Dependency": Reason.DEPENDENCY,
    "DependencyNeverSatisfied": Reason.DEPENDENCY_NEVER_SATISFIED,
    "JobHeldUser": Reason.JOB_HELD_USER,
    "JobHeldAdmin": Reason.JOB_HELD_ADMIN,
    "BeginTime": Reason.BEGIN_TIME,
    "JobArrayTaskLimit": Reason.ARRAY_TASK_LIMIT,
    "NonZeroExitCode": Reason.NON_ZERO_EXIT,
    "TimeLimit": Reason.TIME_LIMIT,
}


class UnknownSlurmState(ValueError):
    def __init__(self, state: str):
        self.state = state
        super().__init__(f"unknown Slurm job state {state!r}; add it to SLURM_STATES in {__name__}")


@dataclass(frozen=True)
class Translated:
    state: JobState
    reason: str


def translate(slurm_state: str, slurm_reason: str | None = None) -> Translated:
    """Translate Slurm's state and reason; Slurm's own reason wins over the table's default.

    ``slurm_state`` may carry flags (``"CANCELLED by 0"``, ``"RUNNING,COMPLETING"``); the
    base state is the first word before a comma or space.
    """
    base = re.split(r"[ ,+]", slurm_state.strip(), maxsplit=1)[0].upper()
    try:
        state, default_reason = SLURM_STATES[base]
    except KeyError:
        raise UnknownSlurmState(slurm_state) from None
    reason = SLURM_REASONS.get(slurm_reason or "None", slurm_reason or "None")
    if reason == Reason.NONE and default_reason is not None:
        reason = default_reason
    return Translated(state, str(reason))


def decode_wait_status(raw: int) -> tuple[int, int | None]:
    """(exit code, signal) from the raw wait status squeue --json and slurmrestd report.

    Slurm 22.05 prints ``exit 3`` as 768 and a job killed by SIGTERM as 15, the way waitpid
    returns them: the exit code is the second byte, the signal the low 7 bits.
    """
    if raw < 0 or raw >= 1 << 32:
        raise ValueError(f"exit status {raw} is not a wait status")
    if raw >= 1 << 16:  # NO_VAL and friends: nothing known yet
        return 0, None
    signal = raw & 0x7F
    return (raw >> 8) & 0xFF, signal or None


def parse_exit_code(text: str) -> tuple[int, int | None]:
    """(exit code, signal) from scontrol/sacct's ``"3:0"`` form."""
    code, _, signal = text.strip().partition(":")
    sig = int(signal) if signal else 0
    return int(code), sig or None


_RANGE = re.compile(r"^(\d+)(?:-(\d+)(?::(\d+))?)?$")


def expand_array_tasks(text: str) -> list[int]:
    """Task ids of Slurm's array string: ``"2-5%2"`` → [2, 3, 4, 5]; ``"1,3,8-12:2"``."""
    spec = text.split("%", 1)[0].strip()
    if not spec:
        return []
    ids: list[int] = []
    for part in spec.split(","):
        m = _RANGE.match(part.strip())
        if not m:
            raise ValueError(f"bad array index {part!r} in {text!r}")
        first, last, step = int(m[1]), int(m[2] or m[1]), int(m[3] or 1)
        ids.extend(range(first, last + 1, step))
    return ids


def format_array_tasks(task_ids: list[int], max_running: int | None = None) -> str:
    """The ``--array`` value for sorted task ids, with runs compressed: [0,1,2,5] → ``"0-2,5"``."""
    parts: list[str] = []
    start = prev = None
    for t in sorted(set(task_ids)):
        if prev is not None and t == prev + 1:
            prev = t
            continue
        if start is not None:
            parts.append(f"{start}-{prev}" if prev != start else str(start))
        start = prev = t
    if start is not None:
        parts.append(f"{start}-{prev}" if prev != start else str(start))
    return ",".join(parts) + (f"%{max_running}" if max_running else "")


NO_NODES = frozenset({"", "(null)", "None assigned", "None"})
"""What Slurm prints in a node list field that holds no node."""


def node_names(text: str | None) -> list[str]:
    """The hosts of a node list field (``cpu[1-2],gpu-a100-1``), none for Slurm's empty markers.

    The grammar is crossdock's one hostlist expander's (:mod:`crossdock.queue.hostlist`); a
    malformed list raises its ``HostlistError`` rather than yielding made-up names."""
    text = (text or "").strip()
    return [] if text in NO_NODES else expand_hostlist(text)
