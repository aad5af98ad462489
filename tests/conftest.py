"""Shared fixtures: a real Redis (the embedded one) and, for end-to-end tests, a real Celery
worker plus the scheduling loop, all bound to a temporary state directory."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest
import yaml

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


def start_worker(env: dict[str, str], logfile: Path, queues: str = "crossdock.local") -> subprocess.Popen:
    argv = [sys.executable, "-m", "celery", "-A", "crossdock.workers.app", "worker", "-Q", queues,
            "-c", "2", "-P", "prefork", "--without-gossip", "--without-mingle", "--without-heartbeat",
            "-n", f"w{uuid.uuid4().hex[:6]}@%h", "--loglevel", "INFO"]
    log = open(logfile, "ab")
    return subprocess.Popen(argv, env={**os.environ, **env}, stdout=log, stderr=log, start_new_session=True)


class Cluster:
    """A running crossdock: one Celery worker process and the scheduler loop in a thread."""

    def __init__(self, rt, env, tmp_path: Path, queues: str = "crossdock.local"):
        from crossdock.workers.app import make_app
        from crossdock.workers.scheduler import Scheduler, celery_sender

        self.rt, self.env, self.tmp = rt, env, tmp_path
        self.app = make_app(rt.redis_url)
        self.send = celery_sender(self.app)
        self.scheduler = Scheduler(rt, self.send)
        self.stop_event = threading.Event()
        self.thread = threading.Thread(target=self.scheduler.run, args=(self.stop_event, 0.5), daemon=True)
        self.queues = queues
        self.worker = start_worker(env, tmp_path / "worker.log", queues)
        self.thread.start()

    def kill_worker(self) -> None:
        os.killpg(self.worker.pid, 9)
        self.worker.wait()

    def restart_worker(self) -> None:
        self.worker = start_worker(self.env, self.tmp / "worker.log", self.queues)

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

    def close(self) -> None:
        self.stop_event.set()
        self.thread.join(10)
        if self.worker.poll() is None:
            os.killpg(self.worker.pid, 15)
            try:
                self.worker.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(self.worker.pid, 9)


@pytest.fixture
def cluster(runtime, crossdock_env, tmp_path):
    c = Cluster(runtime, crossdock_env, tmp_path)
    yield c
    c.close()
