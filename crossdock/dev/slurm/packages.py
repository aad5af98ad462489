"""Debian's Slurm 22.05 packages: which are missing, and installing them without letting their
scripts start system services."""

from __future__ import annotations

import logging
import os
import subprocess
from pathlib import Path

from crossdock.dev.slurm.layout import ClusterError

log = logging.getLogger(__name__)

PACKAGES = ("slurmctld", "slurmd", "slurm-client", "munge", "slurmrestd", "slurm-wlm-jwt-plugin")


def missing_packages() -> list[str]:
    out = subprocess.run(
        ["dpkg-query", "-W", "-f=${Package} ${db:Status-Status}\n", *PACKAGES],
        capture_output=True,
        text=True,
    ).stdout
    installed = {line.split()[0] for line in out.splitlines() if line.endswith(" installed")}
    return [p for p in PACKAGES if p not in installed]


def ensure_packages() -> list[str]:
    """Install the missing Slurm packages; returns what was installed.

    Package scripts must not start system munge/slurm services, so a policy-rc.d that denies
    every start is put in place for the length of the install when none exists.
    """
    missing = missing_packages()
    if not missing:
        return []
    if os.geteuid() != 0:
        raise ClusterError(f"packages {missing} are missing and installing them needs root")
    policy = Path("/usr/sbin/policy-rc.d")
    created_policy = not policy.exists()
    if created_policy:
        policy.write_text("#!/bin/sh\nexit 101\n")
        policy.chmod(0o755)
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    try:
        log.info("installing %s", " ".join(missing))
        for argv in (
            ["apt-get", "update", "-q"],
            ["apt-get", "install", "-y", "-q", "--no-install-recommends", *missing],
        ):
            done = subprocess.run(argv, env=env, capture_output=True, text=True)
            if done.returncode != 0:
                raise ClusterError(f"{' '.join(argv[:2])} failed ({done.returncode}): {done.stderr[-2000:]}")
    finally:
        if created_policy:
            policy.unlink(missing_ok=True)
    still = missing_packages()
    if still:
        raise ClusterError(f"packages still missing after apt-get install: {still}")
    return missing

