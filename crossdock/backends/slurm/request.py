"""A crossdock job (spec, id, attempt) → one Slurm submission (:class:`SubmitRequest`).

The job's tag ``crossdock[/<prefix>]:<job id>:<attempt>@<installation>`` goes into Slurm's
``--comment``: the same dispatch replayed finds the job it already submitted by that tag instead
of submitting twice. ``<installation>`` is the store's own identity (:class:`Tags`).
"""

from __future__ import annotations

import os
import re
import shlex
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from crossdock.backends.slurm.driver import SubmitRejected, SubmitRequest
from crossdock.backends.slurm.states import format_array_tasks
from crossdock.queue import filenames
from crossdock.queue.models import DependencySpec, DependencyType, Job, JobSpec
from crossdock.queue.sbatch_extras import format_signal

TAG_PREFIX = "crossdock"
PYTHON_RUNNER = ("python", "-m", "crossdock.workers.pyjob")
"""The command of a Python job on a remote backend (:mod:`crossdock.workers.pyjob`)."""


def _tag_prefix(prefix: str | None = None) -> str:
    """``crossdock`` for the default installation; ``crossdock/<prefix>`` for one with its own
    Redis key prefix, so that two installations sharing a Slurm cluster never claim each other's jobs.
    ``prefix``: the installation's key prefix (a backend passes the one its store was built with;
    by default ``CROSSDOCK_PREFIX``)."""
    prefix = os.environ.get("CROSSDOCK_PREFIX", "cd") if prefix is None else prefix
    return TAG_PREFIX if prefix == "cd" else f"{TAG_PREFIX}/{prefix}"


def time_limit_minutes(seconds: int | None) -> int | None:
    """Slurm's ``--time`` (and REST ``time_limit``) in whole minutes, rounded up so that a job
    never gets less time than asked: 90 s is 2 minutes."""
    return None if seconds is None else -(-seconds // 60)


def job_tag(job_id: int, attempt: int, prefix: str | None = None) -> str:
    return f"{_tag_prefix(prefix)}:{job_id}:{attempt}"


def group_tag(array_job_id: int, attempt: int, first_task: int | None, prefix: str | None = None) -> str:
    """The tag of tasks of one array submitted together: ``<array id>:<attempt>``, plus
    ``:<first task>`` (the group's lowest task id) unless the group holds the array's first task,
    so that two groups of one array and attempt never share a tag."""
    tag = job_tag(array_job_id, attempt, prefix)
    return tag if first_task is None else f"{tag}:{first_task}"


def parse_tag(comment: str, prefix: str | None = None) -> tuple[int, int] | None:
    """(job id, attempt) from a Slurm comment, or None for a job this installation did not submit.

    A group of array tasks gives (array job id, attempt)."""
    m = re.match(rf"^{re.escape(_tag_prefix(prefix))}:(\d+):(\d+)(?::\d+)?$", comment or "")
    return (int(m[1]), int(m[2])) if m else None


@dataclass(frozen=True)
class Tags:
    """How one installation tags its Slurm jobs and knows them again.

    A tag names the key prefix and the job, and ends with ``@<installation>``, the identity of the
    store that made it: a store started afresh (ids from 1 again) beside a slurmctld that still
    remembers an earlier store's jobs of the same prefix does not take them for its own (it once
    did: job 1 "ended" with the other job 1's exit code and never ran). ``legacy``: also know tags
    without an identity, written before there were any; true only for a store that held jobs
    when it got its identity (an upgrade), so that its jobs in flight are still found.

    Tags are compared in their *key* form, without the identity (:meth:`key`): a job tagged by the
    previous release and one tagged now are the same job."""

    prefix: str | None = None
    installation: str = ""
    legacy: bool = True

    def job(self, job_id: int, attempt: int) -> str:
        """The key form of a job's tag (compare with :meth:`key`)."""
        return job_tag(job_id, attempt, self.prefix)

    def group(self, array_job_id: int, attempt: int, first_task: int | None) -> str:
        return group_tag(array_job_id, attempt, first_task, self.prefix)

    def written(self, key: str) -> str:
        """The comment to submit with: the key form and this installation's identity."""
        return f"{key}@{self.installation}" if self.installation else key

    def _base(self, comment: str) -> str | None:
        """``comment`` less its identity when the identity is this installation's (or absent and
        legacy tags are known), else None."""
        base, at, ident = (comment or "").partition("@")
        return None if at and ident != self.installation or not at and self.installation and not self.legacy else base

    def key(self, comment: str) -> str | None:
        """The key form of ``comment`` when it is this installation's tag, else None."""
        base = self._base(comment)
        return base if base is not None and parse_tag(base, self.prefix) is not None else None

    def parse(self, comment: str) -> tuple[int, int] | None:
        """(job id, attempt) of this installation's tag, else None (see :func:`parse_tag`)."""
        base = self._base(comment)
        return None if base is None else parse_tag(base, self.prefix)


def render_script(spec: JobSpec) -> str:
    """The batch script text: the user's script, or one that execs the command or callable."""
    if spec.script is not None:
        text = spec.script
    elif spec.script_path is not None:
        try:
            text = Path(spec.script_path).read_text()
        except OSError as exc:
            raise SubmitRejected(f"script_path: cannot read {spec.script_path!r}: {exc}") from None
    elif spec.command is not None:
        return "#!/bin/bash\nexec " + shlex.join([*spec.command, *spec.args]) + "\n"
    elif spec.python is not None:
        # crossdock's runner reads the call from the store and stores the outcome there
        return "#!/bin/bash\nexec " + shlex.join([sys.executable, *PYTHON_RUNNER[1:]]) + "\n"
    else:
        raise SubmitRejected("job has nothing to run: give command, script, script_path or python")
    return text if text.startswith("#!") else "#!/bin/bash\n" + text


def render_dependency(dep: DependencySpec, slurm_ids: Mapping[int, str]) -> str:
    """Slurm's ``--dependency`` value with crossdock job ids replaced by Slurm job ids."""
    parts = []
    for d in dep.deps:
        if d.type == DependencyType.SINGLETON:
            parts.append("singleton")
            continue
        if d.job_id is None or d.job_id not in slurm_ids:
            raise SubmitRejected(
                f"dependency: crossdock job {d.job_id} has no Slurm job id; submit it to Slurm first"
            )
        target = slurm_ids[d.job_id]
        if d.array_task is not None:
            target = f"{target}_{d.array_task}"
        if d.delay_minutes:
            target = f"{target}+{d.delay_minutes}"
        parts.append(f"{d.type.value}:{target}")
    return ("?" if dep.combine == "OR" else ",").join(parts)


def _gpu_options(spec: JobSpec, gpu_types: Mapping[str, str] | None = None) -> tuple[list[str], str | None, str | None]:
    """(typed per-node gres, --gpus, --gpus-per-task) for the job's GPU request.

    ``gpu_types`` maps crossdock's model name, upper-cased (``A100``: what ``crossdock info``
    shows), to the GRES type the nodes declare (``a100``): Slurm matches the type as spelt."""
    gres = [f"{g.name}:{g.type}:{g.count}" if g.type else f"{g.name}:{g.count}" for g in spec.gres if g.name != "gpu"]
    req = spec.gpu_request()
    if req is None:
        return gres, None, None
    if req.share is not None or req.mig is not None:
        raise SubmitRejected("gpus: fractional or MIG GPUs are not offered by Slurm pools; request whole GPUs")
    models = req.allowed_models()
    kind = models[0] if len(models) == 1 else None  # several acceptable models: let the partition decide
    if kind is not None and gpu_types:
        kind = gpu_types.get(kind.upper(), kind)
    typed = f"{kind}:{req.count}" if kind else str(req.count)
    if req.per == "node":
        return [*gres, f"gpu:{typed}"], None, None
    if req.per == "task":
        return gres, None, typed
    return gres, typed, None


def file_patterns(job: Job) -> tuple[str | None, str | None]:
    """``--output`` and ``--error`` for one Slurm job standing for ``job`` (a plain job, or one
    task of a crossdock array sent alone), the ids crossdock's (:mod:`crossdock.queue.filenames`):
    ``slurm-%j.out`` names crossdock's id, not Slurm's. Other codes are Slurm's to expand."""
    values = filenames.id_values(job)
    if job.array_task_id is None:
        del values["a"]  # Slurm's own NO_VAL, as crossdock's
    stdout = filenames.expand(job.spec.stdout or filenames.default_output(job), values)
    return stdout, filenames.expand(job.spec.stderr, values) if job.spec.stderr else None


def array_file_patterns(spec: JobSpec, array_job_id: int) -> tuple[str, str | None]:
    """``--output`` and ``--error`` of a Slurm array standing for tasks of crossdock's array
    ``array_job_id``: ``%A`` is crossdock's array id and ``%a`` (Slurm's task id) is crossdock's
    task id already. A pattern with ``%j`` cannot name each task's own crossdock id in one
    Slurm array: :func:`groupable` keeps such an array to one submission per task."""
    values = {"A": array_job_id}
    stdout = filenames.expand(spec.stdout or filenames.DEFAULT_ARRAY_OUTPUT, values)
    return stdout, filenames.expand(spec.stderr, values) if spec.stderr else None


def groupable(spec: JobSpec) -> bool:
    """Whether tasks of this array can go out as one Slurm array with the file names crossdock
    gives them: not when ``--output``/``--error`` uses ``%j``/``%J`` (each task's own id)."""
    return not any(p and filenames.names_ids(p) for p in (spec.stdout, spec.stderr))


def array_task_environment(job: Job) -> dict[str, str]:
    ids = job.spec.array.task_ids if job.spec.array is not None else [job.array_task_id]
    return {
        "SLURM_ARRAY_JOB_ID": str(job.array_job_id),
        "SLURM_ARRAY_TASK_ID": str(job.array_task_id),
        "SLURM_ARRAY_TASK_COUNT": str(len(ids)),
        "SLURM_ARRAY_TASK_MIN": str(min(ids)),
        "SLURM_ARRAY_TASK_MAX": str(max(ids)),
    }


def _slurm_time(when: datetime | None) -> str | None:
    """Slurm reads ``YYYY-MM-DDTHH:MM:SS`` in the controller's local time zone (here, the host's)."""
    return None if when is None else when.astimezone().strftime("%Y-%m-%dT%H:%M:%S")


def build_request(
    job: Job,
    *,
    partition: str | None = None,
    nodelist: list[str] | None = None,
    slurm_ids: Mapping[int, str] | None = None,
    workdir: str | None = None,
    gpu_types: Mapping[str, str] | None = None,
    tags: Tags | None = None,
) -> SubmitRequest:
    """The submission for ``job``'s current attempt, placed on ``partition``/``nodelist``.

    ``slurm_ids`` maps crossdock job ids to Slurm job ids for dependencies Slurm should
    enforce; without it the spec's dependencies are left to crossdock's own scheduler.
    ``gpu_types``: model name → the nodes' GRES type (see ``_gpu_options``).
    """
    spec = job.spec
    gres, gpus, gpus_per_task = _gpu_options(spec, gpu_types)
    dependency = None
    if spec.dependency is not None and slurm_ids is not None:
        dependency = render_dependency(spec.dependency, slurm_ids)
    env = {**spec.env, "CROSSDOCK_JOB_ID": str(job.id), "CROSSDOCK_ATTEMPT": str(job.attempts)}
    array = None
    if job.array_task_id is not None and job.array_job_id is not None:
        # One task of a crossdock array, dispatched on its own: a plain Slurm job that looks
        # like its task (environment, %A/%a in file names) with crossdock's array id.
        env.update(array_task_environment(job))
        stdout, stderr = file_patterns(job)
    elif spec.array is not None:  # the whole array: SlurmBackend.submit_array names its files
        array = format_array_tasks(spec.array.task_ids, spec.array.max_running)
        stdout, stderr = spec.stdout, spec.stderr
    else:
        stdout, stderr = file_patterns(job)
    return SubmitRequest(
        script=render_script(spec),
        name=spec.display_name(),
        comment=(tags := tags or Tags()).written(tags.job(job.id, job.attempts)),
        workdir=spec.workdir or workdir or os.getcwd(),
        partition=partition or spec.partition,
        nodelist=tuple(nodelist if nodelist is not None else spec.nodelist),
        exclude=tuple(spec.exclude),
        nodes=spec.nodes,
        nodes_max=spec.nodes_max,
        ntasks=spec.ntasks,
        ntasks_per_node=spec.ntasks_per_node,
        cpus_per_task=spec.cpus_per_task,
        mem_per_node_mib=spec.mem_per_node_mib,
        mem_per_cpu_mib=spec.mem_per_cpu_mib,
        gres=tuple(gres),
        gpus=gpus,
        gpus_per_task=gpus_per_task,
        time_limit_minutes=time_limit_minutes(spec.time_limit_seconds),
        array=array,
        dependency=dependency,
        stdout=stdout,
        stderr=stderr,
        env=env,
        export=spec.export,
        hold=spec.hold,
        requeue=spec.requeue,
        exclusive=spec.exclusive,
        nice=spec.nice,
        constraint=spec.constraint,
        signal=format_signal(spec.kill_signal) if spec.kill_signal is not None else None,
        time_min_minutes=time_limit_minutes(spec.time_min_seconds),
        begin=_slurm_time(spec.begin),
        deadline=_slurm_time(spec.deadline),
        reservation=spec.reservation,
        licenses=spec.licenses,
        native=tuple(spec.slurm_options),
        args=tuple(spec.args) if spec.command is None else (),
        user=spec.user,
    )
