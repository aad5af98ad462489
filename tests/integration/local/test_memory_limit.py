"""A local job is held to its memory request: past it, it ends OUT_OF_MEMORY (real processes)."""

from __future__ import annotations

import sys

import pytest

from crossdock import service
from crossdock.queue.models import JobSpec
from crossdock.queue.states import JobState, Reason

pytestmark = [pytest.mark.redis, pytest.mark.celery]

USE = "import time; b = b'x' * ({mib} << 20); print('allocated', flush=True); time.sleep({sleep})"


def test_a_job_over_its_memory_request_ends_out_of_memory(cluster, tmp_path):
    job, = service.submit(cluster.rt, [JobSpec(command=[sys.executable, "-c", USE.format(mib=300, sleep=30)],
                                               mem_per_node_mib=50, workdir=str(tmp_path))])
    done = cluster.wait(job.id, timeout=60)
    assert (done.state, done.reason) == (JobState.OUT_OF_MEMORY, Reason.OUT_OF_MEMORY), done
    assert done.max_rss_kib is not None and done.max_rss_kib > 50 * 1024
    assert [e["to"] for e in cluster.rt.store.events(job.id)][-1] == "OUT_OF_MEMORY"


def test_a_job_within_its_request_completes_with_its_max_rss(cluster, tmp_path):
    job, = service.submit(cluster.rt, [JobSpec(command=[sys.executable, "-c", USE.format(mib=40, sleep=1)],
                                               mem_per_node_mib=200, workdir=str(tmp_path))])
    done = cluster.wait(job.id, timeout=60)
    assert done.state is JobState.COMPLETED, done
    assert done.max_rss_kib is not None and 40 * 1024 <= done.max_rss_kib < 200 * 1024
