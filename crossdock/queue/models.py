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

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from crossdock.queue.states import JobState, Reason

JobId = int


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=False, validate_assignment=False)


class Gres(_Model):
    """One generic resource request, per node: ``gpu:a100:2`` -> name=gpu, type=a100, count=2."""

    name: str
    type: str | None = None
    count: int = Field(1, ge=1)


class GpuRequest(_Model):
    """GPUs asked for with ``--gpus``/``--gpus-per-node``/``--gpus-per-task`` or ``--gres=gpu``.

    ``type`` is one model (Slurm's GPU type); ``models`` widens it to any of a set. ``share`` is
    a fraction of one GPU (0 < share < 1) and only fits pools that declare GPU sharing; ``mig``
    names a MIG profile such as ``1g.10gb``.
    """

    count: int = Field(ge=1)
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
    max_running: int | None = Field(None, ge=1)

    @field_validator("task_ids")
    @classmethod
    def _sorted_unique(cls, v: list[int]) -> list[int]:
        if any(t < 0 for t in v):
            raise ValueError("array task ids must be >= 0")
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
    job_id: int | None = None
    array_task: int | None = None
    delay_minutes: int | None = None


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
    cpus_per_task: int = Field(1, ge=1)
    ntasks: int = Field(1, ge=1)
    nodes: int = Field(1, ge=1)
    nodes_max: int | None = Field(None, ge=1)
    ntasks_per_node: int | None = Field(None, ge=1)
    mem_per_node_mib: int | None = Field(None, ge=0)
    mem_per_cpu_mib: int | None = Field(None, ge=0)
    gres: list[Gres] = Field(default_factory=list)
    gpus: GpuRequest | None = None
    time_limit_seconds: int | None = Field(None, ge=1)
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
    submit_time: datetime | None = None
    eligible_time: datetime | None = None
    scheduled_time: datetime | None = None
    start_time: datetime | None = None
    end_time: datetime | None = None

    @property
    def display_id(self) -> str:
        if self.array_job_id is not None and self.array_task_id is not None:
            return f"{self.array_job_id}_{self.array_task_id}"
        return str(self.id)
