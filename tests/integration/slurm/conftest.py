"""Fixtures for the real local Slurm cluster (``crossdock.dev.slurm``).

The cluster fixture starts the cluster (installing it when needed) and fails, never skips,
when it cannot: a Slurm test that silently did not run is worse than a red one.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from slurm_helpers import DRIVERS, next_job_id

from crossdock.backends.slurm import SlurmBackend
from crossdock.dev import slurm as dev
from crossdock.queue.models import Job, JobSpec


@pytest.fixture(scope="session")
def slurm_cluster() -> dict[str, str]:
    state_dir = os.environ.get("CROSSDOCK_SLURM_DIR")  # default: $CROSSDOCK_STATE_DIR/slurm
    dev.up(state_dir)
    current = dev.status(state_dir)
    assert current["up"] and current["rest"], f"local Slurm cluster is not up: {current}"
    return {**os.environ, **dev.read_env(state_dir), "CROSSDOCK_SLURM_DIR": current["dir"]}


@pytest.fixture(scope="session")
def jobs_dir() -> Iterator[Path]:
    # Under /tmp and world-writable: slurmrestd's local auth runs jobs as user slurm.
    path = Path(tempfile.mkdtemp(prefix="crossdock-slurm-tests-", dir="/tmp"))
    path.chmod(0o777)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(params=DRIVERS)
def backend(request, slurm_cluster) -> SlurmBackend:
    return SlurmBackend.from_env(slurm_cluster, driver=request.param)


@pytest.fixture
def make_job(jobs_dir) -> Callable[..., Job]:
    """A crossdock job with a fresh id, writing its output to ``jobs_dir/<id>.out``."""

    def make(script: str | None = None, attempt: int = 0, **spec) -> Job:
        job_id = next_job_id()
        spec.setdefault("workdir", str(jobs_dir))
        spec.setdefault("stdout", str(jobs_dir / f"{job_id}.out"))
        if script is not None:
            spec["script"] = script
        return Job(id=job_id, spec=JobSpec(**spec), attempts=attempt)

    return make
