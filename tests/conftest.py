"""Shared fixtures: a real Redis (the embedded one) and, for end-to-end tests, a real Celery
worker plus the scheduling loop, all bound to a temporary state directory."""

from __future__ import annotations

import os
import re
import threading
import time
import uuid
import warnings
from pathlib import Path

import pytest
import yaml

from tests import parallel

CI = os.environ.get("CI") == "true"

TEST_CONFIG = {
    "priority_classes": {
        "inference": {"value": 1000, "preemptible": False},
        "preprocessing": {"value": 500, "preemptible": False},
        "training": {"value": 100, "preemptible": True, "grace_seconds": 1},
    },
    "pools": {"local": {"backend": "local", "nodes": [{"name": "localhost", "cpus": 4, "memory_mib": 8192,
                                                        "gpus": 2, "gpu_model": "A100"}]}},
    "queues": {
        "training": {"priority_class": "training", "pools": ["local"], "placement": "binpack",
                     "per_job": {"cpu": 16, "gpu": 8}},
        "inference": {"priority_class": "inference", "pools": ["local"], "placement": "spread"},
        "preprocessing": {"priority_class": "preprocessing", "pools": ["local"], "placement": "most-requested"},
    },
    "default_queue": "preprocessing",
    "scheduler": {"interval_seconds": 0.2, "kill_wait_seconds": 1, "lease_seconds": 2},
}


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory) -> str:
    from crossdock.backends.redis_store import embedded

    state = tmp_path_factory.mktemp("redis")
    url = embedded.ensure_running(state)
    yield url
    embedded.stop(state)


@pytest.fixture
def crossdock_env(tmp_path, redis_url, monkeypatch):
    """Environment for one test: its own key prefix, state dir and config."""
    cfg = tmp_path / "crossdock.yaml"
    cfg.write_text(yaml.safe_dump(TEST_CONFIG))
    env = {"CROSSDOCK_REDIS_URL": redis_url, "CROSSDOCK_STATE_DIR": str(tmp_path / "state"),
           "CROSSDOCK_CONFIG": str(cfg), "CROSSDOCK_PREFIX": f"t{uuid.uuid4().hex[:10]}"}
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    return env


@pytest.fixture
def runtime(crossdock_env):
    from crossdock.runtime import Runtime

    return Runtime.from_env()


@pytest.fixture
def store(runtime):
    return runtime.store


class Cluster:
    """A running crossdock: one Celery worker process and the scheduler loop in a thread."""

    def __init__(self, rt, tmp_path: Path):
        from crossdock.workers.app import celery_sender, make_app
        from crossdock.workers.leader import Scheduler

        self.rt, self.tmp = rt, tmp_path
        self.app = make_app(rt.redis_url)
        self.send = celery_sender(self.app)
        self.scheduler = Scheduler(rt, self.send)
        self.cycles = 0
        """Scheduling cycles run so far: a test waits on it to know the loop had its chance."""
        cycle_once = self.scheduler.cycle_once

        def counted():
            try:
                return cycle_once()
            finally:
                self.cycles += 1

        self.scheduler.cycle_once = counted
        self.stop_event = threading.Event()
        self.thread = threading.Thread(target=self.scheduler.run, args=(self.stop_event, 0.5), daemon=True)
        self.restart_worker()
        self.thread.start()

    def kill_worker(self) -> None:
        os.killpg(self.worker.pid, 9)
        self.worker.wait()

    def restart_worker(self) -> None:
        from crossdock.workers.supervision import start_worker

        self.worker = start_worker(self.rt, 2, self.tmp / "worker.log", loglevel="INFO")

    def wait(self, job_id: int, states=None, timeout: float = 60):
        from crossdock.queue.states import TERMINAL

        states = states or TERMINAL
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            job = self.rt.store.get(job_id)
            if job.state in states:
                return job
            time.sleep(0.1)
        log = (self.tmp / "worker.log").read_text(errors="replace")[-3000:]
        raise AssertionError(f"job {job_id} still {job.state} ({job.reason}) after {timeout}s\n{log}")

    def wait_cycles(self, n: int = 2, timeout: float = 30) -> None:
        """Return once ``n`` more scheduling cycles have run (from start to end)."""
        target = self.cycles + n + 1  # the cycle under way now may have read its state already
        deadline = time.monotonic() + timeout
        while self.cycles < target:
            if time.monotonic() > deadline:
                raise AssertionError(f"only {self.cycles} scheduling cycles, wanted {target}, after {timeout}s")
            time.sleep(0.05)

    def send_tracked(self, name: str, args: list, backend_kind: str) -> str:
        """Send one task as ``send`` does; its Celery task id, for :meth:`wait_task`."""
        from crossdock.workers.app import queue_for

        return self.app.send_task(name, args=args, queue=queue_for(backend_kind)).id

    def wait_task(self, name: str, task_id: str, timeout: float = 30) -> str:
        """What task ``task_id`` returned (or ``raised ...``/``retry: ...``) once a worker ran it.

        crossdock ignores Celery results by design, so the worker's INFO line for the task is
        where a test sees it finish."""
        done = re.compile(rf"Task {re.escape(name)}\[{re.escape(task_id)}\] "
                          rf"(?:succeeded in \S+: (.*)|((?:raised|retry:) .*))")
        log_file = self.tmp / "worker.log"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            m = done.search(log_file.read_text(errors="replace")) if log_file.exists() else None
            if m:
                return m.group(1) if m.group(1) is not None else m.group(2)
            time.sleep(0.1)
        tail = log_file.read_text(errors="replace")[-3000:] if log_file.exists() else "(no worker log)"
        raise AssertionError(f"task {name}[{task_id}] not run by a worker after {timeout}s\n{tail}")

    def wait_all(self, ids: list[int], timeout: float = 120) -> list:
        """The jobs ``ids`` once every one of them has ended."""
        from crossdock.queue.states import TERMINAL

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            jobs = self.rt.store.get_many(ids)
            if all(j.state in TERMINAL for j in jobs):
                return jobs
            time.sleep(0.2)
        raise AssertionError(f"not all terminal after {timeout}s: {[(j.id, j.state.value) for j in jobs]}")

    def close(self) -> None:
        self.stop_event.set()
        self.thread.join(10)
        from crossdock.workers.supervision import stop_worker

        stop_worker(self.worker, 15)


@pytest.fixture
def cluster(runtime, tmp_path):
    c = Cluster(runtime, tmp_path)
    yield c
    c.close()


# --- real services shared by the suites that need them (contract, integration) ----------------------


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in {"1", "true", "yes"}


def k8s_unavailable(reason: str) -> None:
    """Skip, or fail under ``CI=true``: a Kubernetes test that silently did not run is worse than a red one."""
    if in_ci():
        pytest.fail(f"Kubernetes control plane unavailable under CI=true: {reason}", pytrace=False)
    pytest.skip(f"Kubernetes control plane unavailable: {reason}")


@pytest.fixture(scope="session")
def k8s_kubeconfig():
    """``KUBECONFIG``, else the shared local plane of ``crossdock.dev.k8s`` (``k8s.session()``)."""
    import contextlib

    from crossdock.dev import k8s

    if os.environ.get("KUBECONFIG"):
        yield Path(os.environ["KUBECONFIG"])
        return
    with contextlib.ExitStack() as stack:
        try:
            path = stack.enter_context(k8s.session(keep=os.environ.get("CROSSDOCK_K8S_KEEP") == "1"))
        except k8s.MissingBinariesError as err:
            k8s_unavailable(str(err))
        except k8s.ControlPlaneError as err:
            pytest.fail(f"starting the local control plane failed: {err}", pytrace=False)
        yield path


@pytest.fixture(scope="session")
def k8s_client(k8s_kubeconfig):
    """A ``kubernetes.client.ApiClient`` for the cluster, checked to answer."""
    try:
        from kubernetes import client, config
    except ImportError as err:
        k8s_unavailable(f"the kubernetes client is not installed: {err}")
    api = config.new_client_from_config(config_file=str(k8s_kubeconfig))
    try:
        client.VersionApi(api).get_code()
    except Exception as err:  # noqa: BLE001 - any failure here means unreachable
        api.close()
        k8s_unavailable(f"{k8s_kubeconfig}: {err}")
    yield api
    api.close()


@pytest.fixture(scope="session")
def slurm_session() -> dict[str, str]:
    """The local Slurm cluster (``crossdock.dev.slurm``), started when needed: the environment its
    clients need. A cluster that cannot come up fails the test, never skips it."""
    from crossdock.dev import slurm as dev

    state_dir = os.environ.get("CROSSDOCK_SLURM_DIR")  # default: $CROSSDOCK_STATE_DIR/slurm
    dev.up(state_dir)
    current = dev.status(state_dir)
    assert current["up"] and current["rest"], f"local Slurm cluster is not up: {current}"
    return {**os.environ, **dev.read_env(state_dir), "CROSSDOCK_SLURM_DIR": current["dir"],
            "CROSSDOCK_SLURM_ENV": str(current["env_file"])}


@pytest.fixture(scope="module")
def slurm_cluster(slurm_session) -> dict[str, str]:
    """:func:`slurm_session`, with no job left in it and every node ready when a module starts:
    what an earlier module left behind (a failed test's jobs, a job a chaos run stranded) is
    cancelled and named in a warning, so it fails that module, not every module after it."""
    from crossdock.dev import slurm as dev

    left = dev.clear_jobs(slurm_session["CROSSDOCK_SLURM_DIR"])
    if left:
        warnings.warn(f"Slurm jobs {', '.join(left)} were left by an earlier module; cancelled", stacklevel=1)
    dev.wait_nodes_ready(dev.Layout.of(slurm_session["CROSSDOCK_SLURM_DIR"]))
    return slurm_session


@pytest.fixture(scope="session")
def jobs_dir():
    """Where jobs of the real backends write: under /tmp and world-writable (slurmrestd's local
    auth runs jobs as user slurm)."""
    import shutil
    import tempfile

    path = Path(tempfile.mkdtemp(prefix="crossdock-jobs-", dir="/tmp"))
    path.chmod(0o777)
    yield path
    shutil.rmtree(path, ignore_errors=True)


# --- parallel runs (pytest-xdist; the groups: tests/parallel.py) -------------------------------


def pytest_configure(config):
    parallel.configure(config)


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config, items):
    parallel.record(config, items)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    return parallel.scheduler(config, log)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    parallel.cpu(item, outcome.get_result())


def pytest_terminal_summary(terminalreporter):
    parallel.summary(terminalreporter)


# --- leaving -------------------------------------------------------------------------------------


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session, exitstatus):
    parallel.finish(session.config)
    session.config.stash[_EXIT] = int(exitstatus)


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config):
    """End the run with pytest's own exit status once everything is reported and torn down. A
    daemon thread some library leaves behind (a client's watcher, a browser driver's reader) can
    abort the interpreter's finalization (SIGABRT, exit 134) after every test passed; the status
    must be the tests'. ``CROSSDOCK_TEST_FINALIZE=1`` finalizes normally, to look for such a thread."""
    status = config.stash.get(_EXIT, None)
    if status is None or os.environ.get("CROSSDOCK_TEST_FINALIZE") == "1":
        return
    import sys

    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)


_EXIT = pytest.StashKey[int]()
