"""Holding a local job to its CPU request and limit, as the kubelet does for a pod's container:
the request becomes the job's CPU weight (what it gets when the machine is contended; what it
leaves unused goes to the others) and the limit a CFS quota (``limit`` CPUs per 100 ms period,
throttled for the rest of a period once spent). The request is the job's CPUs times its queue's
``cpu_request_ratio``, the limit its CPUs (:func:`crossdock.queue.cpu_share.cpu_milli`),
the same figures a Kubernetes pool writes in the pod.

The conversions are the kubelet's (``pkg/kubelet/cm/helpers_linux.go``): shares = milliCPU ×
1024 / 1000 (2 … 262,144), quota = milliCPU × period / 1000 (at least 1 ms); on cgroup v2 the
weight is ``1 + (shares − 2) × 9999 / 262,142`` and ``cpu.max`` holds ``quota period``.

Where: a child cgroup ``crossdock-<job>-<attempt>`` of this process's own, on cgroup v1 in the
``cpu`` hierarchy, on v2 the job's one cgroup (the memory limit's, :mod:`memlimit`, when it made
one; ``CROSSDOCK_CGROUP`` names another delegated directory). Where neither can be made the job
runs unconfined and the supervisor's log says so: CPU is compressible, nothing else depends on it.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from crossdock.backends.local import memlimit

log = logging.getLogger(__name__)

PERIOD_US = 100_000
"""The kernel's default ``cpu.cfs_period_us``, which the kubelet keeps."""
MIN_SHARES, MAX_SHARES = 2, 262_144
MIN_QUOTA_US = 1_000


def shares(request_milli: int) -> int:
    return min(MAX_SHARES, max(MIN_SHARES, request_milli * 1024 // 1000))


def quota_us(limit_milli: int, period_us: int = PERIOD_US) -> int:
    return max(MIN_QUOTA_US, limit_milli * period_us // 1000)


def weight(request_milli: int) -> int:
    """cgroup v2's ``cpu.weight`` for the shares of ``request_milli``."""
    return 1 + (shares(request_milli) - MIN_SHARES) * 9999 // (MAX_SHARES - MIN_SHARES)


def _own_cgroup_v1(proc: Path, root: Path) -> Path | None:
    """This process's directory in the v1 ``cpu`` hierarchy (``cpu`` or ``cpu,cpuacct``)."""
    for line in (memlimit.read_text(proc / "self" / "cgroup") or "").splitlines():
        parts = line.split(":", 2)
        if len(parts) == 3 and "cpu" in parts[1].split(","):
            for mount in (parts[1], "cpu"):
                if (root / mount / "cpu.shares").exists():
                    return root / mount / parts[2].strip().lstrip("/")
    return None


def controller_here(proc: Path = memlimit.PROC, root: Path = memlimit.CGROUP) -> bool:
    """Whether this process has a cgroup cpu controller to make a job's cgroup under."""
    return _own_cgroup_v1(proc, root) is not None or memlimit.own_cgroup_v2(proc, root) is not None


class CpuLimit:
    """One attempt's CPU weight and quota. ``attach`` after the job starts, ``close`` once it ended."""

    def __init__(self, cgroup: Path | None, owned: bool):
        self.cgroup, self.owned = cgroup, owned

    @classmethod
    def create(cls, request_milli: int, limit_milli: int, name: str, memory: memlimit.MemoryLimit | None = None,
               proc: Path = memlimit.PROC, root: Path = memlimit.CGROUP) -> CpuLimit:
        """The limit in a cgroup of its own (v1), or in the job's one cgroup (v2); unconfined where
        this machine allows neither."""
        delegated = Path(os.environ["CROSSDOCK_CGROUP"]) if os.environ.get("CROSSDOCK_CGROUP") else None
        v2 = delegated or memlimit.own_cgroup_v2(proc, root)
        if v2 is not None:
            shared = memory is not None and memory.cgroup is not None
            child = memory.cgroup if shared else v2 / name  # type: ignore[union-attr]
            files = {"cpu.weight": str(weight(request_milli)), "cpu.max": f"{quota_us(limit_milli)} {PERIOD_US}"}
            return cls._made(child, v2, files, owned=not shared)
        v1 = _own_cgroup_v1(proc, root)
        if v1 is None:
            log.info("no cgroup cpu controller here: the job's CPU is not confined")
            return cls(None, False)
        files = {"cpu.shares": str(shares(request_milli)), "cpu.cfs_period_us": str(PERIOD_US),
                 "cpu.cfs_quota_us": str(quota_us(limit_milli))}
        return cls._made(v1 / name, None, files, owned=True)

    @classmethod
    def _made(cls, child: Path, v2_parent: Path | None, files: dict[str, str], owned: bool) -> CpuLimit:
        try:
            if v2_parent is not None and "cpu" not in (memlimit.read_text(v2_parent / "cgroup.subtree_control") or "").split():
                (v2_parent / "cgroup.subtree_control").write_text("+cpu")
            child.mkdir(exist_ok=True)
            for knob, value in files.items():
                (child / knob).write_text(value)
        except OSError as exc:
            log.info("no cgroup for the job's CPU request and limit (%s): its CPU is not confined", exc)
            if owned:
                memlimit.rmdir_quietly(child)
            return cls(None, False)
        return cls(child, owned)

    @property
    def how(self) -> str:
        return "cgroup" if self.cgroup is not None else "none"

    def attach(self, pid: int) -> None:
        """Put the job (the leader of its process group; its children follow) under the limit."""
        if self.cgroup is None or not self.owned:  # v2, shared: the memory limit moved it already
            return
        try:
            (self.cgroup / "cgroup.procs").write_text(str(pid))
        except OSError as exc:  # it exited already, or the move is refused
            log.info("could not move the job into %s (%s): its CPU is not confined", self.cgroup, exc)
            self.close()

    def throttled(self) -> tuple[int, int] | None:
        """(periods throttled, periods run) so far, from ``cpu.stat``."""
        if self.cgroup is None:
            return None
        stat = dict(line.split(" ", 1) for line in (memlimit.read_text(self.cgroup / "cpu.stat") or "").splitlines()
                    if " " in line)
        try:
            return int(stat.get("nr_throttled", 0)), int(stat.get("nr_periods", 0))
        except ValueError:
            return None

    def close(self) -> None:
        """Remove the cgroup (empty once the job's processes are gone); a shared one is the memory
        limit's to remove."""
        if self.cgroup is not None and self.owned:
            memlimit.rmdir_quietly(self.cgroup)
        self.cgroup = None
