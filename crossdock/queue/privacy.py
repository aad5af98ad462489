"""What one user may see of another's work, after slurm.conf's ``PrivateData``: pure functions
over jobs, records and usage that every face (the socket, the REST API, the CLI through them)
applies through :class:`~crossdock.gateway.direct.Direct`.

Another user's job always shows that it exists, its state, user, queue, resources, times and
placement (squeue's columns). Its environment (``--export`` values too) and its Python call (payload, seal, a ``map``'s
parts) are never shown to anyone but its owner and admins: they may carry secrets, and no
config opens them. The config's ``private_data`` (:data:`~crossdock.queue.config.DEFAULT_PRIVATE_DATA`:
``jobs``) hides more:

- ``jobs``: the script, command, arguments, working directory, output paths,
  sbatch options and the output itself (``logs``). Unlike Slurm's ``jobs``, the job itself stays
  listed: users share the queue and see why theirs waits.
- ``usage``: fair-share usage of other users (the queues' totals stay).
- ``events``: the event streams of other users' jobs.
"""

from __future__ import annotations

from typing import Any, Collection, Mapping

from crossdock.queue.models import Job
from crossdock.queue.serving import ServiceSpec

CONTENTS = {"command": None, "script": None, "script_path": None, "args": [], "workdir": None, "stdout": None,
            "stderr": None, "slurm_options": []}
"""A job's contents as another user sees them under ``private_data: [jobs]``."""
RECORD_CONTENTS = ("workdir",)
"""What a history record keeps of a job's contents (it has no command, script nor environment)."""


def sees_all(viewer: str, admin: bool, owner: str) -> bool:
    """Whether ``viewer`` sees all of ``owner``'s work: their own, or an admin's view."""
    return admin or owner == viewer


def visible(job: Job, viewer: str, admin: bool, private: Collection[str]) -> Job:
    """``job`` as ``viewer`` may see it (itself for its owner and admins)."""
    if sees_all(viewer, admin, job.spec.user):
        return job
    spec = job.spec
    update: dict[str, Any] = {"env": {}, "export": export_names(spec.export), "name": spec.display_name()}
    if spec.python is not None:
        update["python"] = spec.python.model_copy(update={"payload": "", "signature": "", "parts": ""})
    if "jobs" in private:
        update.update(CONTENTS)
    return job.model_copy(update={"spec": spec.model_copy(update=update)})


def export_names(export: str) -> str:
    """sbatch's ``--export`` list without its values (``ALL,DB_PASSWORD=x`` → ``ALL,DB_PASSWORD``)."""
    return ",".join(part.split("=", 1)[0] for part in export.split(","))


def visible_record(record: Mapping[str, Any], viewer: str, admin: bool, private: Collection[str]) -> dict[str, Any]:
    """A history record as ``viewer`` may see it."""
    if "jobs" not in private or sees_all(viewer, admin, str(record.get("user", ""))):
        return dict(record)
    return {k: v for k, v in record.items() if k not in RECORD_CONTENTS}


def visible_usage(usage: Mapping[str, float], viewer: str, admin: bool, private: Collection[str]) -> dict[str, float]:
    """Fair-share usage (keys ``queue`` and ``queue/user``) as ``viewer`` may see it."""
    if "usage" not in private or admin:
        return dict(usage)
    return {k: v for k, v in usage.items() if "/" not in k or k.split("/", 1)[1] == viewer}


def output_private(private: Collection[str]) -> bool:
    """Whether another user's output is refused (``private_data`` has ``jobs``)."""
    return "jobs" in private


def events_private(private: Collection[str]) -> bool:
    """Whether other users' jobs' events are left out (``private_data`` has ``events``)."""
    return "events" in private


HIDDEN_COMMAND = ["(private)"]
"""A service's command as another user sees it under ``jobs`` (a spec needs a command or an image)."""


def visible_service(spec: ServiceSpec, viewer: str, admin: bool, private: Collection[str]) -> ServiceSpec:
    """An inference service's spec as ``viewer`` may see it: never another's environment; under
    ``jobs`` neither its command nor its working directory."""
    if sees_all(viewer, admin, spec.user):
        return spec
    update: dict[str, Any] = {"env": {}}
    if "jobs" in private:
        update.update({"command": HIDDEN_COMMAND if spec.command is not None else None, "workdir": None})
    return spec.model_copy(update=update)
