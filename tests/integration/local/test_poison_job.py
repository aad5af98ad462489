"""A job stored without admission's bounds (as an older version stored `-t 1000000000-0`) is set
aside by the real leader, from the store, while the 100 jobs beside it are all scheduled."""

import pytest

from crossdock import service
from crossdock.queue.models import Job, JobSpec
from crossdock.queue.states import JobState, Reason
from crossdock.workers.leader import Scheduler

pytestmark = pytest.mark.redis


def test_a_stored_poison_job_waits_with_invalid_spec_and_the_100_beside_it_are_scheduled(runtime, tmp_path):
    store = runtime.store
    normal = service.submit(runtime, [JobSpec(command=["true"], mem_per_node_mib=1, workdir=str(tmp_path))] * 100)
    overflowing = JobSpec.model_construct(**{**JobSpec(command=["true"], workdir=str(tmp_path)).model_dump(),
                                             "time_limit_seconds": 1_000_000_000 * 86400})
    poison, = store.submit([Job.model_construct(id=0, spec=overflowing, queue="preprocessing", priority=500,
                                                priority_class="preprocessing", pools=["local"])])
    sent: list[int] = []
    leader = Scheduler(runtime, lambda name, args, kind: sent.extend(  # a batch sends [job id, attempt] pairs
        [pair[0] for pair in args[0]] if isinstance(args[0], list) else [args[0]]))
    for _ in range(200):  # the node holds 4 at a time: each dispatched job "finishes" before the next cycle
        done = len(sent)
        leader.cycle_once()
        for job_id in sent[done:]:
            store.transition(job_id, JobState.COMPLETED)
        if len(sent) == 100:
            break
    assert sorted(sent) == sorted(j.id for j in normal)
    stuck = store.get(poison.id)
    assert (stuck.state, stuck.reason) == (JobState.PENDING, Reason.INVALID_SPEC)
    assert "OverflowError" in stuck.explanation and "cancel it" in stuck.explanation, stuck.explanation
    assert store.cancel(poison.id).cancelled_now  # and it can still be cancelled
