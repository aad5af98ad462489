"""End to end on this machine: real Redis, a real Celery worker, the scheduling loop, the local backend."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from crossdock import service
from crossdock.backends.local import workspace
from crossdock.backends.local.supervisor import job_dir
from crossdock.queue.models import ArraySpec, Dependency, DependencySpec, JobSpec
from crossdock.queue.states import JobState, Reason

pytestmark = [pytest.mark.redis, pytest.mark.celery]


def submit(rt, **kw):
    return service.submit(rt, [JobSpec(**kw)])


def test_job_runs_to_completion_with_output_file_and_exit_code(cluster, tmp_path):
    job, = submit(cluster.rt, command=["sh", "-c", 'echo "hello $SLURM_JOB_ID"; exit 0'], workdir=str(tmp_path),
                  stdout="out-%j.txt")
    done = cluster.wait(job.id)
    assert done.state is JobState.COMPLETED, done
    assert done.exit_code == 0
    assert (tmp_path / f"out-{job.id}.txt").read_text() == f"hello {job.id}\n"
    events = [e["to"] for e in cluster.rt.store.events(job.id)]
    assert events == ["PENDING", "SCHEDULED", "RUNNING", "COMPLETED"]


def test_failing_job_records_its_exit_code(cluster, tmp_path):
    job, = submit(cluster.rt, command=["sh", "-c", "exit 7"], workdir=str(tmp_path))
    done = cluster.wait(job.id)
    assert (done.state, done.exit_code, done.reason) == (JobState.FAILED, 7, Reason.NON_ZERO_EXIT)


def test_time_limit_ends_in_timeout(cluster, tmp_path):
    job, = service.submit(cluster.rt, [JobSpec(command=["sleep", "30"], time_limit_seconds=1, workdir=str(tmp_path))])
    done = cluster.wait(job.id, timeout=30)
    assert (done.state, done.reason) == (JobState.TIMEOUT, Reason.TIME_LIMIT)
    assert done.signal == signal.SIGTERM


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_cancel_of_a_running_job_kills_its_process_group(cluster, tmp_path):
    script = "#!/bin/sh\nsleep 300 &\necho $! > child.pid\necho $$ > parent.pid\nwait\n"
    job, = service.submit(cluster.rt, [JobSpec(script=script, workdir=str(tmp_path))])
    cluster.wait(job.id, {JobState.RUNNING})
    deadline = time.monotonic() + 10
    while not (tmp_path / "child.pid").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    child = int((tmp_path / "child.pid").read_text())
    parent = int((tmp_path / "parent.pid").read_text())
    assert _alive(child)
    service.cancel(cluster.rt, [str(job.id)], cluster.send)
    done = cluster.wait(job.id, timeout=30)
    assert done.state is JobState.CANCELLED
    deadline = time.monotonic() + 5
    while (_alive(child) or _alive(parent)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(child) and not _alive(parent)


def test_cancel_of_a_pending_job_is_immediate(cluster, tmp_path):
    job, = service.submit(cluster.rt, [JobSpec(command=["true"], hold=True, workdir=str(tmp_path))])
    service.cancel(cluster.rt, [str(job.id)], cluster.send)
    assert cluster.rt.store.get(job.id).state is JobState.CANCELLED


def test_array_throttle_never_runs_more_than_two_at_once(cluster, tmp_path):
    script = "#!/bin/sh\ndate +%s.%N > start.$SLURM_ARRAY_TASK_ID\nsleep 1\ndate +%s.%N > end.$SLURM_ARRAY_TASK_ID\n"
    jobs = service.submit(cluster.rt, [JobSpec(script=script, workdir=str(tmp_path),
                                               array=ArraySpec(task_ids=list(range(6)), max_running=2))])
    for j in jobs:
        assert cluster.wait(j.id, timeout=60).state is JobState.COMPLETED
    spans = [(float((tmp_path / f"start.{t}").read_text()), float((tmp_path / f"end.{t}").read_text()))
             for t in range(6)]
    points = sorted([(s, 1) for s, _ in spans] + [(e, -1) for _, e in spans])
    running = peak = 0
    for _, d in points:
        running += d
        peak = max(peak, running)
    assert peak == 2
    assert all(len(cluster.rt.store.events(j.id)) == 4 for j in jobs)


def test_afterok_and_afternotok_chains(cluster, tmp_path):
    rt = cluster.rt
    ok, = submit(rt, command=["true"], workdir=str(tmp_path))
    bad, = submit(rt, command=["false"], workdir=str(tmp_path))
    after_ok, = submit(rt, command=["true"], workdir=str(tmp_path),
                       dependency=DependencySpec(deps=[Dependency(type="afterok", job_id=ok.id)]))
    after_bad, = submit(rt, command=["true"], workdir=str(tmp_path),
                        dependency=DependencySpec(deps=[Dependency(type="afternotok", job_id=bad.id)]))
    never, = submit(rt, command=["true"], workdir=str(tmp_path),
                    dependency=DependencySpec(deps=[Dependency(type="afterok", job_id=bad.id)]))
    assert cluster.wait(after_ok.id).state is JobState.COMPLETED
    assert cluster.wait(after_bad.id).state is JobState.COMPLETED
    gone = cluster.wait(never.id)
    assert (gone.state, gone.reason) == (JobState.CANCELLED, Reason.DEPENDENCY_NEVER_SATISFIED)
    assert gone.attempts == 0  # never dispatched
    assert rt.store.get(after_ok.id).start_time >= rt.store.get(ok.id).end_time


def test_a_worker_killed_mid_job_loses_nothing(cluster, tmp_path):
    rt = cluster.rt
    running, = submit(rt, command=["sh", "-c", "sleep 2; echo survived"], workdir=str(tmp_path), stdout="r.out")
    cluster.wait(running.id, {JobState.RUNNING})
    cluster.kill_worker()
    queued, = submit(rt, command=["sh", "-c", "echo later"], workdir=str(tmp_path), stdout="q.out")
    done = cluster.wait(running.id, timeout=30)
    assert done.state is JobState.COMPLETED and (tmp_path / "r.out").read_text() == "survived\n"
    # The scheduler placed the queued job and sent its dispatch, and went on cycling: with no
    # worker to take that message, the job must still wait, its dispatch neither run nor lost.
    cluster.wait(queued.id, {JobState.SCHEDULED}, timeout=30)
    cluster.wait_cycles(2)
    waiting = rt.store.get(queued.id)
    assert waiting.state in (JobState.PENDING, JobState.SCHEDULED) and not waiting.backend_ref, waiting
    cluster.restart_worker()
    assert cluster.wait(queued.id, timeout=60).state is JobState.COMPLETED
    assert (tmp_path / "q.out").read_text() == "later\n"


def test_a_dispatch_delivered_twice_starts_one_process(cluster, tmp_path):
    rt = cluster.rt
    job, = submit(rt, command=["sh", "-c", "echo started >> starts.txt; sleep 1"], workdir=str(tmp_path))
    cluster.wait(job.id, {JobState.RUNNING})
    # the same (job, attempt) again, as a redelivery after a visibility timeout would
    resent = [cluster.send_tracked("crossdock.dispatch", [job.id, 1], "local") for _ in range(3)]
    assert cluster.wait(job.id).state is JobState.COMPLETED
    outcomes = [cluster.wait_task("crossdock.dispatch", task_id) for task_id in resent]  # each one ran
    assert all(o == "'duplicate'" or o.startswith("'stale") for o in outcomes), outcomes
    assert (tmp_path / "starts.txt").read_text() == "started\n"
    assert [e["to"] for e in rt.store.events(job.id)].count("RUNNING") == 1


def test_a_job_whose_supervisor_dies_is_marked_and_requeued(cluster, tmp_path):
    rt = cluster.rt
    job, = submit(rt, command=["sh", "-c", "echo run >> runs.txt; sleep 20"], workdir=str(tmp_path),
                  time_limit_seconds=60)
    cluster.wait(job.id, {JobState.RUNNING})
    sup = workspace.watcher_pid(job_dir(rt.settings.state_dir, job.id, 1))
    assert sup and _is_supervisor(sup), "no supervisor process found"
    os.kill(sup, signal.SIGKILL)
    cluster.wait(job.id, {JobState.PENDING, JobState.SCHEDULED, JobState.NODE_FAIL}, timeout=40)
    states = [e["to"] for e in rt.store.events(job.id)]
    assert "NODE_FAIL" in states
    again = cluster.wait(job.id, {JobState.RUNNING}, timeout=40)
    assert again.attempts == 2
    service.cancel(rt, [str(job.id)], cluster.send)
    cluster.wait(job.id, timeout=30)


def _is_supervisor(pid: int) -> bool:
    """Started by the command line or forked by the spawner, a supervisor names itself."""
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip().startswith("cdsup-")
    except OSError:
        return False


def test_python_callable_result_and_remote_exception(cluster, tmp_path, monkeypatch):
    from crossdock.client import Client

    monkeypatch.chdir(tmp_path)
    client = Client(cluster.rt)
    h = client.options(queue="preprocessing").submit(pow, 2, 10)
    assert h.result(timeout=60) == 1024

    def scale(x, b=1, cpus=0):  # its keywords are its own, even one named like a resource
        return x * b + cpus

    assert client.submit(scale, 1, b=5, cpus=3).result(timeout=60) == 8

    def boom(x):
        raise ValueError(f"bad input {x}")

    h = client.submit(boom, 42)
    with pytest.raises(ValueError, match="bad input 42") as exc:
        h.result(timeout=60)
    assert any("remote traceback" in n and "boom" in n for n in exc.value.__notes__)
    assert h.state is JobState.FAILED
    handles = client.map(lambda x: x * x, [1, 2, 3], max_running=2)
    assert [hh.result(timeout=60) for hh in handles] == [1, 4, 9]
    assert not list(tmp_path.glob("slurm-*.out"))  # Python jobs write nothing here unless asked


def test_arguments_are_never_interpreted_by_a_shell(cluster, tmp_path):
    weird = ["it's", '"quoted"', "$(touch pwned)", "line1\nline2", "ünïcødé ✓", "; rm -rf /"]
    job, = submit(cluster.rt, command=["python3", "-c", "import sys, json; print(json.dumps(sys.argv[1:]))"],
                  args=weird, name="$(touch pwned-name) 'x'", workdir=str(tmp_path), stdout="out.json")
    assert cluster.wait(job.id).state is JobState.COMPLETED
    import json

    assert json.loads((tmp_path / "out.json").read_text()) == weird
    assert not (tmp_path / "pwned").exists() and not (tmp_path / "pwned-name").exists()
    assert cluster.rt.store.get(job.id).spec.name == "$(touch pwned-name) 'x'"


def test_task_decorator_and_command_and_script_handles(cluster, tmp_path, monkeypatch):
    import crossdock
    from crossdock.client import Client

    monkeypatch.chdir(tmp_path)
    client = Client(cluster.rt)

    @crossdock.task(client=client, queue="preprocessing", cpus=1, mem="64M")
    def double(x):
        return 2 * x

    assert double(4) == 8  # still a plain function here
    assert double.submit(21).result(timeout=60) == 42
    assert [h.result(timeout=60) for h in double.map([1, 2])] == [2, 4]
    cmd = client.submit_command(["sh", "-c", "exit 3"], name="three")
    assert cmd.wait(timeout=60).exit_code == 3 and cmd.state is JobState.FAILED
    script = client.submit_script("#!/bin/sh\necho $1 > arg.txt\n", args=["hi there"])
    assert script.wait(timeout=60).state is JobState.COMPLETED
    assert (tmp_path / "arg.txt").read_text() == "hi there\n"
    slow = client.submit_command(["sleep", "60"])
    slow.cancel()
    assert slow.wait(timeout=60).state is JobState.CANCELLED


@pytest.mark.parametrize("flags", ["", "B:"], ids=["every-process", "batch-shell"])
def test_signal_is_delivered_before_the_time_limit(cluster, tmp_path, flags):
    from crossdock.queue.sbatch_extras import parse_signal

    # the limit is 60 s; USR1 comes 50 s before it, and the job ends itself when it arrives. A
    # child of the batch shell traps it too, and says so: the shell waits for it when it will get it.
    child = "sh -c 'trap \"echo child got USR1; exit 0\" USR1; while :; do sleep 0.1; done' & child=$!"
    wait = "wait $child; " if flags == "" else ""
    script = f"trap '{wait}echo got USR1; exit 0' USR1; {child}; while :; do sleep 0.1; done"
    job, = service.submit(cluster.rt, [JobSpec(command=["bash", "-c", script], time_limit_seconds=60,
                                               kill_signal=parse_signal(f"{flags}USR1@50"), workdir=str(tmp_path),
                                               stdout="out.txt")])
    done = cluster.wait(job.id, timeout=90)
    out = (tmp_path / "out.txt").read_text()
    assert done.state is JobState.COMPLETED and out.endswith("got USR1\n"), (done.state, out)
    # without B: the signal reaches every process of the job; with it, the batch shell alone
    assert ("child got USR1" in out) is (flags == ""), out


def test_handles_are_futures(cluster, tmp_path, monkeypatch):
    import asyncio
    import concurrent.futures as cf
    import threading

    import crossdock
    from crossdock.client import Client, JobFailed

    monkeypatch.chdir(tmp_path)
    client = Client(cluster.rt)
    handles = client.map(lambda x: x * 3, [1, 2, 3])
    assert all(isinstance(h, cf.Future) for h in handles)
    assert sorted(h.result() for h in crossdock.as_completed(handles, timeout=60)) == [3, 6, 9]

    called = threading.Event()
    bad = client.submit(lambda: 1 / 0)
    bad.add_done_callback(lambda f: called.set())
    done, not_done = crossdock.wait([bad], timeout=60)
    assert done == {bad} and not not_done and called.wait(10)
    assert isinstance(bad.exception(), ZeroDivisionError) and bad.done()

    async def both():
        return await client.submit(pow, 3, 2), await client.submit_command(["true"])

    nine, job = asyncio.run(both())
    assert nine == 9 and job.state is JobState.COMPLETED
    with pytest.raises(JobFailed, match="FAILED"):
        client.submit_command(["false"]).result(timeout=60)


def test_map_in_chunks_gives_each_input_its_own_outcome(cluster, tmp_path, monkeypatch):
    import crossdock
    from crossdock.client import Client

    monkeypatch.chdir(tmp_path)

    def tenfold(x):
        if x == 4:
            raise ValueError(f"bad input {x}")
        return x * 10

    handles = Client(cluster.rt).map(tenfold, range(7), chunksize=3)
    assert len(handles) == 7 and len({h.id for h in handles}) == 3  # three tasks: 3 + 3 + 1 inputs
    done, not_done = crossdock.wait(handles, timeout=60)  # the watcher resolves every handle of a task
    assert len(done) == 7 and not not_done
    assert [h.result() for i, h in enumerate(handles) if i != 4] == [0, 10, 20, 30, 50, 60]
    with pytest.raises(ValueError, match="bad input 4") as exc:
        handles[4].result()
    assert any("remote traceback" in n and "input 1" in n for n in exc.value.__notes__)
