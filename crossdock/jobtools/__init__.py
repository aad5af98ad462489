"""Slurm's in-job commands for jobs that crossdock runs itself (local and Kubernetes backends).

``bin/srun`` and ``bin/scontrol`` come first on such a job's PATH: ``srun`` launches the
step's tasks with their per-task variables (:mod:`crossdock.jobtools.srun`), ``scontrol show
hostnames`` expands a hostlist (:mod:`crossdock.jobtools.scontrol`). On the Slurm backend the
job runs Slurm's own. The commands import only the standard library and ``crossdock.queue``,
so they start in any interpreter that can see the package (``$CROSSDOCK_PYTHON``, else python3).
"""

from __future__ import annotations

from pathlib import Path

BIN_DIR = str(Path(__file__).resolve().parent / "bin")
"""Where ``srun`` and ``scontrol`` are; put it first on the job's PATH."""
