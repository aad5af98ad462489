"""The load generator of the services tests and benchmark: :mod:`crossdock.jobtools.loadgen`
(shipped with crossdock, ``crossdock demo`` steps its traffic with it), under its old name.
``python -m crossdock.dev.loadgen`` runs it as ``python -m crossdock.jobtools.loadgen`` does."""

from crossdock.jobtools.loadgen import LoadResult, LoadRun, Sample, Step, generate, main

__all__ = ["LoadResult", "LoadRun", "Sample", "Step", "generate", "main"]

if __name__ == "__main__":
    raise SystemExit(main())
