"""The Backend seam: what the scheduler and the dispatch tasks need from a place jobs run."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, Sequence, runtime_checkable

from crossdock.queue.errors import CrossdockError
from crossdock.queue.models import Job
from crossdock.queue.snapshot import Allocation, Node
from crossdock.queue.states import JobState


class BackendError(CrossdockError):
    """Root of backend failures."""


class SubmitFailed(BackendError):
    """The backend refused the job; retrying the same submission will not help."""


class BackendUnavailable(BackendError):
    """The backend could not be reached; ``retryable`` says whether to try again later."""

    def __init__(self, message: str, retryable: bool = True):
        super().__init__(message)
        self.retryable = retryable


@dataclass(frozen=True)
class Inventory:
    nodes: tuple[Node, ...]
    foreign: tuple[Allocation, ...] = ()
    """Capacity used by work crossdock did not submit."""


@dataclass(frozen=True)
class BackendStatus:
    """What a backend reports about one job it runs."""

    ref: str
    state: JobState
    reason: str = ""
    exit_code: int | None = None
    signal: int | None = None
    nodes: tuple[str, ...] = ()
    native_state: str = ""
    extra: dict[str, str] = field(default_factory=dict)


@runtime_checkable
class Backend(Protocol):
    kind: str

    def inventory(self) -> Inventory: ...

    def submit(self, job: Job) -> str:
        """Start ``job`` (placed: ``job.nodes``, ``job.gpu_ids``); return the backend reference.

        Idempotent per (job id, attempt): a second call finds what the first one started."""

    def cancel(self, job: Job) -> None: ...

    def preempt(self, job: Job, grace_seconds: int) -> None: ...

    def status(self, jobs: Sequence[Job]) -> dict[int, BackendStatus]:
        """One batched query for every given job; jobs the backend does not know are absent."""


@runtime_checkable
class SupportsArrays(Protocol):
    """A backend that takes tasks of one array as one submission (a Slurm array, an Indexed Job)."""

    def submit_array(self, tasks: Sequence[Job], throttle: int | None = None, fresh: bool = False) -> dict[int, str]:
        """Submit ``tasks`` (one array, one attempt) together, at most ``throttle`` running at
        once; return job id → backend reference of each task.

        Idempotent per group: a second call with the same tasks finds what the first one started.
        ``fresh`` says no earlier call can have started them, so a costly look may be skipped."""
