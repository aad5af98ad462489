"""How the CLI driver reads a Slurm tool that did not answer: killed by a signal, or refused."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from crossdock.backends.slurm.cli import CliDriver
from crossdock.backends.slurm.driver import SlurmUnavailable, SubmitRejected, SubmitRequest


def _tool(bin_dir: Path, name: str, body: str) -> None:
    path = bin_dir / name
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


def _driver(bin_dir: Path) -> CliDriver:
    return CliDriver(env={"PATH": f"{bin_dir}{os.pathsep}/usr/bin:/bin"})


REQUEST = SubmitRequest(script="#!/bin/sh\ntrue\n", name="j", comment="crossdock:1:0@t", workdir="/tmp")


def test_an_sbatch_killed_by_a_signal_is_unavailable_not_a_rejection(tmp_path):
    # sbatch dies of SIGPIPE when munged goes away mid-request: the outcome is unknown, so the
    # backend must retry (looking for the job's tag first) rather than fail the job.
    _tool(tmp_path, "sbatch", "cat >/dev/null; kill -PIPE $$")
    with pytest.raises(SlurmUnavailable, match="sbatch was killed by SIGPIPE"):
        _driver(tmp_path).submit(REQUEST)


def test_munge_going_away_is_unavailable(tmp_path):
    _tool(tmp_path, "sbatch", "cat >/dev/null\n"
          "echo 'sbatch: error: Munge encode failed: Failed to access \"/run/munge/munge.socket.2\"' >&2\n"
          "echo 'sbatch: error: Batch job submission failed: Protocol authentication error' >&2\nexit 1")
    with pytest.raises(SlurmUnavailable, match="Munge encode failed"):
        _driver(tmp_path).submit(REQUEST)


def test_a_refusal_stays_a_rejection(tmp_path):
    _tool(tmp_path, "sbatch", "cat >/dev/null\n"
          "echo 'sbatch: error: Batch job submission failed: Invalid partition name specified' >&2\nexit 1")
    with pytest.raises(SubmitRejected, match=r"sbatch --parsable failed \(1\): .*Invalid partition"):
        _driver(tmp_path).submit(REQUEST)


def test_a_listing_killed_by_a_signal_is_unavailable(tmp_path):
    _tool(tmp_path, "scontrol", "kill -TERM $$")
    with pytest.raises(SlurmUnavailable, match="scontrol was killed by SIGTERM"):
        _driver(tmp_path).jobs()
