"""crossdock: one batch queue in front of Slurm partitions, Kubernetes node pools and the local machine."""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["Client", "CrossdockError", "InvalidArgument", "JobHandle", "as_completed", "task", "wait", "__version__"]


def __getattr__(name: str):
    # The client pulls in redis and celery; keep `import crossdock.queue` light.
    if name in ("CrossdockError", "InvalidArgument"):
        from crossdock.queue import errors

        return getattr(errors, name)
    if name in ("Client", "JobHandle", "as_completed", "task", "wait"):
        from crossdock import client

        return getattr(client, name)
    raise AttributeError(name)
