"""Job specifications and job records.

``JobSpec`` is what a user asked for (from the sbatch-like CLI or the Python API), normalized:
seconds for the time limit (Slurm's minutes are converted at the Slurm backend), MiB for memory. ``Job`` is a spec plus what happened
to it. Both are pydantic models with ``extra="forbid"`` so a misspelt field is an error, not a
silently ignored wish.
"""

from __future__ import annotations

import math
from datetime import datetime
from enum import StrEnum
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from crossdock.queue.errors import shown
from crossdock.queue.sbatch_native import native_name
from crossdock.queue.states import JobState, Reason

JobId = int

# Admission bounds, Slurm's where it has them; what they keep out is arithmetic the cycle cannot do
# (int64 arrays, datetimes) on values no cluster can honour.
INT32 = 2**31 - 1
MAX_TIME_LIMIT_SECONDS = 365 * 86400
"""A year; longer limits are INFINITE (no limit) in crossdock, as a year is as good as forever."""
MAX_CPUS_PER_TASK = 65535
"""Slurm's cpus_per_task is 16 bits."""
MAX_TASKS = 1 << 20
MAX_NODES = 1 << 20
MAX_GPUS = 65535
MAX_MEM_MIB = 1 << 40
"""1 EiB per node."""
MAX_NAME_BYTES = 1024
MAX_PATH_BYTES = 4096
"""PATH_MAX."""
MAX_ARG_BYTES = 128 * 1024
"""Linux's MAX_ARG_STRLEN: the longest single argument execve takes."""
MAX_ARGV_BYTES = 1024 * 1024
MAX_SCRIPT_BYTES = 64 * 1024 * 1024
"""The most the config's ``limits.max_script_size`` (4 MiB, Slurm's default) may be raised to."""


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=False, validate_assignment=False, allow_inf_nan=False)


class Gres(_Model):
    """One generic resource request, per node: ``gpu:a100:2`` -> name=gpu, type=a100, count=2."""

    name: str
    type: str | None = None
    count: int = Field(1, ge=1, le=INT32)


class GpuRequest(_Model):
    """GPUs asked for with ``--gpus``/``--gpus-per-node``/``--gpus-per-task`` or ``--gres=gpu``.

    ``type`` is one model (Slurm's GPU type); ``models`` widens it to any of a set. ``share`` is
    a fraction of one GPU (0 < share < 1) and only fits pools that declare GPU sharing; ``mig``
    names a MIG profile such as ``1g.10gb``.
    """

    count: int = Field(ge=1, le=MAX_GPUS)
    type: str | None = None
    per: Literal["job", "node", "task"] = "node"
    models: list[str] = Field(default_factory=list)
    share: float | None = Field(None, gt=0, lt=1)
    mig: str | None = None

    def allowed_models(self) -> list[str]:
        models = list(self.models)
        if self.type and self.type not in models:
            models.insert(0, self.type)
        return models


class ArraySpec(_Model):
    task_ids: list[int] = Field(min_length=1)
    max_running: int | None = Field(None, ge=1, le=INT32)

    @field_validator("task_ids")
    @classmethod
    def _sorted_unique(cls, v: list[int]) -> list[int]:
        if any(t < 0 or t > INT32 for t in v):
            raise ValueError(f"array task ids must be within 0–{INT32}")
        return sorted(set(v))


class DependencyType(StrEnum):
    AFTER = "after"
    AFTEROK = "afterok"
    AFTERNOTOK = "afternotok"
    AFTERANY = "afterany"
    AFTERCORR = "aftercorr"
    AFTERBURSTBUFFER = "afterburstbuffer"
    SINGLETON = "singleton"


class Dependency(_Model):
    type: DependencyType
    job_id: int | None = Field(None, ge=1, le=2**53)
    array_task: int | None = Field(None, ge=0, le=INT32)
    delay_minutes: int | None = Field(None, ge=1, le=INT32)


class DependencySpec(_Model):
    combine: Literal["AND", "OR"] = "AND"
    deps: list[Dependency] = Field(min_length=1)


class PythonCall(_Model):
    """A Python callable with its arguments, serialized by cloudpickle and base64-encoded."""

    payload: str
    qualname: str = ""
    signature: str = ""
    """HMAC-SHA256 (hex) of the payload under its owner's key (:mod:`crossdock.signing`): a
    runner unpickles only a payload whose seal matches the job's owner."""
    parts: str = ""
    """A ``map``'s reference to its parts in the store: the function once, each task's arguments
    apart, each sealed (the payload is then empty)."""


class KillSignal(_Model):
    """sbatch's ``--signal=[{R|B}:]<sig_num>[@sig_time]``: send ``number`` ``seconds`` before the time limit."""

    number: int = Field(ge=1, le=64)
    seconds: int = Field(60, ge=0, le=0xFFFF)
    batch_only: bool = False
    """``B:``: to the batch shell only, not to every step."""
    reservation: bool = False
    """``R:``: also before the end of the job's reservation."""


class ServiceReplica(_Model):
    """Marks a job as one replica of an inference service (:mod:`crossdock.queue.services`):
    placed like any job, spread from its siblings, never preempted, stopped by the service's
    controller rather than by a time limit."""

    name: str = Field(min_length=1, max_length=40)
    """The service."""
    replica: int = Field(ge=0, le=INT32)
    """Its ordinal in the service (never reused)."""
    generation: int = Field(1, ge=1, le=2**53)
    """The spec generation it runs; older ones are replaced by a rolling update."""
    port: int = Field(8000, ge=1, le=65535)
    """The container port the server listens on (local replicas get ``PORT`` instead)."""
    ready_path: str = Field("/healthz", min_length=1, max_length=MAX_PATH_BYTES)
    replaces: int | None = Field(None, ge=1, le=2**53)
    """The replica job this one takes over from (a move back to the preferred pool, a rolling
    update): that one drains once this one is ready."""
    pinned: bool = False
    """Placed only in its first pool, never widened to a fallback pool (a move back)."""


class JobSpec(_Model):
    """What a user asked for. Defaults are Slurm's."""

    name: str = ""
    user: str = ""
    # What to run: exactly one of command (argv), script (text, with its args) or python.
    command: list[str] | None = None
    script: str | None = None
    script_path: str | None = None
    python: PythonCall | None = None
    image: str | None = None
    """Container image for backends that run containers (Kubernetes); ignored elsewhere."""
    args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    export: str = "ALL"
    workdir: str | None = None
    stdout: str | None = None
    stderr: str | None = None
    # Resources, Slurm's model.
    cpus_per_task: int = Field(1, ge=1, le=MAX_CPUS_PER_TASK)
    ntasks: int = Field(1, ge=1, le=MAX_TASKS)
    nodes: int = Field(1, ge=1, le=MAX_NODES)
    nodes_max: int | None = Field(None, ge=1, le=MAX_NODES)
    ntasks_per_node: int | None = Field(None, ge=1, le=MAX_TASKS)
    mem_per_node_mib: int | None = Field(None, ge=0, le=MAX_MEM_MIB)
    mem_per_cpu_mib: int | None = Field(None, ge=0, le=MAX_MEM_MIB)
    gres: list[Gres] = Field(default_factory=list)
    gpus: GpuRequest | None = None
    time_limit_seconds: int | None = Field(None, ge=1, le=MAX_TIME_LIMIT_SECONDS)
    """Wall-clock limit of one attempt; None: no limit. The sbatch parser gives whole minutes
    (Slurm rounds ``-t`` up to minutes); the Python API may give any number of seconds."""
    # Queueing.
    queue: str | None = None
    priority_class: str | None = None
    nice: int = Field(0, ge=-2147483645, le=2147483645)
    array: ArraySpec | None = None
    dependency: DependencySpec | None = None
    hold: bool = False
    requeue: bool = True
    exclusive: bool = False
    # Placement hints.
    backend: str | None = None
    pool: str | None = None
    partition: str | None = None
    placement: str | None = None
    nodelist: list[str] = Field(default_factory=list)
    exclude: list[str] = Field(default_factory=list)
    anti_affinity: bool = False
    """At most one worker of this job (or one task of this array) per node."""
    topology: str | None = None
    """A node label key; all workers of a gang land in one domain of it (e.g. an NVLink domain)."""
    node_selector: dict[str, str] = Field(default_factory=dict)
    tolerations: list[dict[str, str]] = Field(default_factory=list)
    constraint: str | None = Field(None, min_length=1, max_length=MAX_NAME_BYTES)
    """Slurm's ``--constraint`` as written: node features, ``&`` and, ``|`` or (pools map them, see Pool.features)."""
    reservation: str | None = Field(None, min_length=1, max_length=MAX_NAME_BYTES)
    licenses: str | None = Field(None, min_length=1, max_length=MAX_NAME_BYTES)
    """Slurm's ``--licenses``, normalized: ``name:count`` joined by ``,`` (all) or ``|`` (any)."""
    # Timing.
    begin: datetime | None = None
    """Not eligible before this time (``--begin``): the job pends with reason BeginTime."""
    deadline: datetime | None = None
    time_min_seconds: int | None = Field(None, ge=1, le=MAX_TIME_LIMIT_SECONDS)
    kill_signal: KillSignal | None = None
    slurm_options: list[str] = Field(default_factory=list)
    """sbatch options crossdock does not model (``--hint=nomultithread``…), passed to Slurm as
    written; a job that has any runs only in pools with a Slurm partition (``sbatch_native``)."""

    @field_validator("slurm_options")
    @classmethod
    def _native_only(cls, options: list[str]) -> list[str]:
        for arg in options:
            native_name(arg)
        return options
    service: ServiceReplica | None = None
    """Set on the replica jobs of a service (by its controller); None for batch jobs."""

    @model_validator(mode="before")
    @classmethod
    def _upgrade(cls, data: object) -> object:
        """Specs stored before the limit moved to seconds carry ``time_limit_minutes`` (and
        perhaps ``time_limit_seconds``, which then won); read them as they were meant."""
        if isinstance(data, dict) and "time_limit_minutes" in data:
            data = dict(data)
            minutes = data.pop("time_limit_minutes")
            if data.get("time_limit_seconds") is None and minutes is not None:
                if not isinstance(minutes, int) or isinstance(minutes, bool) or minutes < 1:
                    raise ValueError(f"time_limit_minutes: {minutes!r} is not a whole number >= 1; "
                                     "give time_limit_seconds instead")
                data["time_limit_seconds"] = minutes * 60
        return data

    @model_validator(mode="after")
    def _check(self) -> "JobSpec":
        given = [n for n in ("command", "script", "python") if getattr(self, n) is not None]
        if len(given) > 1:
            raise ValueError(f"give one of command, script or python, not {' and '.join(given)}")
        if self.mem_per_node_mib is not None and self.mem_per_cpu_mib is not None:
            raise ValueError("--mem and --mem-per-cpu are mutually exclusive; give one")
        if self.nodes_max is not None and self.nodes_max < self.nodes:
            raise ValueError(f"nodes: maximum {self.nodes_max} is below minimum {self.nodes}")
        if self.ntasks_per_node is not None and self.ntasks < self.ntasks_per_node * self.nodes:
            self.ntasks = self.ntasks_per_node * self.nodes
        if self.cpus_per_node() > MAX_CPUS_PER_TASK:
            raise ValueError(f"cpus_per_task x tasks per node: {self.cpus_per_node()} CPUs per node is above"
                             f" {MAX_CPUS_PER_TASK}; ask for fewer CPUs or tasks per node")
        if self.mem_per_node() > MAX_MEM_MIB:
            raise ValueError(f"mem_per_cpu_mib x CPUs per node: {self.mem_per_node()} MiB per node is above"
                             f" {MAX_MEM_MIB}; ask for less memory")
        if self.gpus_per_node() * self.nodes > MAX_GPUS * MAX_NODES:
            raise ValueError(f"gpus: {self.gpus_per_node()} GPUs per node on {self.nodes} nodes is too many")
        _check_text(self)
        return self

    # --- derived per-node requests (what one node must hold) -------------------------------
    def tasks_per_node(self) -> int:
        if self.ntasks_per_node:
            return self.ntasks_per_node
        return math.ceil(self.ntasks / self.nodes)

    def cpus_per_node(self) -> int:
        return self.cpus_per_task * self.tasks_per_node()

    def mem_per_node(self, default_mib: int = 0) -> int:
        """MiB one node must hold; ``default_mib`` when neither --mem nor --mem-per-cpu was given."""
        if self.mem_per_node_mib is not None:
            return self.mem_per_node_mib
        if self.mem_per_cpu_mib is not None:
            return self.mem_per_cpu_mib * self.cpus_per_node()
        return default_mib

    def gpu_request(self) -> GpuRequest | None:
        """The GPU request, merged from --gpus* and --gres=gpu (gres counts are per node)."""
        if self.gpus is not None:
            return self.gpus
        for g in self.gres:
            if g.name == "gpu":
                return GpuRequest(count=g.count, type=g.type, per="node")
        return None

    def gpus_per_node(self) -> int:
        req = self.gpu_request()
        if req is None:
            return 0
        if req.per == "node":
            return req.count
        if req.per == "task":
            return req.count * self.tasks_per_node()
        return math.ceil(req.count / self.nodes)

    def total_gpus(self) -> float:
        req = self.gpu_request()
        if req is None:
            return 0
        if req.share is not None:
            return req.share
        return self.gpus_per_node() * self.nodes

    def display_name(self) -> str:
        if self.name:
            return self.name
        if self.script_path:
            return self.script_path.rsplit("/", 1)[-1]
        if self.python is not None:
            return self.python.qualname or "python"
        return "wrap" if self.command else "job"


_TEXT_LIMITS = {"name": MAX_NAME_BYTES, "user": MAX_NAME_BYTES, "queue": MAX_NAME_BYTES, "priority_class": MAX_NAME_BYTES,
                "backend": MAX_NAME_BYTES, "pool": MAX_NAME_BYTES, "partition": MAX_NAME_BYTES,
                "placement": MAX_NAME_BYTES, "topology": MAX_NAME_BYTES, "image": MAX_PATH_BYTES,
                "workdir": MAX_PATH_BYTES, "stdout": MAX_PATH_BYTES, "stderr": MAX_PATH_BYTES,
                "script_path": MAX_PATH_BYTES, "export": MAX_ARGV_BYTES}


def _utf8_bytes(where: str, text: str) -> int:
    """Its length in UTF-8; text that is not UTF-8 (a surrogate-escaped byte from argv or a file
    name) is refused, since it can be neither stored as JSON nor passed on intact."""
    if "\0" in text:
        raise ValueError(f"{where}: contains a NUL character, which no name, path or argument can hold; remove it")
    try:
        return len(text.encode("utf-8"))
    except UnicodeEncodeError as exc:
        code = ord(text[exc.start])  # argv and file names carry an undecodable byte b as U+DC00 + b
        what = f"byte 0x{code - 0xDC00:02x}" if 0xDC80 <= code <= 0xDCFF else ascii(text[exc.start])
        raise ValueError(f"{where}: not valid UTF-8 text ({what} at character {exc.start});"
                         " use UTF-8 names, paths and commands") from None


def _check_text(spec: "JobSpec") -> None:
    for field, limit in _TEXT_LIMITS.items():
        value = getattr(spec, field)
        if value is not None and _utf8_bytes(field, value) > limit:
            raise ValueError(f"{field}: {len(value.encode())} bytes is longer than {limit}; shorten it")
    if spec.script is not None:  # its NULs are the script parser's to name (with the line)
        if _utf8_bytes("script", spec.script.replace("\0", "")) > MAX_SCRIPT_BYTES:
            raise ValueError(f"script: longer than {MAX_SCRIPT_BYTES} bytes, the most limits.max_script_size allows;"
                             " shorten it")
    total = 0
    for field in ("command", "args", "slurm_options"):
        for i, arg in enumerate(getattr(spec, field) or []):
            n = _utf8_bytes(f"{field}[{i}]", arg)
            if n > MAX_ARG_BYTES:
                raise ValueError(f"{field}[{i}]: {n} bytes is longer than {MAX_ARG_BYTES}, the longest argument"
                                 " a process can take; pass large data in a file")
            total += n
    if total > MAX_ARGV_BYTES:
        raise ValueError(f"command and args: {total} bytes in all is more than {MAX_ARGV_BYTES}; pass large data in a file")
    for mapping in ("env", "node_selector"):
        for key, value in getattr(spec, mapping).items():
            _utf8_bytes(f"{mapping}.{ascii(key)[1:-1]}", key + value)
    for i, name in enumerate([*spec.nodelist, *spec.exclude]):
        if _utf8_bytes("nodelist/exclude", name) > MAX_NAME_BYTES:
            raise ValueError(f"nodelist/exclude: host name {i} is longer than {MAX_NAME_BYTES} bytes")


def validation_message(exc: ValidationError) -> str:
    """The first problem of a spec as one line: the field, the value given and what is accepted."""
    err = exc.errors()[0]
    where = ".".join(str(p) for p in err["loc"])
    msg = err["msg"].removeprefix("Value error, ")
    if not where:
        return msg  # the spec's own checks name their fields
    return f"{where}: invalid value {shown(err.get('input'), 80)}; {msg}"


ATTEMPTS_KEPT = 100
"""How many ended attempts a job keeps (``Job.past_attempts``): the oldest go first."""


REQUEUED = "REQUEUED"
"""sacct's state of a run its backend requeued itself (Slurm's own preemption): crossdock follows
the run that starts again as the same attempt, so the row keeps the attempt's number."""


class Attempt(_Model):
    """One ended attempt of a requeued job, as it was when the requeue ended it (sacct -D's row):
    the state it ended in, why a new attempt followed, where it ran and how long."""

    attempt: int
    state: JobState | Literal["REQUEUED"]
    reason: str = Reason.NONE
    """Why the job went back to the queue (Preempted, Requeued, NodeLost, Migrated...)."""
    backend: str | None = None
    pool: str | None = None
    backend_ref: str | None = None
    nodes: list[str] = Field(default_factory=list)
    exit_code: int | None = None
    signal: int | None = None
    max_rss_kib: int | None = None
    start_time: datetime | None = None
    end_time: datetime | None = None


class Job(_Model):
    """A job record: the spec plus its status. Array tasks are jobs of their own."""

    id: JobId
    spec: JobSpec
    state: JobState = JobState.PENDING
    reason: str = Reason.NONE
    attempts: int = 0
    array_job_id: JobId | None = None
    array_task_id: int | None = None
    queue: str = ""
    priority_class: str = ""
    priority: int = 0
    preemptible: bool = False
    pools: list[str] = Field(default_factory=list)
    """Pools the job may be placed in (resolved at submit from queue, --pool, --partition, --backend)."""
    backend: str | None = None
    pool: str | None = None
    backend_ref: str | None = None
    nodes: list[str] = Field(default_factory=list)
    gpu_ids: list[str] = Field(default_factory=list)
    preempt_requested: bool = False
    """Being stopped for a higher-priority job (its capacity is freed at the end of its grace period)."""
    preempt_grace: float | None = None
    """Seconds the preempted job has between SIGTERM and SIGKILL."""
    preempt_deadline: datetime | None = None
    """When the grace period of the preemption ends: the follower stops what still runs then."""
    cancel_requested: bool = False
    """A user cancelled the placed job; its backend is stopping it."""
    dispatched: datetime | None = None
    """When a dispatch task claimed this attempt (a pending cancel then waits for the backend)."""
    pid: int | None = None
    """The local job's process group, while it runs."""
    explanation: str = ""
    """Why the job is not running, node by node, as kube-scheduler explains it."""
    alloc_cpu_milli: int = 0
    alloc_mem_mib: int = 0
    exit_code: int | None = None
    signal: int | None = None
    max_rss_kib: int | None = None
    """The most resident memory (KiB) the attempt was seen to use, where its backend measures it
    (the local backend: its process tree)."""
    submit_time: datetime | None = None
    eligible_time: datetime | None = None
    scheduled_time: datetime | None = None
    start_time: datetime | None = None
    end_time: datetime | None = None
    past_attempts: list[Attempt] = Field(default_factory=list)
    """The attempts a requeue ended, oldest first (the last :data:`ATTEMPTS_KEPT`); the job's own
    fields are its last attempt's."""

    @property
    def display_id(self) -> str:
        if self.array_job_id is not None and self.array_task_id is not None:
            return f"{self.array_job_id}_{self.array_task_id}"
        return str(self.id)
