"""The one small interface behind which Slurm is driven (CLI or slurmrestd), and its records.

Both drivers speak Slurm 22.05's openapi v0.0.38 shapes (``squeue --json``, ``sinfo --json``
and slurmrestd return the same job and node objects), so the parsing of those objects lives
here, once.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Protocol, Sequence, runtime_checkable

from crossdock.backends.slurm.states import decode_wait_status, expand_array_tasks, node_names
from crossdock.queue.ports import BackendError, BackendUnavailable, SubmitFailed


class SlurmError(BackendError):
    """Slurm refused or failed an operation."""

    retryable = False


class SlurmUnavailable(SlurmError, BackendUnavailable):
    """slurmctld (or slurmrestd) cannot be reached right now; retrying later may succeed."""

    def __init__(self, message: str):
        BackendUnavailable.__init__(self, message, retryable=True)


class SubmitRejected(SlurmError, SubmitFailed):
    """Slurm rejected a submission (bad partition, impossible GRES…): retrying will not help."""


class Unsupported(SlurmError):
    """The driver cannot do this operation (slurmrestd v0.0.38 has no requeue, for example)."""


# Messages by which sbatch/squeue/scontrol say the controller is not there (retryable).
UNAVAILABLE_PATTERNS = re.compile(
    r"Unable to contact slurm controller|Socket timed out|Connection refused|Zero Bytes were transmitted"
    r"|Communication connection failure|slurm_load_jobs error|Slurm backup controller in standby"
    r"|Transport endpoint is not connected|Unable to establish controller"
    # munged restarting: the client cannot sign the request, slurmctld never saw it
    r"|Munge encode failed|Protocol authentication error"
    # Right after slurmctld restarts, nodes are "unknown" until their slurmd registers again
    # and submissions are refused with this; it persists only while nodes really are down.
    r"|Required node not available",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class SubmitRequest:
    """Everything one ``sbatch`` needs, in Slurm's own units (MiB, minutes)."""

    script: str
    name: str
    comment: str
    workdir: str
    partition: str | None = None
    nodelist: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    nodes: int = 1
    nodes_max: int | None = None
    ntasks: int = 1
    ntasks_per_node: int | None = None
    cpus_per_task: int = 1
    mem_per_node_mib: int | None = None
    mem_per_cpu_mib: int | None = None
    gres: tuple[str, ...] = ()  # "gpu:a100:2", per node
    gpus: str | None = None  # --gpus (per job), "[type:]count"
    gpus_per_task: str | None = None
    time_limit_minutes: int | None = None
    array: str | None = None  # "0-9%2"
    dependency: str | None = None  # "afterok:12:13"
    stdout: str | None = None
    stderr: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    export: str = "ALL"
    hold: bool = False
    requeue: bool = True
    exclusive: bool = False
    nice: int = 0
    constraint: str | None = None  # Slurm features, as the user wrote them
    signal: str | None = None  # "B:10@90"
    time_min_minutes: int | None = None
    begin: str | None = None  # "2026-01-02T10:00:00", the submit host's local time
    deadline: str | None = None
    reservation: str | None = None
    licenses: str | None = None  # "matlab:2,ansys:1"
    native: tuple[str, ...] = ()  # sbatch options passed as written ("--hint=nomultithread")
    args: tuple[str, ...] = ()
    user: str = ""
    """The job's owner: a driver that can (REST with per-user JWTs) submits as them."""


@dataclass(frozen=True)
class SlurmJob:
    """One job (or array task, or the still-pending rest of an array) as Slurm reports it."""

    job_id: int
    state: str
    reason: str
    exit_code: int
    signal: int | None
    name: str = ""
    comment: str = ""
    user: str = ""
    partition: str = ""
    nodes: tuple[str, ...] = ()
    cpus: int = 0
    memory_mib: int = 0  # allocated, all nodes together (0 while pending)
    gpus: dict[str, int] = field(default_factory=dict)  # gpu type ("" when untyped) → count
    restarts: int = 0
    array_job_id: int | None = None
    array_task_id: int | None = None
    array_pending_tasks: tuple[int, ...] = ()  # the record stands for these not-yet-split tasks

    @property
    def ref(self) -> str:
        """Slurm's own name for it: ``"123"`` or ``"120_3"``."""
        if self.array_job_id is not None and self.array_task_id is not None:
            return f"{self.array_job_id}_{self.array_task_id}"
        return str(self.job_id)


@dataclass(frozen=True)
class SlurmNode:
    name: str
    state: str  # base state, lower case: idle, mixed, allocated, down, drained…
    flags: tuple[str, ...]
    partitions: tuple[str, ...]
    cpus: int
    cpus_alloc: int
    memory_mib: int
    memory_alloc_mib: int
    gpus: dict[str, int]
    gpus_alloc: dict[str, int]
    reason: str = ""


@dataclass(frozen=True)
class SlurmPartition:
    name: str
    nodes: tuple[str, ...]
    priority_tier: int = 1
    default: bool = False
    state: str = "UP"


@runtime_checkable
class SlurmDriver(Protocol):
    """How crossdock talks to one Slurm cluster. Every call is one round trip."""

    name: str

    def submit(self, request: SubmitRequest) -> int:
        """Submit; return the job id (the array job id for an array)."""

    def jobs(self) -> list[SlurmJob]:
        """Every job slurmctld still holds in memory (finished ones for MinJobAge)."""

    def nodes(self) -> list[SlurmNode]: ...

    def partitions(self) -> list[SlurmPartition]: ...

    def signal(self, job_id: str, signal: str) -> None:
        """Send ``signal`` to the job's batch shell and all its steps."""

    def cancel(self, job_id: str) -> None: ...

    def requeue(self, job_id: str) -> None: ...

    def hold(self, job_id: str) -> None: ...

    def release(self, job_id: str) -> None: ...

    def update_nodes(self, names: Sequence[str], state: str) -> None:
        """``scontrol update nodename=<names> state=<state>`` (``power_up``, ``power_down_asap``…)."""

    def will_run(self, request: SubmitRequest) -> WillRun:
        """When and where Slurm would start ``request`` if submitted now (``sbatch --test-only``)."""

    def batch_launched(self, job_id: str) -> bool | None:
        """Whether the node running the job has its batch step (``sstat``): True; False when the
        node answered that it has none; None when that cannot be told (no answer, an error)."""

    def launch_timeout_s(self) -> float:
        """Seconds after which slurmctld calls a batch job that has not launched missing
        (``BatchStartTimeout`` + ``MessageTimeout`` of ``scontrol show config``)."""


@dataclass(frozen=True)
class WillRun:
    """Slurm's answer to a will-run test: the expected start (controller's local time, ISO) and nodes."""

    start: str
    nodes: tuple[str, ...] = ()
    partition: str = ""


# --- v0.0.38 object parsing (shared by squeue/sinfo --json and slurmrestd) -----------------

_GRES = re.compile(r"^gpu(?::([^:(]+))?:(\d+)")


def parse_gpu_gres(text: str) -> dict[str, int]:
    """``"gpu:a100:8(S:0)"`` → {"a100": 8}; ``"gpu:2"`` → {"": 2}; other GRES are ignored."""
    out: dict[str, int] = {}
    for item in re.split(r",(?![^()]*\))", text or ""):
        m = _GRES.match(item.strip())
        if m and int(m[2]):
            kind = m[1] or ""
            if kind.isdigit():  # "gpu:2(IDX…)" has no type
                kind = ""
            out[kind] = out.get(kind, 0) + int(m[2])
    return out


_UNITS = {"K": 1 / 1024, "M": 1, "G": 1024, "T": 1024 * 1024}


def tres_memory_mib(tres: str) -> int:
    """``mem=`` of a TRES string (``"cpu=3,mem=300M,node=1"`` → 300), in MiB."""
    for item in (tres or "").split(","):
        key, _, value = item.partition("=")
        if key == "mem" and value:
            unit = value[-1].upper()
            if unit in _UNITS:
                return int(float(value[:-1]) * _UNITS[unit])
            return int(float(value))
    return 0


def _int(value: Any, default: int = 0) -> int:
    if isinstance(value, dict):  # later data parsers wrap numbers: {"set": true, "number": 3}
        value = value.get("number", default) if value.get("set", True) else default
    try:
        return int(value)
    except (TypeError, ValueError):
        return default


def parse_job(obj: dict[str, Any]) -> SlurmJob:
    raw_exit = _int(obj.get("exit_code"))
    exit_code, signal = decode_wait_status(raw_exit) if raw_exit >= 0 else (0, None)
    array_job_id = _int(obj.get("array_job_id")) or None
    task = obj.get("array_task_id")
    task_id = None if task is None else _int(task, -1)
    pending_tasks: tuple[int, ...] = ()
    if array_job_id is not None and (task_id is None or task_id < 0):
        task_id = None
        pending_tasks = tuple(expand_array_tasks(obj.get("array_task_string") or ""))
    gpus: dict[str, int] = {}
    for detail in obj.get("gres_detail") or []:
        for kind, count in parse_gpu_gres(detail).items():
            gpus[kind] = gpus.get(kind, 0) + count
    return SlurmJob(
        job_id=_int(obj.get("job_id")),
        state=str(obj.get("job_state", "")),
        reason=str(obj.get("state_reason") or "None"),
        exit_code=exit_code,
        signal=signal,
        name=obj.get("name") or "",
        comment=obj.get("comment") or "",
        user=obj.get("user_name") or "",
        partition=obj.get("partition") or "",
        nodes=tuple(node_names(obj.get("nodes"))),
        cpus=_int(obj.get("cpus")),
        memory_mib=tres_memory_mib(obj.get("tres_alloc_str") or ""),
        gpus=gpus,
        restarts=_int(obj.get("restart_cnt")),
        array_job_id=array_job_id,
        array_task_id=task_id,
        array_pending_tasks=pending_tasks,
    )


def parse_node(obj: dict[str, Any]) -> SlurmNode:
    return SlurmNode(
        name=obj["name"],
        state=str(obj.get("state", "")).lower(),
        flags=tuple(str(f).lower() for f in obj.get("state_flags") or ()),
        partitions=tuple(obj.get("partitions") or ()),
        cpus=_int(obj.get("cpus")),
        cpus_alloc=_int(obj.get("alloc_cpus")),
        memory_mib=_int(obj.get("real_memory")),
        memory_alloc_mib=_int(obj.get("alloc_memory")),
        gpus=parse_gpu_gres(obj.get("gres") or ""),
        gpus_alloc=parse_gpu_gres(obj.get("gres_used") or ""),
        reason=obj.get("reason") or "",
    )
