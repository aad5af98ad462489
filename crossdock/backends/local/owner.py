"""Whom a local job runs as: its owner when the service runs as root, else the service's user.

Slurm's slurmd starts a job as its submitter; crossdock's supervisor does the same when it can
(root), through ``Popen(user=, group=, extra_groups=)``, and creates the job's output files as
the owner under the umask recorded at submit (``SLURM_UMASK``, as sbatch records it).
"""

from __future__ import annotations

import os
import pwd
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Iterator

from crossdock.queue.errors import CrossdockError
from crossdock.queue.models import Job

DEFAULT_UMASK = 0o022


class OwnerUnknown(CrossdockError):
    """The service runs as root and the job's owner has no passwd entry: it cannot run as them."""


@dataclass(frozen=True)
class Owner:
    name: str
    uid: int
    gid: int
    groups: tuple[int, ...]
    home: str

    def popen_kwargs(self) -> dict[str, Any]:
        return {"user": self.uid, "group": self.gid, "extra_groups": list(self.groups)}


def owner_of(job: Job) -> Owner | None:
    """The job's owner to switch to, or None when this process cannot switch (not root)."""
    if os.geteuid() != 0:
        return None
    name = job.spec.user
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        raise OwnerUnknown(f"owner {name!r} of job {job.id} has no passwd entry; the service runs as root"
                           " and runs jobs as their owners only") from None
    return Owner(entry.pw_name, entry.pw_uid, entry.pw_gid, tuple(os.getgrouplist(entry.pw_name, entry.pw_gid)),
                 entry.pw_dir)


@contextmanager
def acting_as(owner: Owner | None) -> Iterator[None]:
    """Make files (outputs) as the owner would: their uid, groups and permissions checks."""
    if owner is None:
        yield
        return
    saved = os.getgroups()
    os.setgroups(list(owner.groups))
    os.setegid(owner.gid)
    os.seteuid(owner.uid)
    try:
        yield
    finally:
        os.seteuid(0)
        os.setegid(0)
        os.setgroups(saved)


def submit_umask(env: dict[str, str]) -> int:
    """The umask the submitter had (``SLURM_UMASK``, octal), else 022."""
    try:
        return int(env.get("SLURM_UMASK", ""), 8) & 0o777
    except ValueError:
        return DEFAULT_UMASK
