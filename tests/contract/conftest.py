"""One contract suite over every backend: the adapters, one small class per backend.

The ``contract`` fixture is parametrized over the backends; each param is the backend built by
the registry from a config with one pool ``box`` of that kind, a real JobStore (the session's
Redis, a key prefix of its own) and the real follower (``Scheduler.reconcile``):

- ``fake``: the in-memory fake (``crossdock.backends.fake``);
- ``local``: this machine, each job under a detached supervisor (followed by its heartbeat);
- ``slurm-cli``, ``slurm-rest``: the local Slurm cluster (``crossdock.dev.slurm``) through
  sbatch/scontrol or slurmrestd; it is started when needed and a failure to start FAILS the test;
- ``k8s``: the local control plane with kwok nodes (``crossdock.dev.k8s``, or ``KUBECONFIG``), a
  fresh namespace per test; unreachable, it skips locally and FAILS under ``CI=true``, as in
  ``tests/integration/kubernetes``.

A test asks for jobs by outcome: ``job(0)`` ends COMPLETED, ``job(3)`` FAILED with exit code 3,
``job(None)`` runs until it is stopped or ``release``d (then it exits with the code given).
Shell backends (local, Slurm) run ``true`` / ``sh -c 'exit 3'`` / a loop waiting for a file; the
fake and kwok end a job by its ``CROSSDOCK_SIMULATE_EXIT_CODE`` (kwok reads it as a pod
annotation, which ``release`` adds to a running pod).
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from crossdock import service
from crossdock.backends.redis_store.store import utcnow
from crossdock.queue.models import Job, JobSpec
from crossdock.queue.ports import Backend
from crossdock.queue.states import JobState
from crossdock.runtime import Runtime
from crossdock.settings import current_user
from crossdock.workers import tasks as worker_tasks
from crossdock.workers.leader import Scheduler

POOL = "box"
SIMULATE_EXIT_CODE = "CROSSDOCK_SIMULATE_EXIT_CODE"
TASKS = {"crossdock.dispatch": worker_tasks.dispatch, "crossdock.cancel": worker_tasks.cancel,
         "crossdock.preempt": worker_tasks.preempt}


# --- the adapters --------------------------------------------------------------------------------


class Adapter:
    """How one backend is configured, built, and made to end a job."""

    kind: str
    pool: dict[str, Any]
    nodes: list[str]
    """Where the jobs are placed (``job.nodes``, as a cycle would choose)."""

    def env(self) -> dict[str, str]:
        """The backend's settings, as environment variables."""
        return {}

    def backend(self, rt: Runtime) -> Backend:
        """The backend of a (new) process: built by the registry from ``rt``."""
        return rt.backends(self.kind)

    def spec(self, exit_code: int | None) -> JobSpec:
        raise NotImplementedError

    def release(self, job: Job, exit_code: int) -> None:
        """Make a running ``job(None)`` exit with ``exit_code``."""
        raise NotImplementedError

    def objects(self, job: Job, backend: Backend) -> int:
        """How many backend objects (submissions) exist for ``job``'s attempt."""
        raise NotImplementedError

    honours_grace = True
    """The backend's jobs live on through a preemption's grace period (kwok deletes pods at once)."""

    def victim(self, behaviour: str) -> JobSpec:
        """A job that reacts to SIGTERM as ``behaviour`` (one of ``VICTIMS``) says; simulated by default."""
        return simulated_spec(None)

    def victim_ready(self, job: Job) -> None:
        """Wait until the victim can receive its signal (its trap is set)."""

    def victim_reacts(self, job: Job, behaviour: str) -> None:
        """What a simulated victim does once signalled: exit 143 or checkpoint and exit 0."""
        if VICTIMS[behaviour] is not None:
            self.release(job, VICTIMS[behaviour])

    def checkpointed(self, job: Job) -> bool | None:
        """Whether the victim wrote its checkpoint (None: a simulated job writes nothing)."""
        return None


VICTIMS: dict[str, int | None] = {"keeps-running": None, "dies-of-term": 143, "exits-143": 143, "checkpoints": 0}
"""How a preempted job reacts to SIGTERM → the exit code a simulated one ends with (None: runs until killed)."""

_VICTIM_SCRIPTS = {
    # Ignores SIGTERM: ends only when killed at the end of its grace period.
    "keeps-running": "trap 'echo got TERM' TERM",
    # No trap: killed by the signal, as most programs are (Slurm: FAILED, ExitCode 0:15).
    "dies-of-term": "",
    "exits-143": "trap 'exit 143' TERM",
    "checkpoints": "trap 'echo saved > \"$VICTIM.ckpt\"; exit 0' TERM",
}


def shell_victim(behaviour: str, jobs_dir: Path, **spec: Any) -> JobSpec:
    mark = jobs_dir / f"victim-{uuid.uuid4().hex}"
    script = f'{_VICTIM_SCRIPTS[behaviour]}\ntouch "$VICTIM.ready"\nwhile :; do sleep 0.2; done\n'
    return JobSpec(command=["sh", "-c", script], env={"VICTIM": str(mark)}, workdir=str(jobs_dir),
                   stdout=str(jobs_dir / "job-%j.out"), **spec)


class ShellVictims:
    """Victims as shell scripts that trap SIGTERM (local and Slurm run them for real)."""

    jobs_dir: Path

    def victim(self, behaviour: str) -> JobSpec:
        return shell_victim(behaviour, self.jobs_dir, **self.limits)

    def victim_ready(self, job: Job) -> None:
        ready = Path(job.spec.env["VICTIM"] + ".ready")
        deadline = time.monotonic() + 60
        while not ready.exists():
            assert time.monotonic() < deadline, f"job {job.id}: victim never set its trap"
            time.sleep(0.1)

    def victim_reacts(self, job: Job, behaviour: str) -> None:
        pass  # the script reacts to the real signal

    def checkpointed(self, job: Job) -> bool | None:
        return Path(job.spec.env["VICTIM"] + ".ckpt").read_text() == "saved\n"


def simulated_spec(exit_code: int | None) -> JobSpec:
    env = {} if exit_code is None else {SIMULATE_EXIT_CODE: str(exit_code)}
    return JobSpec(command=["true"], env=env)


def shell_spec(exit_code: int | None, jobs_dir: Path, **spec: Any) -> JobSpec:
    """``true``, ``sh -c 'exit N'``, or (None) a loop that exits with the code written to its file."""
    spec.update(workdir=str(jobs_dir), stdout=str(jobs_dir / "job-%j.out"))
    if exit_code == 0:
        return JobSpec(command=["true"], **spec)
    if exit_code is not None:
        return JobSpec(command=["sh", "-c", f"exit {exit_code}"], **spec)
    flag = jobs_dir / f"release-{uuid.uuid4().hex}"
    wait = 'while [ ! -e "$CONTRACT_RELEASE" ]; do sleep 0.2; done; exit "$(cat "$CONTRACT_RELEASE")"'
    return JobSpec(command=["sh", "-c", wait], env={"CONTRACT_RELEASE": str(flag)}, **spec)


def release_shell(job: Job, exit_code: int) -> None:
    flag = Path(job.spec.env["CONTRACT_RELEASE"])
    tmp = flag.with_suffix(".tmp")
    tmp.write_text(str(exit_code))
    tmp.chmod(0o666)
    tmp.rename(flag)  # whole or absent: the loop never reads a half-written code


class FakeAdapter(Adapter):
    kind = "fake"
    pool = {"backend": "fake", "nodes": [{"name": "fake-0", "cpus": 8, "memory_mib": 8192}]}
    nodes = ["fake-0"]

    def __init__(self) -> None:
        self.fake: Any = None

    def backend(self, rt: Runtime) -> Backend:
        # The fake's memory is the backend's own state: a restarted process finds the same jobs
        # there, as it would find the same Slurm cluster.
        if self.fake is None:
            self.fake = rt.backends(self.kind)
        rt.backends.use(self.kind, self.fake)
        return self.fake

    def spec(self, exit_code: int | None) -> JobSpec:
        return simulated_spec(exit_code)

    def release(self, job: Job, exit_code: int) -> None:
        self.fake.finish(job.id, exit_code)

    def objects(self, job: Job, backend: Backend) -> int:
        return self.fake.created.count(f"fake:{job.id}:{job.attempts}")


class LocalAdapter(ShellVictims, Adapter):
    kind = "local"
    limits = {"time_limit_seconds": 300}
    pool = {"backend": "local", "nodes": [{"name": "localhost", "cpus": 4, "memory_mib": 4096}]}
    nodes = ["localhost"]

    def __init__(self, jobs_dir: Path) -> None:
        self.jobs_dir = jobs_dir
        self.submitted: list[tuple[int, int]] = []

    def backend(self, rt: Runtime) -> Backend:
        from crossdock.backends.local.backend import LocalBackend

        submitted = self.submitted

        class Counted(LocalBackend):
            """The local backend, counting its submissions: each starts a supervisor."""

            def submit(self, job: Job, fresh: bool = False) -> str:
                submitted.append((job.id, job.attempts))
                return super().submit(job, fresh)

        backend = Counted(rt.store, rt.config, rt.settings.state_dir, rt.child_env())
        rt.backends.use(self.kind, backend)
        return backend

    def spec(self, exit_code: int | None) -> JobSpec:
        return shell_spec(exit_code, self.jobs_dir, time_limit_seconds=300)

    def release(self, job: Job, exit_code: int) -> None:
        release_shell(job, exit_code)

    def objects(self, job: Job, backend: Backend) -> int:
        return self.submitted.count((job.id, job.attempts))


class SlurmAdapter(ShellVictims, Adapter):
    kind = "slurm"
    limits = {"time_limit_minutes": 10}
    pool = {"backend": "slurm", "partition": "cpu"}
    nodes = ["cpu2"]  # away from cpu1, where the Slurm integration tests preempt

    def __init__(self, driver: str, env_file: str, jobs_dir: Path) -> None:
        self.driver, self.env_file, self.jobs_dir = driver, env_file, jobs_dir

    def env(self) -> dict[str, str]:
        return {"CROSSDOCK_SLURM_ENV": self.env_file, "CROSSDOCK_SLURM_DRIVER": self.driver}

    def spec(self, exit_code: int | None) -> JobSpec:
        return shell_spec(exit_code, self.jobs_dir, time_limit_minutes=10)

    def release(self, job: Job, exit_code: int) -> None:
        release_shell(job, exit_code)

    def objects(self, job: Job, backend: Any) -> int:
        return sum(1 for j in backend.own_jobs() if backend.tags.key(j.comment) == backend.tags.job(job.id, job.attempts))


class KubernetesAdapter(Adapter):
    kind = "k8s"
    honours_grace = False  # kwok's pod-delete Stage removes a deleted pod at once
    pool = {"backend": "k8s", "selector": {"crossdock.io/pool": "cpu"}}
    nodes = ["cpu-1"]

    def __init__(self, kubeconfig: Path, namespace: str, api: Any) -> None:
        self.kubeconfig, self.namespace, self.api = kubeconfig, namespace, api

    def env(self) -> dict[str, str]:
        return {"CROSSDOCK_KUBECONFIG": str(self.kubeconfig), "CROSSDOCK_K8S_NAMESPACE": self.namespace,
                "CROSSDOCK_K8S_TTL_SECONDS": "600"}

    def spec(self, exit_code: int | None) -> JobSpec:
        return simulated_spec(exit_code)

    def release(self, job: Job, exit_code: int) -> None:
        """kwok ends a running pod once it carries an exit code (``crossdock.dev.k8s`` POD_STAGES)."""
        from kubernetes import client

        from crossdock.backends.kubernetes import manifests as m

        core = client.CoreV1Api(self.api)
        pods = core.list_namespaced_pod(self.namespace,
                                        label_selector=f"{m.LABEL_JOB_ID}={job.id},{m.LABEL_ATTEMPT}={job.attempts}")
        assert pods.items, f"job {job.id}: no pod to release"
        for pod in pods.items:
            core.patch_namespaced_pod(pod.metadata.name, self.namespace,
                                      {"metadata": {"annotations": {m.ANNOTATION_EXIT_CODE: str(exit_code)}}})

    def objects(self, job: Job, backend: Backend) -> int:
        from kubernetes import client

        from crossdock.backends.kubernetes import manifests as m

        found = client.BatchV1Api(self.api).list_namespaced_job(
            self.namespace, label_selector=f"{m.LABEL_JOB_ID}={job.id},{m.LABEL_ATTEMPT}={job.attempts}")
        return len(found.items)


# --- what a test drives --------------------------------------------------------------------------


class Contract:
    """One backend behind a real store, dispatched by the real tasks and followed by the real
    follower, all in this process (tasks run eagerly; what the follower sends is recorded)."""

    def __init__(self, adapter: Adapter) -> None:
        self.adapter = adapter
        self.sent: list[tuple[str, list, str]] = []
        """Tasks the scheduler's follower sent (a resend would be one)."""
        self.rt: Runtime | None = None
        self.restart()

    @property
    def store(self) -> Any:
        return self.rt.store

    @property
    def capabilities(self) -> Any:
        return self.backend.capabilities

    def restart(self) -> None:
        """Fresh process state on the same store and the same cluster: a new Runtime (store
        client, config, backends) and a new Scheduler, as after a crash of the leader."""
        if self.rt is not None:
            self.rt.backends.close()
        self.rt = Runtime.from_env(start_redis=False)
        self.backend = self.adapter.backend(self.rt)
        self.scheduler = Scheduler(self.rt, lambda *sent: self.sent.append(sent), holder=f"contract-{uuid.uuid4().hex[:6]}")

    def job(self, exit_code: int | None = 0, **spec: Any) -> Job:
        """A job stored SCHEDULED on the adapter's pool and nodes (attempt 1), as a cycle leaves it."""
        made = self.adapter.spec(exit_code)
        if spec:
            made = made.model_copy(update=spec)
        return self._stored(made)

    def _stored(self, made: JobSpec) -> Job:
        made = made.model_copy(update={"user": made.user or current_user()})  # a face stores its caller
        (saved,) = self.store.submit([Job(id=0, spec=made, queue="batch", priority_class="batch", priority=500,
                                          pools=[POOL])])
        assert self.store.transition(saved.id, JobState.SCHEDULED, bump_attempt=True, actor="contract",
                                     fields={"nodes": self.adapter.nodes, "pool": POOL, "backend": self.adapter.kind,
                                             "scheduled_time": utcnow()})
        return self.store.get(saved.id)

    def dispatch(self, job: Job, task_id: str | None = None) -> str:
        """The ``crossdock.dispatch`` task, run here as a worker would run the delivery ``task_id``."""
        return worker_tasks.dispatch.apply(args=[job.id, job.attempts], task_id=task_id or uuid.uuid4().hex).get()

    def run_task(self, name: str, args: list, kind: str) -> None:
        TASKS[name].apply(args=args).get()

    def cancel(self, job: Job) -> None:
        service.cancel(self.rt, [str(job.id)], self.run_task)

    def preempt(self, job: Job, grace_seconds: int = 0, behaviour: str | None = None) -> None:
        """As the leader does: mark the victim, then send the preempt task. ``behaviour``: a
        simulated victim reacts to its signal (before the task, which kwok's pods do not outlive)."""
        self.store.request_preempt(job.id, grace_seconds)
        if behaviour is not None:
            self.adapter.victim_reacts(job, behaviour)
        self.run_task("crossdock.preempt", [job.id, grace_seconds], self.adapter.kind)

    def victim(self, behaviour: str) -> Job:
        """A SCHEDULED job (as ``job``) that reacts to SIGTERM as ``behaviour`` says."""
        return self._stored(self.adapter.victim(behaviour))

    def release(self, job: Job, exit_code: int = 0) -> None:
        self.adapter.release(job, exit_code)

    def objects(self, job: Job) -> int:
        return self.adapter.objects(job, self.backend)

    def history(self, job_id: int) -> list[str]:
        """The states the job went through, from its event stream."""
        return [e["to"] for e in self.store.events(job_id)]

    def follow(self, job_id: int, *states: JobState, timeout: float = 90) -> Job:
        """Run the follower until the job is in one of ``states``."""
        deadline = time.monotonic() + timeout
        while True:
            self.scheduler.reconcile()
            job = self.store.get(job_id)
            if job.state in states:
                return job
            if time.monotonic() > deadline:
                raise AssertionError(f"job {job_id} on {self.adapter.kind} still {job.state.value} ({job.reason}) "
                                     f"after {timeout}s, not {[s.value for s in states]}; went {self.history(job_id)}")
            time.sleep(0.2)

    def close(self) -> None:
        """Stop what a test left running (best effort), and the backends' watches."""
        for job in self.store.get_many(self.store.active_ids()):
            with contextlib.suppress(Exception):
                self.store.cancel(job.id)
                self.backend.cancel(job)
        self.rt.backends.close()


def _config(adapter: Adapter) -> dict[str, Any]:
    return {
        "priority_classes": {"batch": {"value": 500, "grace_seconds": 1}},  # as tests/integration/kubernetes' arrays
        "pools": {POOL: adapter.pool},
        "queues": {"batch": {"priority_class": "batch", "pools": [POOL]}},
        "default_queue": "batch",
        "scheduler": {"interval_seconds": 0.2, "kill_wait_seconds": 1, "lease_seconds": 2},
    }


BACKENDS = [
    "fake",
    "local",
    pytest.param("slurm-cli", marks=pytest.mark.slurm),
    pytest.param("slurm-rest", marks=pytest.mark.slurm),
    pytest.param("k8s", marks=pytest.mark.kubernetes),
]


def _adapter(request: pytest.FixtureRequest) -> Adapter:
    name: str = request.param
    if name == "fake":
        return FakeAdapter()
    jobs_dir: Path = request.getfixturevalue("jobs_dir")
    if name == "local":
        return LocalAdapter(jobs_dir)
    if name.startswith("slurm-"):
        return SlurmAdapter(name.removeprefix("slurm-"), request.getfixturevalue("slurm_cluster")["CROSSDOCK_SLURM_ENV"], jobs_dir)
    return KubernetesAdapter(request.getfixturevalue("k8s_kubeconfig"), request.getfixturevalue("k8s_namespace"),
                             request.getfixturevalue("k8s_client"))


@pytest.fixture(params=BACKENDS)
def contract(request, tmp_path, redis_url, monkeypatch) -> Iterator[Contract]:
    adapter = _adapter(request)
    cfg = tmp_path / "crossdock.yaml"
    cfg.write_text(yaml.safe_dump(_config(adapter)))
    env = {"CROSSDOCK_REDIS_URL": redis_url, "CROSSDOCK_STATE_DIR": str(tmp_path / "state"),
           "CROSSDOCK_CONFIG": str(cfg), "CROSSDOCK_PREFIX": f"c{uuid.uuid4().hex[:10]}", **adapter.env()}
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    c = Contract(adapter)
    monkeypatch.setattr(worker_tasks, "runtime", lambda: c.rt)  # the tasks run in this "worker"
    yield c
    c.close()


# --- services ------------------------------------------------------------------------------------


@pytest.fixture
def k8s_namespace(k8s_client: Any) -> Iterator[str]:
    """A fresh namespace; its Jobs and pods are gone (kwok's capacity freed) after the test."""
    from kubernetes import client
    from kubernetes.client.rest import ApiException

    core, batch = client.CoreV1Api(k8s_client), client.BatchV1Api(k8s_client)
    name = f"cd-contract-{uuid.uuid4().hex[:8]}"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    deadline = time.monotonic() + 60
    while True:  # pods can be created once the namespace's default service account exists
        try:
            core.read_namespaced_service_account("default", name)
            break
        except ApiException as err:
            if err.status != 404 or time.monotonic() > deadline:
                raise
            time.sleep(0.25)
    yield name
    batch.delete_collection_namespaced_job(name, propagation_policy="Background")
    core.delete_collection_namespaced_pod(name, grace_period_seconds=0)
    deadline = time.monotonic() + 60
    while core.list_namespaced_pod(name).items and time.monotonic() < deadline:
        time.sleep(0.25)
    core.delete_namespace(name)
