"""A new job's hash leaves out the fields that hold their defaults and reads back the same job."""

from __future__ import annotations

from datetime import datetime, timezone

from crossdock.backends.redis_store.codec import hash_to_job, job_to_hash
from crossdock.queue.models import Job, JobSpec


def test_a_queued_job_stores_no_default_fields_and_reads_back_whole():
    job = Job(id=7, spec=JobSpec(command=["true"]), queue="batch", priority_class="batch", priority=100,
              pools=["local"], submit_time=datetime(2026, 1, 1, tzinfo=timezone.utc))
    h = job_to_hash(job)
    assert not {"reason", "nodes", "gpu_ids", "alloc_cpu_milli", "alloc_mem_mib"} & set(h)
    assert h["attempts"] == "0"  # the Lua guards compare it
    assert hash_to_job(7, h) == job
    placed = job.model_copy(update={"nodes": ["n1"], "alloc_cpu_milli": 2000, "reason": "Resources"})
    assert hash_to_job(7, job_to_hash(placed)) == placed
