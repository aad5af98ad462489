"""What the CLI and the Python API share: submit, cancel, and the inventory they check against."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Iterable, Sequence

from redis.exceptions import RedisError

from crossdock.backends.local import gpus
from crossdock.backends.local.backend import local_nodes
from crossdock.queue.admission import admit
from crossdock.queue.models import Job, JobSpec
from crossdock.queue.snapshot import Node
from crossdock.runtime import Runtime


def load_inventory(rt: Runtime, store_optional: bool = False) -> list[Node]:
    """Nodes as the scheduler last saw them; before it ran, the local pools from the config.
    ``store_optional``: a store that does not answer counts as "not yet run" (``--dry-run``)."""
    try:
        nodes = rt.store.inventory()
    except RedisError:
        if not store_optional:
            raise
        nodes = None
    return list(local_nodes(rt.config, gpus.discover())) if nodes is None else nodes


def check(rt: Runtime, specs: Iterable[JobSpec], nodes: Sequence[Node] | None = None) -> list[Job]:
    """Admit every spec, storing nothing: the jobs ``submit`` would store, or InvalidJob."""
    now = datetime.now(timezone.utc)
    nodes = load_inventory(rt) if nodes is None else nodes
    jobs: list[Job] = []
    for group, spec in enumerate(specs):
        for job in admit(spec, rt.config, nodes, now):
            if job.array_job_id is not None:
                job = job.model_copy(update={"array_job_id": -1 - group})
            jobs.append(job)
    return jobs


def submit(rt: Runtime, specs: Iterable[JobSpec], token: str | None = None,
           nodes: Sequence[Node] | None = None) -> list[Job]:
    """Validate every spec, then store all their jobs in one atomic step (nothing stored on error)."""
    return rt.store.submit(check(rt, specs, nodes), token=token)


def cancel(rt: Runtime, refs: Iterable[str], send) -> list[tuple[str, str]]:
    """Cancel jobs (``12``, ``12_3`` or a whole array ``12``); returns (job, outcome) pairs."""
    out = []
    for ref in refs:
        for job_id in rt.store.resolve(ref):
            res = rt.store.cancel(job_id)
            if res.cancelled_now:
                out.append((str(job_id), "CANCELLED"))
            elif res.state.terminal:
                out.append((str(job_id), f"already {res.state.value}"))
            else:
                send("crossdock.cancel", [job_id], res.backend or "local")
                out.append((str(job_id), "cancelling"))
    return out
