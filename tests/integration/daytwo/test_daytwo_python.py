"""Day two of a data team on the real backends: the standard library's own future helpers on
crossdock's handles, ``cancel()``, a Python job's printed output (``crossdock logs``,
``handle.logs()``, the REST endpoint), re-attaching by id from a new process, and a stopped job
that resumes from its ``checkpoint()`` hook. Local backend and the real local Slurm cluster."""

from __future__ import annotations

import concurrent.futures as cf
import os
import subprocess
import sys
import time

import cloudpickle
import httpx
import pytest

from crossdock.client import Client
from crossdock.queue.states import JobState
from tests.integration.local.rest import ApiServer, make_token
from tests.waiting import eventually as wait_until

pytestmark = [pytest.mark.daytwo, pytest.mark.redis, pytest.mark.celery]
cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the jobs cannot import this test module

HANG = 180
"""Seconds that only guard against a hang: every wait below returns as soon as its jobs end."""


@pytest.fixture(params=["local", pytest.param("slurm", marks=pytest.mark.slurm)])
def crossdock(request, tmp_path, redis_url, monkeypatch):
    """A running crossdock on the local backend, or on the local Slurm cluster."""
    monkeypatch.chdir(tmp_path)
    if request.param == "local":
        yield request.getfixturevalue("cluster")
        return
    from tests.integration.slurm.test_slurm_array_dispatch import crossdock_on_slurm

    c = crossdock_on_slurm(tmp_path, redis_url, monkeypatch, backend_queue=1000)
    yield c
    c.close()


def triple(x):
    return 3 * x


def chatty(name):
    import subprocess as sp

    print(f"hello {name} from stdout")
    print(f"warning for {name} on stderr", file=sys.stderr)
    sp.run(["echo", f"a child of {name} prints too"], check=True)
    return name.upper()


def test_the_stdlib_wait_and_as_completed_return_as_jobs_end_and_cancel_cancels(crossdock):
    client = Client(crossdock.rt)
    held = client.options(hold=True).submit(triple, 0)  # pending until released: never ends by itself
    fast = client.submit(triple, 1)
    done, not_done = cf.wait([fast, held], timeout=HANG, return_when=cf.FIRST_COMPLETED)
    assert done == {fast} and not_done == {held}
    assert fast.result() == 3

    many = client.map(triple, [2, 3, 4], chunksize=1)
    assert {f.result() for f in cf.as_completed(many, timeout=HANG)} == {6, 9, 12}
    chunked = client.map(triple, range(5), chunksize=2)
    assert sorted(f.result() for f in cf.as_completed(chunked, timeout=HANG)) == [0, 3, 6, 9, 12]

    assert held.cancel() is True
    done, not_done = cf.wait([held], timeout=HANG)  # the waiter hears of the cancel at once
    assert done == {held} and not not_done and held.cancelled()
    with pytest.raises(cf.CancelledError):
        held.result()
    assert held.wait(timeout=HANG).state is JobState.CANCELLED
    assert fast.cancel() is False  # it had ended: nothing to cancel


def test_print_output_is_kept_and_a_new_process_reattaches_by_id(crossdock, tmp_path):
    client = Client(crossdock.rt)
    h = client.submit(chatty, "ada")
    assert h.result(timeout=HANG) == "ADA"
    lines = ("hello ada from stdout", "warning for ada on stderr", "a child of ada prints too")
    kept = h.logs()
    assert all(line in kept for line in lines), kept

    cli = subprocess.run([sys.executable, "-m", "crossdock", "logs", str(h.id)], capture_output=True, text=True,
                         timeout=HANG, env=dict(os.environ))
    assert cli.returncode == 0 and all(line in cli.stdout for line in lines), (cli.stdout, cli.stderr)

    server = ApiServer(crossdock.rt, send=crossdock.send)
    try:
        with httpx.Client(base_url=server.url, timeout=60) as http:
            token = make_token(crossdock.rt.store, client.user)
            r = http.get(f"/v1/jobs/{h.id}/logs", headers=token)
            followed = http.get(f"/v1/jobs/{h.id}/logs", params={"follow": True}, headers=token)
        assert r.status_code == 200 and r.text == kept
        assert followed.status_code == 200 and followed.text == kept  # the job had ended: the stream ends too
    finally:
        server.close()

    code = ("import sys; from crossdock.client import Client; h = Client().job(sys.argv[1]);"
            " print(repr(h.result(timeout=60))); print(h.logs(), end='')")
    again = subprocess.run([sys.executable, "-c", code, str(h.id)], capture_output=True, text=True, timeout=HANG,
                           env=dict(os.environ), cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    first, _, rest = again.stdout.partition("\n")
    assert first == "'ADA'" and rest == kept


class Steps:
    """A resumable job as submitit has them: ``checkpoint`` returns the call that resumes it. With
    ``hold``, its first attempt runs up to ``hold`` steps (until it is stopped, in a test that stops
    it), and an attempt after it goes on to ``n``."""

    def __init__(self, hold: int | None = None):
        self.done, self.starts, self.hold = 0, [], hold

    def __call__(self, n):
        self.starts.append(self.done)
        end = self.hold if self.hold is not None and len(self.starts) == 1 else n
        while self.done < end:
            print(f"step {self.done}", flush=True)
            time.sleep(0.1)
            self.done += 1
        return self.starts

    def checkpoint(self, n):
        return self, (n,), {}


def test_a_requeued_python_job_resumes_from_its_checkpoint(crossdock):
    client = Client(crossdock.rt)
    h = client.submit(Steps(hold=1000), 30)  # the first attempt runs until the requeue stops it
    wait_until("the job ran five steps", lambda: "step 5\n" in h.logs(), HANG)
    assert h.requeue()  # running: preempted (SIGTERM), then requeued
    followed = subprocess.run([sys.executable, "-m", "crossdock", "logs", "-f", str(h.id)], capture_output=True,
                              text=True, timeout=HANG, env=dict(os.environ))  # returns once the job has ended
    starts = h.result(timeout=HANG)
    assert len(starts) == 2 and starts[0] == 0 and starts[1] >= 5, starts  # the second attempt went on
    job = h.job
    assert job.state is JobState.COMPLETED and job.attempts == 2
    log = h.logs()
    assert log.count("step 0\n") == 1 and "step 29\n" in log  # every attempt's output, no step run twice from 0
    assert followed.returncode == 0 and followed.stdout == log


def test_a_python_job_stopped_by_its_time_limit_keeps_its_checkpoint_for_a_requeue(cluster):
    client = Client(cluster.rt)
    h = client.options(time_limit=3).submit(Steps(), 10_000)
    assert h.wait(timeout=HANG).state is JobState.TIMEOUT
    reached = max(int(line.split()[1]) for line in h.logs().splitlines() if line.startswith("step "))
    again = client.job(h.id)  # the first handle settled with the time-out
    assert again.requeue()
    wait_until("the requeued attempt went on", lambda: f"step {reached + 3}\n" in again.logs(), HANG)
    assert again.wait(timeout=HANG).state is JobState.TIMEOUT and again.job.attempts == 2
    log = again.logs()
    assert log.count("step 0\n") == 1 and log.count(f"step {reached + 1}\n") == 1  # resumed where it stopped
