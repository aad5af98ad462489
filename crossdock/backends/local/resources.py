"""CPUs and memory of this machine as a job started here sees them: the CPUs this process may
run on (``sched_getaffinity``) under the cgroup's CPU quota, and the physical memory under the
cgroup's memory limit. A config node that says ``cpus: auto`` / ``memory_mib: auto`` gets these
(:func:`crossdock.backends.local.backend.local_nodes`); a number stays what it says.

Both cgroup versions are read: v2 (``cpu.max``, ``memory.max``) and v1 (``cpu.cfs_quota_us`` /
``cpu.cfs_period_us``, ``memory.limit_in_bytes``), at the process's own cgroup and at the root of
the mount (inside a container the two are often the same directory under different names).
The roots are parameters so that tests can hand fake ``/proc`` and cgroup trees.
"""

from __future__ import annotations

import os
from pathlib import Path

PROC = Path("/proc")
CGROUP = Path("/sys/fs/cgroup")
UNLIMITED_V1 = 1 << 62
"""cgroup v1 writes "no limit" as a page-rounded 2^63-1; anything this large is no limit."""


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except (OSError, UnicodeDecodeError):
        return None


def _cgroup_dirs(proc: Path, cgroup: Path, controller: str) -> list[Path]:
    """Where ``controller``'s files for this process may be: v2 (unified) and v1 (own hierarchy)."""
    out: list[Path] = []
    text = _read(proc / "self" / "cgroup") or ""
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, rel = parts
        rel = rel.lstrip("/")
        if controllers == "":  # v2: at the mount root, or under unified/ in a hybrid layout
            out += [cgroup / rel, cgroup, cgroup / "unified" / rel, cgroup / "unified"]
        elif controller in controllers.split(","):
            name = controllers if (cgroup / controllers).is_dir() else controller
            out += [cgroup / name / rel, cgroup / name]
    return out


def affinity_cpus() -> int:
    """The CPUs this process may run on."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def cpu_milli(proc: Path = PROC, cgroup: Path = CGROUP, cpus: int | None = None) -> int:
    """CPUs in thousandths: ``cpus`` (default: the affinity mask's), capped by a cgroup CPU quota
    (never under one CPU)."""
    milli = (affinity_cpus() if cpus is None else cpus) * 1000
    for d in _cgroup_dirs(proc, cgroup, "cpu"):
        quota = _quota_milli(d)
        if quota is not None:
            milli = min(milli, quota)
    return max(milli, 1000)


def _quota_milli(d: Path) -> int | None:
    v2 = _read(d / "cpu.max")
    if v2:
        quota, _, period = v2.partition(" ")
        if quota != "max" and period.isdigit() and int(period) > 0:
            return int(quota) * 1000 // int(period)
        return None
    quota, period = _read(d / "cpu.cfs_quota_us"), _read(d / "cpu.cfs_period_us")
    if quota and period and quota.lstrip("-").isdigit() and period.isdigit():
        if int(quota) > 0 and int(period) > 0:
            return int(quota) * 1000 // int(period)
    return None


def memory_mib(proc: Path = PROC, cgroup: Path = CGROUP) -> int:
    """MiB: ``MemTotal`` of ``/proc/meminfo``, capped by a cgroup memory limit."""
    total = None
    for line in (_read(proc / "meminfo") or "").splitlines():
        if line.startswith("MemTotal:"):
            total = int(line.split()[1]) * 1024
    if total is None:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    for d in _cgroup_dirs(proc, cgroup, "memory"):
        for name in ("memory.max", "memory.limit_in_bytes"):
            value = _read(d / name)
            if value and value.isdigit() and int(value) < UNLIMITED_V1:
                total = min(total, int(value))
    return max(total // (1024 * 1024), 1)
