"""Slurm power saving on the real local cluster: crossdock powers elastic nodes up for its backlog
and down when they are idle, and a node that fails to resume costs a job nothing but a new attempt.

The cluster's partition ``elastic`` (elastic[1-3], 4 CPUs each) starts powered down; its
ResumeProgram starts a node's slurmd (``slurmd -b``), its SuspendProgram stops it, and it leaves off
the nodes named in the cluster's ``etc/resume-fail`` (a resume that fails: DOWN after ResumeTimeout).
crossdock's autoscaler powers nodes up for a backlog; the test calls ``add_nodes``/``remove_nodes``
itself for what the autoscaler leaves to its scale-down delay.
"""

from __future__ import annotations

import subprocess
import time
import uuid
from pathlib import Path

import pytest
import yaml

from crossdock import service
from crossdock.backends.slurm import SlurmBackend
from crossdock.backends.slurm.power import power_state
from crossdock.dev.slurm.config import RESUME_TIMEOUT_S, SUSPEND_TIME_S, SUSPEND_TIMEOUT_S
from crossdock.dev.slurm.layout import ELASTIC_NODES, Layout
from crossdock.queue.config import parse_config
from crossdock.queue.models import Job, JobSpec
from crossdock.queue.states import TERMINAL, JobState

pytestmark = [pytest.mark.slurm, pytest.mark.autoscale, pytest.mark.redis, pytest.mark.celery]

ELASTIC = [n.name for n in ELASTIC_NODES]


def config(provisioner: str | None) -> dict:
    pool = {"backend": "slurm", "partition": "elastic", "max_nodes": len(ELASTIC)}
    if provisioner:
        pool["provisioner"] = provisioner
    return {"priority_classes": {"batch": {"value": 500}}, "pools": {"elastic": pool},
            "queues": {"batch": {"priority_class": "batch", "pools": ["elastic"]}}, "default_queue": "batch",
            "scheduler": {"interval_seconds": 0.3, "lease_seconds": 2}}


REACT_S = 15
"""Generous bound on crossdock's part before Slurm acts: a scheduling pass or two and the
autoscaler's, each a fraction of a second on a quiet machine."""


def wait_until(what: str, condition, timeout: float, interval: float = 0.2, story=None):
    """``condition()`` once true; on timeout, the failure says what Slurm did meanwhile (``story()``)."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}" + (f"\n{story()}" if story else ""))
        time.sleep(interval)


def power_story(slurm_dir: str, since: int = 0) -> str:
    """The power log from byte ``since`` on and the end of each elastic slurmd's log: what a failed
    power test needs to tell a slow resume from one that never started."""
    layout = Layout.of(slurm_dir)
    parts = [f"power log:\n{layout.power_log.read_text()[since:] if layout.power_log.exists() else '(none)'}"]
    for name in ELASTIC:
        log = layout.logs / f"slurmd-{name}.log"
        tail = log.read_text().splitlines()[-8:] if log.exists() else ["(none)"]
        parts.append(f"slurmd-{name}.log:\n" + "\n".join(tail))
    return "\n".join(parts)


def log_size(slurm_dir: str) -> int:
    log = Layout.of(slurm_dir).power_log
    return len(log.read_text()) if log.exists() else 0


def powers(backend: SlurmBackend) -> dict[str, str]:
    return {n.name: power_state(n) for n in backend.driver.nodes() if n.name in ELASTIC}


def reset_elastic(slurm_cluster: dict[str, str]) -> None:
    """Every elastic node powered down and usable again (a failed resume leaves a node DOWN)."""
    env = slurm_cluster
    backend = SlurmBackend.from_env(env)
    Layout.of(slurm_cluster["CROSSDOCK_SLURM_DIR"]).resume_fail_file.unlink(missing_ok=True)
    failed = [n for n, p in powers(backend).items() if p == "failed"]
    if failed:
        subprocess.run(["scontrol", "update", f"nodename={','.join(failed)}", "state=resume"], env=env, check=False,
                       capture_output=True)
    up = [n for n, p in powers(backend).items() if p in ("on", "powering_up")]
    if up:
        subprocess.run(["scontrol", "update", f"nodename={','.join(up)}", "state=power_down_force"], env=env,
                       check=False, capture_output=True)
    wait_until("every elastic node powered down",
               lambda: set(powers(backend).values()) == {"powered_down"}, SUSPEND_TIMEOUT_S + RESUME_TIMEOUT_S + 30,
               story=lambda: power_story(slurm_cluster["CROSSDOCK_SLURM_DIR"]))


@pytest.fixture
def crossdock(request, slurm_cluster, tmp_path, redis_url, monkeypatch):
    """crossdock (Celery worker + scheduling loop) on the elastic partition, its nodes powered down."""
    from crossdock.runtime import Runtime
    from tests.conftest import Cluster

    reset_elastic(slurm_cluster)
    cfg = tmp_path / "crossdock.yaml"
    cfg.write_text(yaml.safe_dump(config(request.param)))
    env = {"CROSSDOCK_REDIS_URL": redis_url, "CROSSDOCK_STATE_DIR": str(tmp_path / "state"),
           "CROSSDOCK_CONFIG": str(cfg), "CROSSDOCK_PREFIX": f"p{uuid.uuid4().hex[:10]}",
           "CROSSDOCK_SLURM_ENV": slurm_cluster["CROSSDOCK_SLURM_ENV"]}
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    c = Cluster(Runtime.from_env(), tmp_path)
    c.backend = SlurmBackend.from_env(slurm_cluster, config=parse_config(config(request.param)))
    c.slurm_dir = slurm_cluster["CROSSDOCK_SLURM_DIR"]
    yield c
    c.close()
    reset_elastic(slurm_cluster)


def job_spec(out: Path, cpus: int = 4, seconds: float = 1) -> JobSpec:
    return JobSpec(command=["bash", "-c", f"sleep {seconds}; echo ran on $SLURMD_NODENAME"], cpus_per_task=cpus,
                   workdir=str(out.parent), stdout=str(out))


@pytest.mark.parametrize("crossdock", ["power_save"], indirect=True)
def test_crossdock_powers_up_nodes_for_its_backlog_runs_it_and_they_power_down_when_idle(crossdock, jobs_dir):
    rt, backend = crossdock.rt, crossdock.backend
    outs = [jobs_dir / f"power-{uuid.uuid4().hex[:8]}-{i}.out" for i in range(2)]
    since = log_size(crossdock.slurm_dir)
    jobs = service.submit(rt, [job_spec(o) for o in outs])  # one whole node each
    asked = time.monotonic()
    # crossdock's autoscaler powers up a node per job; until one is on, the jobs wait for them
    names = ELASTIC[:2]
    seen: dict[str, list[str]] = {n: ["powered_down"] for n in names}
    early: list[str] = []

    def ready() -> bool:
        states = powers(backend)
        for name in names:
            if seen[name][-1] != states[name]:
                seen[name].append(states[name])
        if "on" not in states.values():
            early.extend(f"{j.id} {j.state.value}" for j in rt.store.get_many([j.id for j in jobs])
                         if j.state is not JobState.PENDING)
        return all(seen[n][-1] == "on" for n in names)

    # Slurm sets a node that has not registered RESUME_TIMEOUT_S after its resume DOWN (never "on"),
    # so waiting past that bound only lets a slow machine pass, never a failed resume.
    story = lambda: f"power states seen: {seen}\n{power_story(crossdock.slurm_dir, since)}"  # noqa: E731
    wait_until("the powered-up nodes to be ready", ready, REACT_S + RESUME_TIMEOUT_S, interval=0.05, story=story)
    resumed = time.monotonic() - asked
    assert all(seen[n] == ["powered_down", "powering_up", "on"] for n in names), story()
    assert not early, f"placed before any node was on: {early}"
    assert backend.add_nodes("elastic", 2) == [ELASTIC[2]] and backend.remove_nodes("elastic", [ELASTIC[2]])
    done = crossdock.wait_all([j.id for j in jobs], timeout=60)
    started = time.monotonic() - asked
    assert {j.state for j in done} == {JobState.COMPLETED}
    assert sorted(o.read_text().split()[-1] for o in outs) == names  # one run each, on the nodes powered up
    print(f"power_up -> nodes ready {resumed:.2f}s; -> both jobs done {started:.2f}s")
    # Idle again: crossdock retires one now (drained, then powered down); Slurm's SuspendTime the other.
    assert backend.remove_nodes("elastic", [names[0], "cpu1"]) == [names[0]]
    wait_until(f"{names[0]} powered down by crossdock", lambda: powers(backend)[names[0]] == "powered_down",
               SUSPEND_TIMEOUT_S + 10)
    wait_until("every elastic node powered down", lambda: set(powers(backend).values()) == {"powered_down"},
               SUSPEND_TIME_S + SUSPEND_TIMEOUT_S + 15)
    assert backend.node_group("elastic").spare == 3


@pytest.mark.parametrize("crossdock", [None], indirect=True)
def test_a_resume_that_fails_requeues_and_the_job_runs_exactly_once_on_another_node(crossdock, jobs_dir,
                                                                                    slurm_cluster):
    """No provisioner: Slurm powers nodes up when crossdock places a job there. The first node's
    resume fails (DOWN after ResumeTimeout, Slurm requeues its job); crossdock requeues the job as a
    new attempt, which runs on another node."""
    rt, backend = crossdock.rt, crossdock.backend
    env = slurm_cluster
    fail_file = Layout.of(slurm_cluster["CROSSDOCK_SLURM_DIR"]).resume_fail_file
    power_log = Layout.of(slurm_cluster["CROSSDOCK_SLURM_DIR"]).power_log
    fail_file.write_text("\n".join(ELASTIC[:2]) + "\n")
    log_before = power_log.read_text() if power_log.exists() else ""
    story = lambda: (f"events: {[e['to'] for e in rt.store.events(job.id)]}\npowers: {powers(backend)}\n"  # noqa: E731
                     + power_story(slurm_cluster["CROSSDOCK_SLURM_DIR"], len(log_before)))
    # elastic3 taken by a job crossdock did not submit, so crossdock's lands on elastic1 or elastic2.
    foreign = subprocess.run(["sbatch", "--parsable", "-p", "elastic", "-w", ELASTIC[2], "-c", "4", "-o", "/dev/null",
                              "--wrap", "sleep 600"], env=env, capture_output=True, text=True, check=True).stdout.strip()
    try:
        wait_until("the foreign job to hold elastic3", lambda: powers(backend)[ELASTIC[2]] != "powered_down", 10)
        out = jobs_dir / f"resume-{uuid.uuid4().hex[:8]}.out"
        job, = service.submit(rt, [job_spec(out)])
        first = wait_until("the failing resume", lambda: next(
            (n for n in ELASTIC[:2] if f"resume {n}: left off" in power_log.read_text()[len(log_before):]), None),
            REACT_S + 15, story=story)
        fail_file.write_text(first + "\n")  # the other node resumes from now on
        # the failed resume's ResumeTimeout, the requeue, the other node's resume (itself bounded by
        # ResumeTimeout) and the job's second
        wait_until("the job to end on the other node", lambda: rt.store.get(job.id).state in TERMINAL,
                   2 * RESUME_TIMEOUT_S + 2 * REACT_S + 30, story=story)
        done = rt.store.get(job.id)
        events = [e["to"] for e in rt.store.events(job.id)]
    finally:
        subprocess.run(["scancel", foreign], env=env, check=False)
    assert done.state is JobState.COMPLETED, events
    assert "NODE_FAIL" in events and done.attempts >= 2
    assert powers(backend)[first] == "failed"
    other = ELASTIC[1] if first == ELASTIC[0] else ELASTIC[0]
    assert out.read_text().split() == ["ran", "on", other]  # exactly one run, never on the failed node


@pytest.mark.parametrize("driver", ["cli", "rest"])
def test_both_drivers_see_the_same_node_group_and_estimate_through_slurm(driver, slurm_cluster, jobs_dir):
    """slurmrestd's /nodes carries the power flags sinfo --json does; the will-run test and power
    changes go through the REST driver's CLI fallback (v0.0.38 has neither)."""
    cfg = parse_config({**config("power_save"), "pools": {
        "elastic": {"backend": "slurm", "partition": "elastic", "provisioner": "power_save"},
        "hpc": {"backend": "slurm", "partition": "gpu-a100"}}})
    cli = SlurmBackend.from_env(slurm_cluster, config=cfg)
    backend = SlurmBackend.from_env(slurm_cluster, driver=driver, config=cfg)
    assert backend.node_group("elastic") == cli.node_group("elastic")
    nodes = {n.name: n for n in backend.inventory().nodes}
    assert {nodes[n].labels["slurm.power"] for n in ELASTIC} <= {"on", "powered_down", "powering_up", "powering_down"}
    assert all(not nodes[n].schedulable for n in ELASTIC if nodes[n].labels["slurm.power"] != "on")
    job = Job(id=1, spec=JobSpec(command=["true"], workdir=str(jobs_dir)), queue="batch")
    assert backend.estimate_start(job, "hpc") is not None  # an idle node: about now
    assert backend.estimate_start(job, "hpc") < 60
