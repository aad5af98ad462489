"""One contract suite for the Slurm backend, run over both drivers (CLI and slurmrestd/JWT)
against the real local cluster (4 slurmd, fake GPUs, partition preemption)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from slurm_helpers import DRIVERS, next_job_id, wait_file, wait_for, wait_job, wait_terminal

from crossdock.backends.slurm import CliDriver, SlurmBackend, SubmitRequest
from crossdock.backends.slurm.request import job_tag
from crossdock.dev import slurm as dev
from crossdock.queue.models import ArraySpec, Dependency, DependencySpec, GpuRequest, Job, JobSpec
from crossdock.queue.states import JobState, Reason

pytestmark = pytest.mark.slurm

ACTIVE = (JobState.RUNNING, JobState.SCHEDULED)


@pytest.fixture(scope="module", autouse=True)
def timeout_jobs(slurm_cluster, jobs_dir):
    """One 1-minute job per driver, submitted when the module starts so that the time-limit
    test does not wait alone; pinned to cpu2, away from the preemption tests on cpu1."""
    jobs = {}
    for driver in DRIVERS:
        job = Job(id=next_job_id(), spec=JobSpec(command=["sleep", "600"], time_limit_seconds=60, nodelist=["cpu2"],
                                              workdir=str(jobs_dir), stdout="/dev/null"))
        SlurmBackend.from_env(slurm_cluster, driver=driver).submit(job)
        jobs[driver] = job
    return jobs


def test_inventory_lists_partitions_nodes_and_gpus(backend):
    view = backend.cluster()
    assert {p.name for p in view.partitions} >= {"cpu", "gpu-a100", "gpu-l4", "high"}
    assert "high" in next(n for n in view.nodes if n.name == "gpu-l4-1").partitions
    nodes = {n.name: n for n in backend.inventory().nodes}
    # The power-saved elastic nodes are listed too, in their own pool, with their power state.
    elastic = {n: nodes.pop(n) for n in ("elastic1", "elastic2", "elastic3")}
    assert {n.pool for n in elastic.values()} == {"elastic"} and all("slurm.power" in n.labels for n in elastic.values())
    assert set(nodes) == {"cpu1", "cpu2", "gpu-a100-1", "gpu-l4-1"}
    assert (nodes["cpu1"].pool, nodes["cpu1"].backend, nodes["cpu1"].cpu_milli, nodes["cpu1"].memory_mib) == (
        "cpu", "slurm", 8000, 16000)
    assert nodes["cpu1"].gpus == ()
    assert [g.model for g in nodes["gpu-a100-1"].gpus] == ["A100"] * 8
    assert [g.id for g in nodes["gpu-l4-1"].gpus] == [f"gpu-l4-1:{i}" for i in range(4)]
    assert all(n.schedulable for n in nodes.values())


def test_inventory_counts_foreign_jobs(backend, slurm_cluster, jobs_dir):
    # A job submitted behind crossdock's back takes 2 L4s, 3 CPUs and 300 MiB.
    foreign = CliDriver(slurm_cluster)
    job_id = foreign.submit(SubmitRequest(script="#!/bin/bash\nsleep 30\n", name="foreign", comment="not ours",
                                          workdir=str(jobs_dir), partition="gpu-l4", cpus_per_task=3,
                                          mem_per_node_mib=300, gres=("gpu:l4:2",), stdout="/dev/null"))
    try:
        wait_for(backend, str(job_id), lambda s: s.state == JobState.RUNNING)
        inv = backend.inventory()
        (alloc,) = [a for a in inv.foreign if a.node == "gpu-l4-1"]
        assert (alloc.job_id, alloc.cpu_milli, alloc.memory_mib, len(alloc.gpu_ids)) == (None, 3000, 300, 2)
        assert next(n for n in backend.cluster().nodes if n.name == "gpu-l4-1").gpus_alloc == {"l4": 2}
    finally:
        foreign.cancel(str(job_id))


def test_submit_completes_with_output_and_exit_code(backend, make_job, jobs_dir):
    job = make_job(command=["bash", "-c", "echo hello from $SLURM_JOB_PARTITION job $CROSSDOCK_JOB_ID; echo err >&2"],
                   partition="cpu", cpus_per_task=2, mem_per_node_mib=256, time_limit_seconds=300)
    ref = backend.submit(job)
    status = wait_job(backend, job, lambda s: s.state.terminal)
    assert (status.state, status.exit_code, status.signal, status.ref) == (JobState.COMPLETED, 0, None, ref)
    assert status.native_state == "COMPLETED" and status.nodes[0] in ("cpu1", "cpu2")
    assert (jobs_dir / f"{job.id}.out").read_text() == f"hello from cpu job {job.id}\nerr\n"


def test_failing_job_reports_its_exit_code(backend, make_job):
    job = make_job("#!/bin/bash\necho about to fail\nexit 7\n")
    backend.submit(job)
    status = wait_job(backend, job, lambda s: s.state.terminal)
    assert (status.state, status.exit_code, status.reason) == (JobState.FAILED, 7, Reason.NON_ZERO_EXIT)


def test_cancel(backend, make_job, jobs_dir):
    job = make_job("#!/bin/bash\necho started\nsleep 300\n")
    backend.submit(job)
    wait_file(jobs_dir / f"{job.id}.out", "started")
    assert backend.status([job])[job.id].state == JobState.RUNNING
    backend.cancel(job)  # found by its tag: no backend_ref needed
    status = wait_job(backend, job, lambda s: s.state.terminal)
    # Killed by SIGTERM, or bash reporting its child's SIGTERM as 128+15.
    assert status.state == JobState.CANCELLED and (status.signal, status.exit_code) in ((15, 0), (None, 143))


def _array(make_job, jobs_dir, script: str, task_ids: list[int], max_running: int | None):
    parent = make_job(script, array=ArraySpec(task_ids=task_ids, max_running=max_running),
                      stdout=str(jobs_dir / "arr-%A_%a.out"))
    tasks = [make_job(script, array=parent.spec.array, stdout=parent.spec.stdout).model_copy(
        update={"array_job_id": parent.id, "array_task_id": t}) for t in task_ids]
    return parent, tasks


def test_array_with_throttle(backend, make_job, jobs_dir):
    parent, tasks = _array(make_job, jobs_dir, "#!/bin/bash\necho task $SLURM_ARRAY_TASK_ID\nsleep 2\n",
                           [0, 1, 2, 3, 4, 5], 2)
    refs = backend.submit_array(tasks)
    assert backend.submit_array(tasks) == refs  # replayed: the same Slurm array
    slurm_array = refs[tasks[0].id].split("_")[0]
    assert refs == {t.id: f"{slurm_array}_{t.array_task_id}" for t in tasks}
    most_running, saw_limit = 0, False
    deadline = time.monotonic() + 60
    while True:
        got = backend.status(tasks)
        # Slurm frees a throttle slot when a task ends, before its epilog: a COMPLETING task
        # beside the next two is within the throttle (a loaded machine shows it)
        most_running = max(most_running, sum(s.state in ACTIVE and "COMPLETING" not in (s.native_state or "")
                                             for s in got.values()))
        saw_limit |= any(s.reason == Reason.ARRAY_TASK_LIMIT for s in got.values())
        if len(got) == len(tasks) and all(s.state.terminal for s in got.values()) or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert {s.state for s in got.values()} == {JobState.COMPLETED}
    assert most_running == 2 and saw_limit
    summed = backend.status_refs([slurm_array])[slurm_array]
    assert summed.state == JobState.COMPLETED and sorted(summed.tasks) == [0, 1, 2, 3, 4, 5]
    outputs = sorted(p.read_text() for p in jobs_dir.glob(f"arr-{parent.id}_*.out"))
    assert outputs == [f"task {i}\n" for i in range(6)]


def test_array_task_dispatched_alone_looks_like_its_task(backend, make_job, jobs_dir):
    parent, tasks = _array(make_job, jobs_dir, "#!/bin/bash\necho $SLURM_ARRAY_JOB_ID $SLURM_ARRAY_TASK_ID"
                           " $SLURM_ARRAY_TASK_COUNT\n", [3, 8], None)
    backend.submit(tasks[1])
    assert wait_job(backend, tasks[1], lambda s: s.state.terminal).state == JobState.COMPLETED
    assert (jobs_dir / f"arr-{parent.id}_8.out").read_text() == f"{parent.id} 8 2\n"


def test_spec_array_is_one_slurm_array(backend, make_job, jobs_dir):
    job = make_job("#!/bin/bash\necho $SLURM_ARRAY_TASK_ID\n", array=ArraySpec(task_ids=[1, 2, 5], max_running=1),
                   stdout=str(jobs_dir / "whole-%A_%a.out"))
    ref = backend.submit(job)
    status = wait_for(backend, ref, lambda s: s.state is not None and s.state.terminal)
    assert status.state == JobState.COMPLETED and sorted(status.tasks) == [1, 2, 5]
    assert sorted((jobs_dir / f"whole-{ref}_{t}.out").read_text() for t in (1, 2, 5)) == ["1\n", "2\n", "5\n"]


def test_dependency_chain(backend, make_job, jobs_dir):
    log = jobs_dir / f"chain-{time.monotonic_ns()}.log"
    first = make_job(f"#!/bin/bash\nsleep 2\necho a >> {log}\n")
    refs = {first.id: backend.submit(first)}
    previous = first
    for step in "bc":
        job = make_job(f"#!/bin/bash\necho {step} >> {log}\n",
                       dependency=DependencySpec(deps=[Dependency(type="afterok", job_id=previous.id)]))
        refs[job.id] = backend.submit(job, slurm_ids=refs)
        previous = job
    assert backend.status([previous])[previous.id].reason == Reason.DEPENDENCY
    for ref in refs.values():
        assert wait_terminal(backend, ref).state == JobState.COMPLETED
    assert log.read_text() == "a\nb\nc\n"


@pytest.mark.parametrize("partition, gpu_type, count", [("gpu-a100", "a100", 3), ("gpu-l4", "l4", 2)])
def test_gpu_job_sees_its_devices(backend, make_job, jobs_dir, partition, gpu_type, count):
    job = make_job(command=["bash", "-c", "echo $CUDA_VISIBLE_DEVICES"], partition=partition,
                   gpus=GpuRequest(count=count, type=gpu_type))
    backend.submit(job)
    status = wait_job(backend, job, lambda s: s.state.terminal)
    assert status.state == JobState.COMPLETED
    assert status.nodes == (f"gpu-{gpu_type}-1",)
    devices = (jobs_dir / f"{job.id}.out").read_text().strip().split(",")
    assert devices == [str(i) for i in range(count)]


def test_impossible_gpu_request_is_rejected(backend, make_job):
    from crossdock.backends.slurm import SubmitRejected

    with pytest.raises(SubmitRejected):
        backend.submit(make_job(command=["true"], partition="gpu-l4", gpus=GpuRequest(count=1, type="a100")))


LOW_JOB = """#!/bin/bash
trap 'echo got TERM; exit 143' TERM
echo "run ${SLURM_RESTART_COUNT:-0}"
if [ "${SLURM_RESTART_COUNT:-0}" = 0 ]; then sleep 300 & wait; fi
echo done
"""


def test_high_priority_job_preempts_and_low_job_reruns(backend, make_job, jobs_dir):
    low = make_job(LOW_JOB, partition="cpu", nodelist=["cpu1"], cpus_per_task=8)
    low_ref = backend.submit(low, partition="cpu", nodelist=["cpu1"])
    wait_file(jobs_dir / f"{low.id}.out", "run 0")
    high = make_job(command=["bash", "-c", "sleep 1; echo high"], cpus_per_task=8)
    high_ref = backend.submit(high, partition="high", nodelist=["cpu1"])
    requeued = wait_for(backend, low_ref, lambda s: s.restarts >= 1, timeout=30)
    assert requeued.state in (JobState.PENDING, JobState.RUNNING, JobState.COMPLETED)
    assert wait_terminal(backend, high_ref).state == JobState.COMPLETED
    final = wait_terminal(backend, low_ref, timeout=60)
    assert (final.state, final.restarts) == (JobState.COMPLETED, 1)
    text = (jobs_dir / f"{low.id}.out").read_text()
    assert "run 0" in text and text.endswith("run 1\ndone\n")


VICTIM = """#!/bin/bash
trap 'echo got TERM' TERM
echo "run ${SLURM_RESTART_COUNT:-0}"
while :; do sleep 0.2; done
"""
"""Ignores SIGTERM: it ends only when Slurm kills it."""


def test_backend_preempt_signals_and_returns_then_the_hard_stop_cancels(backend, make_job, jobs_dir):
    assert backend.preempt_policy == "cancel"  # crossdock requeues the job as a new attempt itself
    job = make_job(VICTIM)
    backend.submit(job)
    out = jobs_dir / f"{job.id}.out"
    wait_file(out, "run 0")
    backend.preempt(job, grace_seconds=30)
    wait_file(out, "got TERM")
    # The call has returned, and the victim still runs: the grace period is not waited out in it.
    assert backend.status([job])[job.id].state is JobState.RUNNING
    backend.stop_preempted(job)  # what the status pass does once the deadline passed
    assert wait_job(backend, job, lambda s: s.state.terminal).state is JobState.CANCELLED


@pytest.fixture
def followed(runtime, slurm_cluster):
    """A Slurm backend with the ``requeue`` preempt policy over a real store, and the follower's
    status pass over it."""
    from crossdock.workers.leader import Scheduler

    backend = SlurmBackend.from_env(slurm_cluster, driver="cli", store=runtime.store, preempt_policy="requeue")
    runtime.backends.use("slurm", backend)
    sched = Scheduler(runtime, send=lambda *a: None, holder="test")
    return backend, lambda ids: sched.follower._by_status("slurm", runtime.store.get_many(ids))


def test_requeue_policy_victim_leaves_its_node_and_is_requeued_by_crossdock(followed, store, make_job, jobs_dir):
    """``CROSSDOCK_SLURM_PREEMPT=requeue``: Slurm requeues the victim at the end of its grace
    period; crossdock then cancels that Slurm job (so Slurm cannot start it again on the GPU it
    freed) and requeues the job as a new attempt of its own."""
    backend, follow = followed
    (job,) = store.submit([make_job(VICTIM, nodelist=["cpu1"]).model_copy(update={"id": 0})])
    store.transition(job.id, JobState.SCHEDULED, bump_attempt=True, fields={"nodes": ["cpu1"], "backend": "slurm"})
    job = store.get(job.id)
    ref = backend.submit(job)
    store.set_backend_refs({job.id: ref})
    out = Path(job.spec.stdout)
    wait_file(out, "run 0")
    wait_until = time.monotonic() + 30
    while store.get(job.id).state is not JobState.RUNNING:
        assert time.monotonic() < wait_until, store.get(job.id)
        follow([job.id])
        time.sleep(0.2)
    store.request_preempt(job.id, 2)  # the leader's mark
    backend.preempt(store.get(job.id), 2)  # the preempt task
    wait_file(out, "got TERM")
    assert backend.status_refs([ref])[ref].state is JobState.RUNNING  # the task returned before the kill
    deadline = time.monotonic() + 60
    while store.get(job.id).state is not JobState.PENDING:
        assert time.monotonic() < deadline, (store.get(job.id), backend.status_refs([ref])[ref])
        follow([job.id])
        time.sleep(0.25)
    again = store.get(job.id)
    assert (again.reason, again.attempts, again.preempt_requested, again.nodes) == (Reason.PREEMPTED, 1, False, [])
    events = [e["to"] for e in store.events(job.id)]
    assert events[-3:] == ["RUNNING", "PREEMPTED", "PENDING"], events
    # Gone from Slurm's queue: not pending for a rerun on the node it left.
    final = wait_for(backend, ref, lambda s: s.state is None or s.state.terminal)
    assert final.state in (None, JobState.CANCELLED), final
    assert "run 1" not in out.read_text()


def test_gres_with_the_model_name_crossdock_shows(backend, make_job, jobs_dir):
    """``--gres=gpu:A100:1``: ``crossdock info`` shows the node's ``a100`` as A100; sbatch gets
    the type as the node spells it."""
    from crossdock.queue.models import Gres

    assert {g.model for n in backend.inventory().nodes for g in n.gpus} >= {"A100", "L4"}
    job = make_job(command=["bash", "-c", "echo $CUDA_VISIBLE_DEVICES"], partition="gpu-a100",
                   gres=[Gres(name="gpu", type="A100", count=1)])
    backend.submit(job)
    status = wait_job(backend, job, lambda s: s.state.terminal)
    assert (status.state, status.nodes) == (JobState.COMPLETED, ("gpu-a100-1",))
    assert (jobs_dir / f"{job.id}.out").read_text().strip() == "0"


def test_replayed_dispatch_does_not_submit_twice(backend, make_job):
    job = make_job(command=["sleep", "1"])
    refs = [backend.submit(job) for _ in range(3)]
    racing: list[str] = []
    threads = [threading.Thread(target=lambda: racing.append(backend.submit(job))) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert set(refs) == set(racing) == {refs[0]}
    tagged = [j for j in backend.driver.jobs() if backend.tags.key(j.comment) == job_tag(job.id, job.attempts)]
    assert [str(j.job_id) for j in tagged] == [refs[0]]
    next_attempt = job.model_copy(update={"attempts": job.attempts + 1})
    assert backend.submit(next_attempt) != refs[0]


def test_submission_survives_a_controller_outage(backend, slurm_cluster, make_job):
    layout = dev.Layout.of(slurm_cluster["CROSSDOCK_SLURM_DIR"])
    job = make_job(command=["echo", "after the outage"])
    result: dict[str, object] = {}
    retries: list[float] = []  # on the backend's clock: when each wait before another try began
    # The backend's clock runs 5 s ahead at each of its waits until slurmctld is restarted: the
    # outage lasts 30 s on it (a third of the backend's 90 s of retries) in a few real seconds,
    # each try a real one against the stopped controller.
    ahead = {"s": 0.0, "outage": True}

    def clock() -> float:
        return time.monotonic() + ahead["s"]

    def retry_sleep(seconds: float) -> None:
        retries.append(clock())
        ahead["s"] += 5.0 if ahead["outage"] else 0.0
        time.sleep(seconds)

    backend = SlurmBackend.from_env(slurm_cluster, driver=backend.driver.name, clock=clock, sleep=retry_sleep)

    def submit() -> None:
        try:
            result["ref"] = backend.submit(job)
        except Exception as exc:  # reported by the assertion below
            result["error"] = exc

    dev.stop_controller(layout)
    stopped_at = clock()
    try:
        thread = threading.Thread(target=submit)
        thread.start()
        # Still retrying 30 s into the outage: wait for a retry that begins that late, failing
        # as soon as the submission ends (or gives up) before it.
        while not (retries and retries[-1] - stopped_at >= 30):
            assert thread.is_alive() and not result, \
                f"submission ended {clock() - stopped_at:.0f}s into the outage: {result}"
            assert clock() - stopped_at < 60, f"no retry 30 s into the outage (retries: {len(retries)})"
            thread.join(0.2)
        assert thread.is_alive() and not result, "submission should still be retrying while slurmctld is down"
    finally:
        ahead["outage"] = False
        dev.start_controller(layout)
    thread.join(timeout=90)
    dev.wait_nodes_ready(layout)
    assert "error" not in result, result.get("error")
    assert clock() - stopped_at >= 30
    status = wait_job(backend, job, lambda s: s.state.terminal, timeout=60)
    assert (status.state, status.ref) == (JobState.COMPLETED, result["ref"])


def test_time_limit_ends_in_timeout(backend, timeout_jobs):
    # Slurm counts time limits in whole minutes and checks them every 30 s: up to ~100 s
    # after the submission at the start of this module.
    job = timeout_jobs[backend.driver.name]
    status = wait_job(backend, job, lambda s: s.state.terminal, timeout=150)
    assert (status.state, status.reason, status.signal) == (JobState.TIMEOUT, Reason.TIME_LIMIT, 15)


# --- beyond the contract: configuration and the unix-socket REST transport -----------------


def test_from_config_places_jobs_by_pool(slurm_cluster, make_job, jobs_dir, monkeypatch):
    from crossdock.backends.slurm import from_config
    from crossdock.queue.config import ClusterConfig

    config = ClusterConfig.model_validate({
        "priority_classes": {"batch": {"value": 100}},
        "pools": {"hpc-l4": {"backend": "slurm", "partition": "gpu-l4", "gpu": {"model": "L4"}},
                  "hpc-cpu": {"backend": "slurm", "partition": "cpu"},
                  "k8s-cpu": {"backend": "k8s", "selector": {"pool": "cpu"}}},
        "queues": {"q": {"priority_class": "batch", "pools": ["hpc-l4", "hpc-cpu"]}},
    })
    monkeypatch.setenv("CROSSDOCK_SLURM_ENV", str(dev.Layout.of(slurm_cluster["CROSSDOCK_SLURM_DIR"]).env_file))
    monkeypatch.setenv("CROSSDOCK_SLURM_DRIVER", "rest")
    backend = from_config(config)
    assert backend.kind == "slurm" and backend.driver.name == "rest" and backend.preempt_policy == "cancel"
    pools = {n.name: n.pool for n in backend.inventory().nodes}
    assert pools == {"cpu1": "hpc-cpu", "cpu2": "hpc-cpu", "gpu-l4-1": "hpc-l4"}  # gpu-a100-1 is in no pool
    job = make_job(command=["bash", "-c", "echo $SLURM_JOB_PARTITION $SLURMD_NODENAME $CUDA_VISIBLE_DEVICES"],
                   gpus=GpuRequest(count=1, type="l4"))
    placed = job.model_copy(update={"pool": "hpc-l4", "nodes": ["gpu-l4-1"]})
    backend.submit(placed)
    assert wait_job(backend, placed, lambda s: s.state.terminal).state == JobState.COMPLETED
    assert (jobs_dir / f"{job.id}.out").read_text() == "gpu-l4 gpu-l4-1 0\n"


def test_rest_over_unix_socket_runs_jobs_as_slurmrestd_user(slurm_cluster, make_job, jobs_dir):
    backend = SlurmBackend.from_env(slurm_cluster, driver="rest-unix")
    job = make_job(command=["bash", "-c", "id -un; exit 3"])
    backend.submit(job)
    status = wait_job(backend, job, lambda s: s.state.terminal)
    assert (status.state, status.exit_code) == (JobState.FAILED, 3)
    assert (jobs_dir / f"{job.id}.out").read_text() == "slurm\n"
