"""A submission as JSON: the fields ``crossdock submit --dry-run --json`` prints
(:func:`crossdock.queue.sbatch_json.dry_run_json`), read back into a :class:`JobSpec`.

The REST API takes this body, so that a script can dry-run a submission with the CLI and post
what it printed. Each field keeps the spec's own type and bounds (the models' ``FieldInfo`` is
reused, not copied), so one validation reports every problem of a body at once, each as
``field: invalid value …; what is accepted``. Beyond what the dry run prints, ``script`` carries
the batch script's text (the dry run shows only its path) and ``user`` names the owner (an admin
submitting for someone else).
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model

from crossdock.queue.errors import CrossdockError, shown
from crossdock.queue.models import JobSpec

RENAMED = {"output": "stdout", "error": "stderr", "chdir": "workdir", "signal": "kill_signal", "qos": "priority_class"}
"""The dry run's name -> the spec's field, where sbatch's option name is printed instead."""

SAME = ("name", "time_limit_seconds", "cpus_per_task", "ntasks", "nodes", "nodes_max", "ntasks_per_node",
        "mem_per_node_mib", "mem_per_cpu_mib", "gres", "gpus", "array", "dependency", "nice", "hold", "partition",
        "priority_class", "queue", "backend", "pool", "placement", "export", "env", "exclusive", "requeue",
        "nodelist", "exclude", "constraint", "time_min_seconds", "begin", "deadline", "reservation", "licenses",
        "slurm_options", "command", "script_path", "args")
"""Fields printed under the spec's own name."""

EXTRA = ("script", "user", "image")
"""Fields the dry run does not print that a submission may carry."""
_WHERE = ("body", "query", "path", "header")
"""Where FastAPI found a value: not part of the field's name."""


class BadSubmission(CrossdockError):
    """A submission whose fields the spec refuses; ``problems`` has every one, one line each."""

    def __init__(self, problems: list[str]):
        super().__init__("; ".join(problems))
        self.problems = problems


def _field(spec_name: str, described: str | None = None) -> tuple[Any, Any]:
    info = JobSpec.model_fields[spec_name]
    info = type(info).merge_field_infos(info, **({"description": described} if described else {}))
    return info.annotation, info


Submission: type[BaseModel] = create_model(
    "Submission",
    __config__=ConfigDict(extra="forbid", allow_inf_nan=False),
    __doc__="A job as `crossdock submit --dry-run --json` prints it (plus `script`, `user`, `image`).",
    **{name: _field(name) for name in SAME + EXTRA},
    **{name: _field(spec, f"sbatch's --{name} (the spec's {spec})") for name, spec in RENAMED.items()},
)


class Accepted(BaseModel):
    """What a submission stored: the first job id (an array's id) and every job's."""

    job_id: int
    jobs: list[int] = Field(description="every job stored (an array's tasks)")


def problems(errors: Iterable[Mapping[str, Any]], renamed: Mapping[str, str] | None = None) -> list[str]:
    """Every problem among ``errors`` (pydantic's ``exc.errors()``, FastAPI's too), one line each,
    as :func:`models.validation_message` writes the first: ``field: invalid value X; what is
    accepted``. ``renamed``: spec field -> the name to show."""
    back = renamed or {}
    out = []
    for err in errors:
        loc = [str(p) for p in err["loc"] if p not in _WHERE]
        if loc:
            loc[0] = back.get(loc[0], loc[0])
        where = ".".join(loc)
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            msg = "not a field of a submission; see `crossdock submit --dry-run --json` for the fields"
        out.append(f"{where}: invalid value {shown(err.get('input'), 80)}; {msg}" if where else msg)
    return out


def to_spec(body: BaseModel) -> JobSpec:
    """The spec ``body`` (a :data:`Submission`) describes; :class:`BadSubmission` lists every
    problem the spec's own checks find (the fields' types and bounds were checked by the model)."""
    given = body.model_dump(exclude_unset=True)
    if given.get("qos") is not None and given.get("priority_class") not in (None, given["qos"]):
        raise BadSubmission([f"qos and priority_class: {given['qos']!r} and {given['priority_class']!r}"
                         " name the same thing; give one"])
    data = {RENAMED.get(k, k): v for k, v in given.items() if not (k == "qos" and given.get("priority_class"))}
    try:
        return JobSpec.model_validate(data)
    except ValidationError as exc:
        raise BadSubmission(problems(exc.errors(), {v: k for k, v in RENAMED.items()})) from None
