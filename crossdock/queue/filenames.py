"""sbatch's file name patterns (``--output``, ``--error``): one expansion for every backend.

The user knows a job by crossdock's id, so ``%j`` (and ``%J``, ``%A``) is crossdock's id on
every backend: the local supervisor expands every code itself; the Slurm backend expands the
ids before ``sbatch`` (:func:`expand` with only the id codes) and leaves the other codes
(``%x``, ``%u``, ``%N``…, and ``%%``) to Slurm, which gives them the same values. The default
name is ``slurm-%j.out`` (``slurm-%A_%a.out`` for an array task), so ``crossdock logs ID`` and
``crossdock show ID`` name the file the job really wrote. Nothing here performs I/O.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Mapping

from crossdock.queue.models import Job
from crossdock.queue.slurm_env import NO_ARRAY_TASK

PATTERN = re.compile(r"%(\d*)([%jJAaxuNnts])")
"""``%[width]code``: the codes sbatch's manual lists for file names."""

DEFAULT_OUTPUT = "slurm-%j.out"
DEFAULT_ARRAY_OUTPUT = "slurm-%A_%a.out"
ID_CODES = frozenset("jJAa")


def expand(pattern: str, values: Mapping[str, object]) -> str:
    """``pattern`` with each code of ``values`` replaced (a width zero-pads a number: ``%3a`` →
    ``004``); a code not in ``values`` is kept as written, for the backend to expand. ``%%`` is
    a percent sign when ``values`` has ``"%"``, else kept (and what follows it is never a code)."""

    def sub(m: re.Match[str]) -> str:
        width, code = m[1], m[2]
        if code not in values:
            return m[0]
        text = "%" if code == "%" else str(values[code])
        return text.zfill(int(width)) if width and text.isdigit() else text

    return PATTERN.sub(sub, pattern)


def id_values(job: Job) -> dict[str, object]:
    """The id codes as crossdock gives them: ``%j``/``%J`` the job's (a task's own) id, ``%A``
    its array's id (the job's own outside an array), ``%a`` the task id (Slurm's NO_VAL outside)."""
    array_id = job.array_job_id if job.array_job_id is not None else job.id
    task = job.array_task_id if job.array_task_id is not None else NO_ARRAY_TASK
    return {"j": job.id, "J": job.id, "A": array_id, "a": task}


def default_output(job: Job) -> str:
    return DEFAULT_ARRAY_OUTPUT if job.array_task_id is not None else DEFAULT_OUTPUT


def names_ids(pattern: str, codes: frozenset[str] = frozenset("jJ")) -> bool:
    """Whether ``pattern`` uses one of ``codes`` (``%%j`` is a percent sign and a j)."""
    return any(m[2] in codes for m in PATTERN.finditer(pattern))


def all_values(job: Job, node: str) -> dict[str, object]:
    """Every code, as on the node ``node`` (the batch step: task 0, step ``batch``)."""
    return {**id_values(job), "%": "%", "x": job.spec.display_name(), "u": job.spec.user or "nobody",
            "N": node.split(".")[0], "n": 0, "t": 0, "s": "batch"}


def output_files(job: Job, node: str, workdir: str) -> tuple[str, str]:
    """stdout and stderr files (stderr is stdout's unless ``--error``), under the job's working
    directory (``workdir`` when the spec has none); an absolute pattern stays absolute."""
    base = job.spec.workdir or workdir
    values = all_values(job, node)
    out = posixpath.join(base, expand(job.spec.stdout or default_output(job), values))
    err = posixpath.join(base, expand(job.spec.stderr, values)) if job.spec.stderr else out
    return out, err
