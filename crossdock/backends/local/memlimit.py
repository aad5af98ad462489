"""Holding a local job to its memory request (``--mem``, ``--mem-per-cpu``), as Slurm's cgroup
plugin does: past it the job is killed and ends OUT_OF_MEMORY.

Two ways, the first that works on this machine:

- **cgroup v2**: a child cgroup ``crossdock-<job>-<attempt>`` of the supervisor's own cgroup
  with ``memory.max`` (and ``memory.swap.max`` 0), the job moved in right after it starts; the
  kernel's OOM killer stops it and ``memory.events`` tells. It needs a cgroup v2 tree where this
  process may create children with the memory controller (``CROSSDOCK_CGROUP`` names another
  delegated directory).
- **a watcher** otherwise (cgroup v1, no rights, no cgroup at all): the supervisor sums the
  resident memory of the job's process group from ``/proc`` every poll and kills the group past
  the limit. A process that leaves the group (``setsid``) escapes it, and a spike shorter than a
  poll may pass.

Either way the peak seen is kept for the job's MaxRSS.
"""

from __future__ import annotations

import logging
import os
import signal
from pathlib import Path

log = logging.getLogger(__name__)

CGROUP = Path("/sys/fs/cgroup")
PROC = Path("/proc")
PAGE = os.sysconf("SC_PAGE_SIZE")


def read_text(path: Path) -> str | None:
    try:
        return path.read_text()
    except (OSError, UnicodeDecodeError):
        return None


def group_rss(pgid: int, proc: Path = PROC) -> int:
    """Resident bytes of every process in process group ``pgid``."""
    total = 0
    try:
        entries = os.listdir(proc)
    except OSError:
        return 0
    for name in entries:
        if not name.isdigit():
            continue
        stat = read_text(proc / name / "stat")
        if not stat:
            continue
        fields = stat[stat.rfind(")") + 2:].split()  # the command name may hold blanks and parentheses
        if len(fields) > 21 and fields[2] == str(pgid) and fields[0] not in ("Z", "X"):
            total += int(fields[21]) * PAGE
    return total


def own_cgroup_v2(proc: Path, root: Path) -> Path | None:
    if not (root / "cgroup.controllers").exists():  # not a cgroup v2 mount
        return None
    for line in (read_text(proc / "self" / "cgroup") or "").splitlines():
        if line.startswith("0::"):
            return root / line[3:].strip().lstrip("/")
    return None


class MemoryLimit:
    """One attempt's memory limit. ``attach`` after the job starts, ``check`` every poll,
    ``close`` when it has ended."""

    def __init__(self, limit_bytes: int, cgroup: Path | None = None, proc: Path = PROC):
        self.limit, self.cgroup, self.proc = limit_bytes, cgroup, proc
        self.pgid: int | None = None
        self.peak = 0
        self.exceeded = False

    @classmethod
    def create(cls, limit_bytes: int, name: str, proc: Path = PROC, root: Path = CGROUP) -> MemoryLimit:
        """A limit enforced by a new child cgroup when this machine allows one, else by the watcher."""
        base = Path(os.environ["CROSSDOCK_CGROUP"]) if os.environ.get("CROSSDOCK_CGROUP") else own_cgroup_v2(proc, root)
        if base is not None:
            child = base / name
            try:
                if "memory" not in (read_text(base / "cgroup.subtree_control") or "").split():
                    (base / "cgroup.subtree_control").write_text("+memory")
                child.mkdir(exist_ok=True)
                (child / "memory.max").write_text(str(limit_bytes))
                for knob, value in (("memory.swap.max", "0"), ("memory.oom.group", "1")):  # the whole job goes
                    if (child / knob).exists():
                        (child / knob).write_text(value)
                return cls(limit_bytes, child, proc)
            except OSError as exc:
                log.info("no cgroup for the job's memory limit (%s); watching its resident memory instead", exc)
                rmdir_quietly(child)
        return cls(limit_bytes, None, proc)

    @property
    def how(self) -> str:
        return "cgroup" if self.cgroup is not None else "watcher"

    def attach(self, pid: int) -> None:
        """Put the job (the leader of its process group) under the limit."""
        self.pgid = pid
        if self.cgroup is not None:
            try:
                (self.cgroup / "cgroup.procs").write_text(str(pid))
            except OSError as exc:  # it exited already, or the move is refused: watch it instead
                log.info("could not move the job into %s (%s); watching it instead", self.cgroup, exc)
                self.close()
                self.cgroup = None

    def check(self) -> bool:
        """Sample the job's memory; True once it went past the limit (killed by the kernel or here)."""
        if self.pgid is None or self.exceeded:
            return self.exceeded
        if self.cgroup is not None:
            current = read_text(self.cgroup / "memory.peak") or read_text(self.cgroup / "memory.current") or "0"
            self.peak = max(self.peak, int(current.split()[0]))
            self.exceeded = self._oom_kills() > 0
            return self.exceeded
        used = group_rss(self.pgid, self.proc)
        self.peak = max(self.peak, used)
        if used > self.limit:
            log.warning("job's process group %s uses %d bytes, over its %d: killed", self.pgid, used, self.limit)
            try:
                os.killpg(self.pgid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            self.exceeded = True
        return self.exceeded

    def _oom_kills(self) -> int:
        for line in (read_text(self.cgroup / "memory.events") or "").splitlines():  # type: ignore[operator]
            key, _, value = line.partition(" ")
            if key == "oom_kill" and value.strip().isdigit():
                return int(value)
        return 0

    def close(self) -> None:
        """Remove the cgroup (empty once the job's processes are gone)."""
        if self.cgroup is not None:
            self.check()
            rmdir_quietly(self.cgroup)

    @property
    def peak_kib(self) -> int | None:
        return self.peak // 1024 if self.peak else None


def rmdir_quietly(path: Path) -> None:
    try:
        path.rmdir()
    except OSError:
        pass
