"""Fixtures for the real local Slurm cluster (``crossdock.dev.slurm``).

The cluster fixture starts the cluster (installing it when needed) and fails, never skips,
when it cannot: a Slurm test that silently did not run is worse than a red one.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from slurm_helpers import DRIVERS, next_job_id

from crossdock.backends.slurm import SlurmBackend
from crossdock.queue.models import Job, JobSpec


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
