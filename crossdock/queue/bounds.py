"""What one user sends and holds, checked against the config's ``limits:``
(:class:`crossdock.queue.config_limits.Limits`): a script's size, a job's environment, the jobs a
user has pending or running, a request's bytes.

Pure: the faces and the store hand in what they measured. Every refusal is one line naming the
field, the value, the limit and its config key, and what to do.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from crossdock.queue.config_limits import Limits
from crossdock.queue.errors import LimitExceeded
from crossdock.queue.models import JobSpec


def over(field: str, value: str, limit: str, key: str, fix: str) -> str:
    """The one line of a refusal: ``field: value is over limits.KEY (limit); fix, or ask…``."""
    return f"{field}: {value} is over limits.{key} ({limit}); {fix}, or ask an admin to raise limits.{key}"


def env_bytes(env: Mapping[str, str]) -> int:
    """An environment's size as exec counts it: ``NAME=value`` and its NUL, each."""
    return sum(len(k.encode()) + len(v.encode()) + 2 for k, v in env.items())


def spec_problems(spec: JobSpec, limits: Limits) -> list[str]:
    """Every limit ``spec`` goes over, one line each (empty: none)."""
    problems = []
    if spec.script is not None and (size := len(spec.script.encode())) > limits.max_script_size:
        problems.append(over("script", f"{size} bytes", f"{limits.max_script_size} bytes, Slurm's max_script_size",
                             "max_script_size", "shorten it (read data from files rather than the script)"))
    if len(spec.env) > limits.max_env_vars:
        problems.append(over("env", f"{len(spec.env)} variables", f"{limits.max_env_vars}", "max_env_vars",
                             "export fewer (--export=NAME,… rather than ALL)"))
    if (size := env_bytes(spec.env)) > limits.max_env_bytes:
        problems.append(over("env", f"{size} bytes", f"{limits.max_env_bytes} bytes", "max_env_bytes",
                             "export fewer or shorter variables (--export=NAME,…)"))
    return problems


def check_spec(spec: JobSpec, limits: Limits) -> None:
    """Raise :class:`LimitExceeded` with every limit ``spec`` goes over."""
    problems = spec_problems(spec, limits)
    if problems:
        raise LimitExceeded("; ".join(problems))


def check_job_counts(live: Mapping[str, int], adding: Mapping[str, int], limits: Limits) -> None:
    """Refuse a submission that would give a user more than ``max_submit_jobs`` jobs pending or
    running: ``live`` is what each owner has now, ``adding`` what the submission stores."""
    for owner, n in adding.items():
        have = live.get(owner, 0)
        if have + n > limits.max_submit_jobs:
            raise LimitExceeded(over("jobs", f"{have} pending or running + {n} submitted for {owner or 'nobody'!r}",
                                     f"{limits.max_submit_jobs} per user, Slurm's MaxSubmitJobs", "max_submit_jobs",
                                     "wait for some to finish, cancel some, or submit fewer (an array of N counts N)"))


@dataclass(frozen=True)
class JobCounts:
    """One submission's ``max_submit_jobs`` check, handed to the store: what each owner adds and
    the most jobs one may have pending or running. The store counts each owner's live jobs in the
    very step that stores the submission (no other submission between), and refuses with
    :meth:`check` when an owner's live jobs and those it adds are over :attr:`most`."""

    adding: Mapping[str, int]
    limits: Limits

    @property
    def most(self) -> int:
        return self.limits.max_submit_jobs

    def check(self, live: Mapping[str, int]) -> None:
        check_job_counts(live, self.adding, self.limits)


def request_too_large(where: str, limits: Limits) -> str:
    """The one line answered to a request over ``max_request_bytes`` (the socket's line, a REST body)."""
    return over(where, "over the limit", f"{limits.max_request_bytes} bytes", "max_request_bytes",
                "send less (pass large data by path)")


def too_many_connections(uid: int, have: int, per_user: bool, limits: Limits) -> str:
    """The one line answered to a connection over ``max_connections_per_user`` or ``max_connections``."""
    if per_user:
        return over("connections", f"uid {uid}'s {have + 1}th", f"{limits.max_connections_per_user} per user",
                    "max_connections_per_user", "close idle clients (one Client holds one connection)")
    return over("connections", f"the {have + 1}th", f"{limits.max_connections} in all", "max_connections",
                "try again shortly")
